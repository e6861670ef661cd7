"""Reading ALFWorld games: the PDDL problem, the goal, and ALFWorld's display names.

This is what the fast simulator needs from a ``game.tw-pddl`` (ours or an official one): the
objects and their types, the initial facts and the goal formula, all lower-cased as the PDDL
translator of the real engine lower-cases them, and the names the agent sees ("apple 1"),
numbered per class as ALFWorld's demangler numbers them (ids sorted, the first id of a class
getting the highest number).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from proas.errors import ProasError

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_sexpr(text: str) -> list[Any]:
    """Parse PDDL text (``;`` comments allowed) into nested lists of lower-case strings."""
    text = text.lower()
    if ";" in text:
        text = "\n".join(line.split(";", 1)[0] for line in text.splitlines())
    tokens = _TOKEN.findall(text)
    if '"' not in text and "\\" not in text:
        # the same lists, built by the JSON reader: "(" -> "[", ")" -> "]", names quoted
        body = ",".join([t if t == "(" or t == ")" else f'"{t}"' for t in tokens])
        body = body.replace("(,", "[").replace("(", "[").replace(",)", "]").replace(")", "]")
        try:
            out = json.loads(f"[{body}]")
        except ValueError:
            pass  # unbalanced (or a name JSON does not take): the reader below says which
        else:
            return out
    stack: list[list[Any]] = [[]]
    for tok in tokens:
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise ProasError("PDDL problem: unbalanced ')'")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    if len(stack) != 1:
        raise ProasError("PDDL problem: unbalanced '('")
    return stack[0]


@dataclass
class Problem:
    objects: dict[str, str]  # name -> PDDL type (agent, location, receptacle, object, otype, rtype)
    init: list[tuple[str, ...]]  # facts as (predicate, arg, ...)
    goal: Any  # nested list formula


def parse_problem(text: str) -> Problem:
    tree = parse_sexpr(text)
    define = next((x for x in tree if isinstance(x, list) and x and x[0] == "define"), None)
    if define is None:
        raise ProasError("PDDL problem: no (define ...) form")
    objects: dict[str, str] = {}
    init: list[tuple[str, ...]] = []
    goal: Any = None
    for part in define[1:]:
        if not isinstance(part, list) or not part:
            continue
        if part[0] == ":objects":
            pending: list[str] = []
            items = part[1:]
            i = 0
            while i < len(items):
                # "a b - type" (ALFWorld's state_to_pddl writes "#" before the replace)
                if items[i] in ("-", "#") and i + 1 < len(items):
                    for name in pending:
                        objects[name] = items[i + 1]
                    pending = []
                    i += 2
                else:
                    pending.append(items[i])
                    i += 1
            for name in pending:
                objects[name] = "object"
        elif part[0] == ":init":
            for fact in part[1:]:
                if isinstance(fact, list) and fact and list not in map(type, fact):  # names only
                    init.append(tuple(fact))
        elif part[0] == ":goal":
            goal = part[1] if len(part) > 1 else ["and"]
    if goal is None:
        raise ProasError("PDDL problem: no (:goal ...)")
    return Problem(objects, init, goal)


def display_names(ids: list[str]) -> dict[str, str]:
    """ALFWorld's demangled names for PDDL ids: ``'apple_bar__plus_01...' -> 'apple 1'``."""
    ids = sorted(set(ids))
    count: Counter[str] = Counter()
    for ident in ids:
        parts = ident.split("_bar_", 1)
        if len(parts) > 1:
            name = parts[0] + ("basin" if "basin" in ident else "")
            count[name] += 1
    remaining = {name: list(range(1, n + 1)) for name, n in count.items()}
    out = {}
    for ident in ids:
        text = ident
        for a, b in (("_bar_", "|"), ("_minus_", "-"), ("_plus_", "+"), ("_dot_", "."), ("_comma_", ",")):
            text = text.replace(a, b)
        parts = text.split("|", 1)
        if len(parts) == 1:
            out[ident] = f"{text} "
        else:
            name = parts[0] + ("basin" if "basin" in ident else "")
            out[ident] = f"{name} {remaining[name].pop()}"
    return out


# ---------------------------------------------------------------------------- goal formulas


def holds(formula: Any, facts: dict[str, set[tuple[str, ...]]]) -> bool:
    """Evaluate a PDDL goal (and / or / not / exists / = / atoms) against ``facts``.

    ``exists`` is solved by backtracking over the facts of each atom in turn, binding its
    variables, so a goal costs a few dozen lookups instead of a product over all objects.
    """
    return next(_solve([formula], {}, facts), None) is not None


def _solve(goals: list[Any], env: dict[str, str], facts) -> Iterator[dict[str, str]]:
    if not goals:
        yield env
        return
    first, rest = goals[0], goals[1:]
    head = first[0] if first else "and"
    if head == "and":
        yield from _solve(list(first[1:]) + rest, env, facts)
    elif head == "exists":
        # variables are bound by the atoms of the body; drop any outer binding of the same name
        names = [v for v in first[1] if isinstance(v, str) and v.startswith("?")]
        inner = {k: v for k, v in env.items() if k not in names}
        for sol in _solve([first[2]], inner, facts):
            yield from _solve(rest, {**env, **{k: v for k, v in sol.items() if k not in names}}, facts)
            break  # one witness is enough
    elif head == "or":
        for sub in first[1:]:
            found = False
            for sol in _solve([sub], env, facts):
                found = True
                yield from _solve(rest, sol, facts)
                break
            if found:
                return
    elif head == "not":
        # negation needs its variables bound: evaluate after the positive parts
        if rest and any(_unbound(first, env)):
            yield from _solve(rest + [first], env, facts)
            return
        if next(_solve([first[1]], env, facts), None) is None:
            yield from _solve(rest, env, facts)
    elif head == "=":
        if rest and any(_unbound(first, env)):
            yield from _solve(rest + [first], env, facts)
            return
        a, b = (env.get(x, x) for x in first[1:3])
        if a == b:
            yield from _solve(rest, env, facts)
    else:
        pattern = [env.get(x, x) for x in first[1:]]
        for fact in facts.get(head, ()):
            if len(fact) != len(pattern):
                continue
            new = dict(env)
            for p, v in zip(pattern, fact):
                if p.startswith("?"):
                    if new.setdefault(p, v) != v:
                        break
                elif p != v:
                    break
            else:
                yield from _solve(rest, new, facts)


def _unbound(formula: Any, env: dict[str, str]) -> Iterator[str]:
    if isinstance(formula, str):
        if formula.startswith("?") and formula not in env:
            yield formula
        return
    for sub in formula:
        yield from _unbound(sub, env)


# ---------------------------------------------------------------------------- compiled goals


class _Unsupported(Exception):
    pass


def compile_goal(formula: Any, static: dict[str, frozenset] | None = None) -> Callable[[dict[str, Any]], bool]:
    """``holds(formula, facts)`` as a function of ``facts``, prepared once per formula.

    The search is the one ``holds`` runs, in the same order with the same first-witness rules
    (conjunctions spliced in place, ``not`` and ``=`` deferred while their variables are unbound,
    one witness per ``exists`` and per ``or``); what is decided once is which variables are bound
    at each point (static: atoms bind all their variables), so an atom whose arguments are all
    known is one set lookup instead of a scan, and no goal lists are rebuilt. A formula outside
    that static subset (an ``or`` whose branches bind different variables, a goal ``holds`` would
    not finish) is left to ``holds`` itself.

    ``static``: facts that never change, by predicate: the function is then only for fact sets
    that hold these very sets under these predicates; an atom over one of them that binds
    variables looks its candidates up in an index (made on first use, in the set's own order)
    instead of scanning.
    """
    try:
        run, _ = _compile_seq([formula], frozenset(), static or {})
    except (_Unsupported, IndexError, TypeError, ValueError, AttributeError):
        return lambda facts: holds(formula, facts)
    done = lambda env, facts: True  # noqa: E731
    return lambda facts: run({}, facts, done)


def _qvars(formula: Any) -> set[str]:
    if isinstance(formula, str):
        return {formula} if formula.startswith("?") else set()
    out: set[str] = set()
    for sub in formula:
        out |= _qvars(sub)
    return out


def _compile_seq(goals: list[Any], bound: frozenset[str], static: dict[str, frozenset]):
    """(run(env, facts, k) -> bool, variables bound after) for the goal list ``goals``."""
    ops: list[Callable] = []  # op(nxt) -> run
    goals = list(goals)
    deferred = 0
    while goals:
        first, rest = goals[0], goals[1:]
        if not isinstance(first, list):
            raise _Unsupported
        head = first[0] if first else "and"
        if head == "and":
            goals = list(first[1:]) + rest
            continue
        if head in ("not", "=") and rest and (_qvars(first) - bound):
            deferred += 1
            if deferred > len(goals):  # every goal left waits on another: holds never ends
                raise _Unsupported
            goals = rest + [first]
            continue
        deferred = 0
        goals = rest
        if head == "exists":
            if not isinstance(first[1], list):
                raise _Unsupported
            names = frozenset(v for v in first[1] if isinstance(v, str) and v.startswith("?"))
            body, body_bound = _compile_seq([first[2]], bound - names, static)
            leaked = tuple(sorted(body_bound - names - bound))
            ops.append(_exists_op(body, names, leaked))
            bound = bound | frozenset(leaked)
        elif head == "or":
            subs = [_compile_seq([sub], bound, static) for sub in first[1:]]
            outs = {b for _, b in subs}
            if len(outs) > 1:
                raise _Unsupported
            ops.append(_or_op([s for s, _ in subs]))
            bound = outs.pop() if outs else bound
        elif head == "not":
            sub, _ = _compile_seq([first[1]], bound, static)
            ops.append(_not_op(sub))
        elif head == "=":
            a, b = first[1:3]
            if not (isinstance(a, str) and isinstance(b, str)):
                raise _Unsupported
            ops.append(_eq_op(a, b))
        else:
            if not isinstance(head, str) or not all(isinstance(x, str) for x in first[1:]):
                raise _Unsupported
            after = bound | _qvars(first[1:])
            # the atoms right after a scan whose variables it binds are checked on each fact it
            # meets before anything is bound (the search would test them next, in this order)
            checks = []
            if not all(not a.startswith("?") or a in bound for a in first[1:]):
                while goals and isinstance(goals[0], list):
                    nxt_goal = goals[0]
                    if not nxt_goal or nxt_goal[0] == "and":
                        goals = list(nxt_goal[1:]) + goals[1:]
                        continue
                    h = nxt_goal[0]
                    if (
                        not isinstance(h, str)
                        or h in ("or", "not", "exists", "=")
                        or not all(isinstance(x, str) and (not x.startswith("?") or x in after) for x in nxt_goal[1:])
                    ):
                        break
                    checks.append((h, nxt_goal[1:]))
                    goals = goals[1:]
            ops.append(_atom_op(head, first[1:], bound, static.get(head), checks, static))
            bound = after

    def tail(env, facts, k):
        return k(env, facts)

    run = tail
    for op in reversed(ops):
        run = op(run)
    return run, bound


def _exists_op(body, names, leaked):
    def make(nxt):
        def run(env, facts, k):
            inner = {k2: v for k2, v in env.items() if k2 not in names} if names & env.keys() else env
            found: list = []
            if not body(inner, facts, lambda sol, _facts: found.append(sol) or True):
                return False
            sol = found[0]
            if leaked:
                env = dict(env)
                for var in leaked:
                    env[var] = sol[var]
            return nxt(env, facts, k)

        return run

    return make


def _or_op(subs):
    def make(nxt):
        def run(env, facts, k):
            found: list = []
            for sub in subs:
                if sub(env, facts, lambda sol, _facts: found.append(sol) or True):
                    return nxt(found[0], facts, k)
            return False

        return run

    return make


def _not_op(sub):
    def make(nxt):
        def run(env, facts, k):
            if sub(env, facts, _yes):
                return False
            return nxt(env, facts, k)

        return run

    return make


def _yes(env, facts):
    return True


def _eq_op(a, b):
    def make(nxt):
        def run(env, facts, k):
            if env.get(a, a) == env.get(b, b):
                return nxt(env, facts, k)
            return False

        return run

    return make


def _atom_op(pred: str, args: list[str], bound: frozenset[str], fixed_facts: frozenset | None,
             checks: list | None = None, static: dict[str, frozenset] | None = None):
    n = len(args)
    if all(not a.startswith("?") or a in bound for a in args):  # a lookup

        def make(nxt):
            if fixed_facts is not None:

                def run(env, facts, k):
                    if tuple([env[a] if a in bound else a for a in args]) in fixed_facts:
                        return nxt(env, facts, k)
                    return False

            else:

                def run(env, facts, k):
                    if tuple([env[a] if a in bound else a for a in args]) in facts.get(pred, ()):
                        return nxt(env, facts, k)
                    return False

            return run

        return make
    # a scan: fixed positions (constants, bound variables) to match, new variables to bind
    fixed = [(i, a) for i, a in enumerate(args) if not a.startswith("?") or a in bound]
    new: dict[str, list[int]] = {}
    for i, a in enumerate(args):
        if a.startswith("?") and a not in bound:
            new.setdefault(a, []).append(i)
    binds = [(v, pos[0]) for v, pos in new.items()]
    repeats = [(pos[0], j) for pos in new.values() for j in pos[1:]]
    first_pos = {v: pos[0] for v, pos in new.items()}
    tests = [_check(p, cargs, bound, first_pos, (static or {}).get(p)) for p, cargs in checks or ()]

    def matches(fact) -> bool:  # the fact's shape: its length and repeated variables
        return len(fact) == n and all(fact[i] == fact[j] for i, j in repeats)

    def accept(fact, env, facts, k, nxt) -> bool:
        """Once ``fact`` fits: its checks, then its new variables bound and on to ``nxt``."""
        for test in tests:
            if not test(fact, env, facts):
                return False
        new_env = dict(env)
        for v, i in binds:
            new_env[v] = fact[i]
        return nxt(new_env, facts, k)

    if fixed_facts is not None:
        # candidates by the values at the fixed positions, in the order a scan meets them
        index: dict[tuple, list] = {}
        for fact in fixed_facts:
            if matches(fact):
                index.setdefault(tuple(fact[i] for i, _ in fixed), []).append(fact)

        def make(nxt):
            def run(env, facts, k):
                for fact in index.get(tuple([env[a] if a in bound else a for _, a in fixed]), ()):
                    if accept(fact, env, facts, k, nxt):
                        return True
                return False

            return run

        return make

    def make(nxt):
        def run(env, facts, k):
            want = [(i, env[a] if a in bound else a) for i, a in fixed]
            for fact in facts.get(pred, ()):
                if len(fact) != n:
                    continue
                for i, v in want:
                    if fact[i] != v:
                        break
                else:
                    for i, j in repeats:
                        if fact[i] != fact[j]:
                            break
                    else:
                        if accept(fact, env, facts, k, nxt):
                            return True
            return False

        return run

    return make


def _check(pred: str, args: list[str], bound: frozenset[str], pos: dict[str, int], fixed_facts: frozenset | None):
    """test(fact, env, facts): the atom ``(pred *args)`` holds, its variables bound by ``env`` or
    by the positions ``pos`` of the scanned ``fact``."""
    parts = [(0, pos[a]) if a in pos else (1, a) if a in bound else (2, a) for a in args]
    if fixed_facts is None:
        if len(parts) == 1 and parts[0][0] == 0:
            i = parts[0][1]
            return lambda fact, env, facts: (fact[i],) in facts.get(pred, ())
        if len(parts) == 2 and parts[0][0] == 0 and parts[1][0] == 0:
            i, j = parts[0][1], parts[1][1]
            return lambda fact, env, facts: (fact[i], fact[j]) in facts.get(pred, ())
        return lambda fact, env, facts: _key(parts, fact, env) in facts.get(pred, ())
    if len(parts) == 1 and parts[0][0] == 0:
        i = parts[0][1]
        return lambda fact, env, facts: (fact[i],) in fixed_facts
    if len(parts) == 2 and parts[0][0] == 0 and parts[1][0] == 2:
        i, c = parts[0][1], parts[1][1]
        return lambda fact, env, facts: (fact[i], c) in fixed_facts
    if len(parts) == 2 and parts[0][0] == 0 and parts[1][0] == 0:
        i, j = parts[0][1], parts[1][1]
        return lambda fact, env, facts: (fact[i], fact[j]) in fixed_facts
    return lambda fact, env, facts: _key(parts, fact, env) in fixed_facts


def _key(parts, fact, env) -> tuple:
    return tuple([fact[x] if m == 0 else env[x] if m == 1 else x for m, x in parts])

"""Reading ALFWorld games: the PDDL problem, the goal, and ALFWorld's display names.

This is what the fast simulator needs from a ``game.tw-pddl`` (ours or an official one): the
objects and their types, the initial facts and the goal formula, all lower-cased as the PDDL
translator of the real engine lower-cases them, and the names the agent sees ("apple 1"),
numbered per class as ALFWorld's demangler numbers them (ids sorted, the first id of a class
getting the highest number).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator

from proas.errors import ProasError

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_sexpr(text: str) -> list[Any]:
    """Parse PDDL text (``;`` comments allowed) into nested lists of lower-case strings."""
    text = "\n".join(line.split(";", 1)[0] for line in text.lower().splitlines())
    stack: list[list[Any]] = [[]]
    for tok in _TOKEN.findall(text):
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
                if isinstance(fact, list) and fact and all(isinstance(a, str) for a in fact):
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

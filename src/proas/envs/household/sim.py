"""The fast backend: ALFWorld's PDDL domain and TextWorld grammar, simulated in pure Python.

It plays any ALFWorld game (``game.tw-pddl``): the state is the set of PDDL facts; each action
of ``alfred.pddl`` is a Python function of that set with the domain's preconditions and
effects; the feedback is the grammar of ``alfred.twl2`` as the real engine derives it. The
real engine's details that show in the text are reproduced on purpose:

- lists ("you see a apple 1, and a knife 1") are in the order of the PDDL ids (the engine sorts
  facts before matching them), with ", " and ", and " separators and "nothing" when empty;
- a command is admissible iff its grounded operator is applicable; commands are sorted and
  unique; anything else (including surrounding text) gives "Nothing happens.";
- after an object is taken out of a receptacle the engine keeps a ``not_inreceptacle`` fact
  (it stores negative effects as facts), which "look" consults to list loose objects;
- toggling always reports "You turn on ..." (the domain sets ``isToggled``, which the grammar
  tests, on every use) and a lamp never shows as "off" (no ``not_istoggled`` fact arises);
- going to the receptacle whose location the agent is at is not admissible;
- "look" in the middle of the room lists nothing (the intro lists every receptacle);
- only held objects can be examined (the engine's grounding drops the domain's other case);
- the help text starts without the grammar's leading newline.

Conformance with the real engine on generated games is checked by
``tests/test_household_conformance.py``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from proas.envs.household.pddl import Problem, compile_goal, display_names, parse_problem

HELP_TEXT = (
    "Available commands:\n"
    "  look:                             look around your current location\n"
    "  inventory:                        check your current inventory\n"
    "  go to (receptacle):               move to a receptacle\n"
    "  open (receptacle):                open a receptacle\n"
    "  close (receptacle):               close a receptacle\n"
    "  take (object) from (receptacle):  take an object from a receptacle\n"
    "  move (object) to (receptacle):  place an object in or on a receptacle\n"
    "  examine (something):              examine a receptacle or an object\n"
    "  use (object):                     use an object\n"
    "  heat (object) with (receptacle):  heat an object using a receptacle\n"
    "  clean (object) with (receptacle): clean an object using a receptacle\n"
    "  cool (object) with (receptacle):  cool an object using a receptacle\n"
    "  slice (object) with (object):     slice an object using a sharp object\n"
)
NOTHING = "Nothing happens."
_STATIONS = {"clean": "sinkbasintype", "heat": "microwavetype", "cool": "fridgetype"}
#: the commands admissible in every state, with their actions (one tuple each for every state)
_ALWAYS = tuple((cmd, (cmd,)) for cmd in ("help", "inventory", "look"))
#: the predicates that actions change; every other fact of a game is fixed
DYNAMIC = (
    "opened",
    "holds",
    "holdsany",
    "isclean",
    "ishot",
    "iscool",
    "ison",
    "istoggled",
    "issliced",
    "inreceptacle",
    "objectatlocation",
    "not_inreceptacle",
    "atlocation",
)
_TAKE_PUT = frozenset({"inreceptacle", "not_inreceptacle", "holds", "holdsany", "objectatlocation"})
#: the predicates each action kind can change: the goal is re-evaluated only when one it reads changed
CHANGES = {
    "goto": frozenset({"atlocation"}),
    "open": frozenset({"opened"}),
    "close": frozenset({"opened"}),
    "take": _TAKE_PUT,
    "put": _TAKE_PUT,
    "clean": frozenset({"isclean"}),
    "heat": frozenset({"ishot", "iscool"}),
    "cool": frozenset({"ishot", "iscool"}),
    "toggle": frozenset({"ison", "istoggled"}),
    "slice": frozenset({"issliced"}),
}


#: per action kind, the positions in ``DYNAMIC`` of the predicates it changes (``Sim.key``)
_CHANGED_AT = {kind: tuple(i for i, pred in enumerate(DYNAMIC) if pred in preds) for kind, preds in CHANGES.items()}


def goal_predicates(formula) -> frozenset[str]:
    out: set[str] = set()

    def walk(f):
        if isinstance(f, list) and f:
            if isinstance(f[0], str) and f[0] not in ("and", "or", "not", "exists", "forall", "="):
                out.add(f[0])
            for sub in f[1:] if isinstance(f[0], str) else f:
                walk(sub)

    walk(formula)
    return frozenset(out)


def _listing(items: list[str]) -> str:
    if not items:
        return "nothing"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


@dataclass
class Game:
    """A parsed game: static structure shared by every episode of it."""

    intro_task: str  # "Your task is to: ..."
    problem: Problem
    names: dict[str, str]
    agent: str
    objects: list[str]  # sorted PDDL ids
    receptacles: list[str]
    rtype: dict[str, str] = field(default_factory=dict)
    rloc: dict[str, str] = field(default_factory=dict)
    otype: dict[str, str] = field(default_factory=dict)
    static: dict[str, set[str]] = field(default_factory=dict)  # unary static predicates
    can_contain: set[tuple[str, str]] = field(default_factory=set)
    recs_at: dict[str, list[str]] = field(default_factory=dict)  # location -> sorted receptacles
    goal_preds: frozenset[str] = frozenset()
    #: ``holds(problem.goal, facts)``, compiled by the first reset (``pddl.compile_goal``)
    goal_check: Callable[[dict], bool] | None = field(default=None, repr=False, compare=False)
    #: the start of every episode, made by the first reset: (facts, text, key, ``State``)
    start: tuple | None = field(default=None, repr=False, compare=False)
    #: what other code derives from the game once and keeps (the abstraction's tables per roles)
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    #: the commands of the game, made when first admissible: (kind, args) -> (text, action)
    commands: dict[tuple, tuple[str, tuple]] = field(default_factory=dict, repr=False, compare=False)
    #: per receptacle: (examine command, openable, open command, close command, type, station verb)
    rec_info: dict[str, tuple] = field(default_factory=dict, repr=False, compare=False)
    #: the "go to" command of every receptacle that has a location, in id order, text -> action
    #: (the first of a text), and per location the texts that only receptacles there have (not
    #: admissible there)
    goto_all: dict[str, tuple] = field(default_factory=dict, repr=False, compare=False)
    gotos_at: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    #: the receptacles of each type, in id order
    recs_of_type: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    #: per receptacle with a location, the fact (agent, its location) that going there sets
    agent_at: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False, compare=False)
    #: what episodes derived from each state they reached (``State``), by the state's dynamic
    #: facts (``Sim``'s key); at most ``STATES_PER_GAME`` states
    states: dict[tuple, "State"] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> "Game":
        return cls.from_problem(parse_problem(data["pddl_problem"]), data.get("grammar", ""))

    @classmethod
    def from_problem(cls, problem: Problem, grammar: str) -> "Game":
        """The game of a parsed PDDL problem and the grammar that holds its task line."""
        ids = sorted({a for fact in problem.init for a in fact[1:]})
        names = display_names(ids)
        task = _task_line(grammar)
        objs = sorted(n for n, t in problem.objects.items() if t == "object")
        recs = sorted(n for n, t in problem.objects.items() if t == "receptacle")
        agent = next((n for n, t in problem.objects.items() if t == "agent"), "agent1")
        game = cls(task, problem, names, agent, objs, recs)
        for fact in problem.init:
            pred = fact[0]
            if pred == "receptacletype":
                game.rtype[fact[1]] = fact[2]
            elif pred == "receptacleatlocation":
                game.rloc[fact[1]] = fact[2]
                game.recs_at.setdefault(fact[2], []).append(fact[1])
            elif pred == "objecttype":
                game.otype[fact[1]] = fact[2]
            elif pred == "cancontain":
                game.can_contain.add((fact[1], fact[2]))
            elif pred in (
                "openable",
                "pickupable",
                "cleanable",
                "heatable",
                "coolable",
                "toggleable",
                "sliceable",
                "isreceptacleobject",
            ):
                game.static.setdefault(pred, set()).add(fact[1])
        for loc in game.recs_at:
            game.recs_at[loc].sort()
        game.goal_preds = goal_predicates(problem.goal)
        game._tables()
        return game

    def _tables(self) -> None:
        n = self.name
        gotos = [(self.rloc[r], f"go to {n(r)}", ("goto", r)) for r in self.receptacles if r in self.rloc]
        self.agent_at = {r: (self.agent, loc) for r, loc in self.rloc.items()}
        locs_of: dict[str, set[str]] = {}
        for loc, cmd, act in gotos:
            self.goto_all.setdefault(cmd, act)
            locs_of.setdefault(cmd, set()).add(loc)
        for loc, cmd, _ in gotos:
            if locs_of[cmd] == {loc}:
                self.gotos_at.setdefault(loc, []).append(cmd)
        openable = self.static.get("openable", set())
        verbs = {station: verb for verb, station in _STATIONS.items()}
        for r in self.receptacles:
            rt = self.rtype.get(r)
            if rt is not None:
                self.recs_of_type.setdefault(rt, []).append(r)
            self.rec_info[r] = (
                (f"examine {n(r)}", ("examine_r", r)),
                r in openable,
                (f"open {n(r)}", ("open", r)),
                (f"close {n(r)}", ("close", r)),
                rt,
                verbs.get(rt),  # type: ignore[arg-type]
            )

    def command(self, kind: str, a: str, b: str) -> tuple[str, tuple]:
        """(text, action) of a two-argument command: take, toggle (use), put (move), clean, heat,
        cool, slice; made once per game."""
        key = (kind, a, b)
        out = self.commands.get(key)
        if out is None:
            n = self.name
            if kind == "take":
                text = f"take {n(a)} from {n(b)}"
            elif kind == "toggle":
                text = f"use {n(a)}"
            elif kind == "put":
                text = f"move {n(a)} to {n(b)}"
            elif kind == "slice":
                text = f"slice {n(a)} with {n(b)}"
            else:
                text = f"{kind} {n(a)} with {n(b)}"
            out = self.commands[key] = (text, key)
        return out

    def name(self, ident: str) -> str:
        return self.names.get(ident, ident)

    def is_(self, pred: str, ident: str) -> bool:
        return ident in self.static.get(pred, ())


def _task_line(grammar: str) -> str:
    marker = "Your task is to: "
    i = grammar.find(marker)
    if i < 0:
        return marker + "UNKNOWN GOAL."
    j = grammar.find('"', i)
    return grammar[i:j]


#: the most states a game keeps what was derived from (``Game.states``); later states derive anew
STATES_PER_GAME = 4096
#: the games that keep their states, the most recently started last (``Sim.reset``): beyond
#: ``GAMES_WITH_STATES`` of them, the least recently started game's table is emptied, which
#: bounds the memory (a run's step plays 16 tasks, its validation 128)
GAMES_WITH_STATES = 256
_games_with_states: OrderedDict[int, Game] = OrderedDict()


def _started(game: Game) -> None:
    recent = _games_with_states
    key = id(game)  # held below, so no other game takes this id meanwhile
    if key in recent:
        recent.move_to_end(key)
        return
    recent[key] = game
    if len(recent) > GAMES_WITH_STATES:
        recent.popitem(last=False)[1].states.clear()


class State:
    """What one state of a game determines, derived on first need and kept for every episode
    that reaches the state again (the G episodes of a task revisit many): whether the goal
    holds, the admissible commands (map and sorted list), the objects held, the objects of the
    receptacles asked about, and one thing other code derives from the state (``memo``, named by
    ``memo_key``: the env's abstract state and invalid candidates for the task's roles). Shared
    by episodes and never modified after being set.

    A state reached by a command that leaves a predicate unchanged starts with what the state
    before derived from that predicate alone: the held objects when ``holds`` is unchanged, the
    receptacles' contents when ``inreceptacle`` is (the same dictionary, filled by either), all
    but the receptacle a take or move changed otherwise (``Sim.step``)."""

    __slots__ = ("won", "admissible", "sorted_admissible", "held", "by_rec", "memo_key", "memo")

    def __init__(self, won: bool) -> None:
        self.won = won
        self.admissible: dict[str, tuple] | None = None
        self.sorted_admissible: list[str] | None = None
        self.held: list[str] | None = None
        self.by_rec: dict[str, list[str]] | None = None
        self.memo_key: Any = None
        self.memo: Any = None


class Sim:
    """One episode of a ``Game``; ``reset`` / ``step`` mirror TextWorld's PddlEnv.

    A state is named by its dynamic facts (``key``: one frozenset per ``DYNAMIC`` predicate, the
    very sets of ``facts``, which a command replaces where it changes them, so that a reset or a
    clone copies no set); what is derived from a state is kept in the
    game's ``State`` of that key, so an episode that reaches a state the game has seen derives
    nothing again.
    """

    def __init__(self, game: Game) -> None:
        self.game = game
        self.reset()

    def clone(self) -> "Sim":
        """An independent copy of this episode (the game is shared; it never changes)."""
        other = Sim.__new__(Sim)
        other.game = self.game
        other.facts = dict(self.facts)  # frozensets: a command replaces those it changes
        # the state's derived facts are shared: a change of state moves to another ``State``
        other.won, other.moves, other.state, other.key, other.version = (self.won, self.moves, self.state, self.key,
                                                                          self.version)
        return other

    # ------------------------------------------------------------------ state

    def reset(self) -> str:
        g = self.game
        if g.start is None:
            g.start = self._first_start()
        facts, text, self.key, self.state = g.start
        _started(g)
        self.won = self.state.won
        self.facts = dict(facts)  # frozensets: a command replaces those it changes
        self.moves = 0
        self.version = 0
        return text

    def _first_start(self) -> tuple:
        """The start state of the game, computed once: every reset copies it."""
        g = self.game
        self.facts: dict[str, set[tuple[str, ...]]] = {}
        for fact in g.problem.init:
            self.facts.setdefault(fact[0], set()).add(fact[1:])
        for pred in DYNAMIC:
            self.facts.setdefault(pred, set())
        facts = {k: frozenset(v) for k, v in self.facts.items()}
        # the fixed facts are these very sets in every episode: the goal indexes them
        self.facts = dict(facts)
        g.goal_check = compile_goal(g.problem.goal, {k: v for k, v in facts.items() if k not in DYNAMIC})
        self.won = self._goal_holds()
        self.moves = 0
        #: the state's key and derived facts (class docstring)
        self.key: tuple[frozenset, ...] = tuple(facts[pred] for pred in DYNAMIC)
        self.state = g.states[self.key] = State(self.won)
        #: bumped on every change of state (looking, examining and failed commands change nothing)
        self.version = 0
        text = "-= Welcome to TextWorld, ALFRED! =-\n\n" + self._look() + "\n\n" + g.intro_task
        self.admissible()
        return (facts, text, self.key, self.state)

    def _goal_holds(self) -> bool:
        check = self.game.goal_check
        if check is None:  # a Game made by hand, not by from_data
            check = self.game.goal_check = compile_goal(self.game.problem.goal)
        return check(self.facts)

    @property
    def loc(self) -> str | None:
        for a, loc in self.facts["atlocation"]:
            if a == self.game.agent:
                return loc
        return None

    def held(self) -> list[str]:
        """The objects the agent holds, sorted; kept per state (a list shared by the state's
        episodes: read it, do not modify it)."""
        out = self.state.held
        if out is None:
            a = self.game.agent
            out = self.state.held = sorted([o for aa, o in self.facts["holds"] if aa == a])
        return out

    def contents(self, r: str) -> list[str]:
        """The objects in receptacle ``r``, sorted; kept per state for the receptacles asked about
        (a state is mostly asked about the one or two the agent stands at)."""
        by = self.state.by_rec
        if by is None:
            by = self.state.by_rec = {}
        out = by.get(r)
        if out is None:
            out = by[r] = sorted([o for o, rr in self.facts["inreceptacle"] if rr == r])
        return out

    def where(self, o: str) -> list[str]:
        return sorted(r for oo, r in self.facts["inreceptacle"] if oo == o)

    def accessible(self, r: str) -> bool:
        return not self.game.is_("openable", r) or (r,) in self.facts["opened"]

    # ------------------------------------------------------------------ commands

    def admissible_map(self) -> dict[str, tuple]:
        """Command text -> (action name, arguments), for every applicable grounded operator."""
        out = self.state.admissible
        if out is not None:
            return out
        g, f = self.game, self.facts
        loc = self.loc
        # every "go to" but those of the receptacles here, in the order of ``goto_all``
        out: dict[str, tuple] = dict(g.goto_all)
        for cmd in g.gotos_at.get(loc, ()):
            del out[cmd]
        add = out.setdefault
        here = g.recs_at.get(loc, []) if loc is not None else []
        held = self.held()
        hands_free = (g.agent,) not in f["holdsany"]
        if here or held:
            static = g.static
            pickupable = static.get("pickupable", ())
            toggleable = static.get("toggleable", ())
            opened = f["opened"]
            command = g.command
            otype = g.otype
            for r in here:
                info = g.rec_info.get(r)
                if info is None:  # pragma: no cover - a receptacle the problem does not declare
                    g.rec_info[r] = info = (
                        (f"examine {g.name(r)}", ("examine_r", r)),
                        g.is_("openable", r),
                        (f"open {g.name(r)}", ("open", r)),
                        (f"close {g.name(r)}", ("close", r)),
                        g.rtype.get(r),
                        {st: v for v, st in _STATIONS.items()}.get(g.rtype.get(r)),  # type: ignore[arg-type]
                    )
                (cmd, act), openable, open_cmd, close_cmd, rt, verb = info
                add(cmd, act)
                if openable:
                    if (r,) in opened:
                        add(*close_cmd)
                    else:
                        add(*open_cmd)
                open_ = not openable or (r,) in opened
                for o in self.contents(r):
                    # the domain's examineObject also allows objects in an open receptacle here, but
                    # the real engine's planner drops that disjunct: only held objects are examinable
                    if open_ and hands_free and o in pickupable:
                        add(*command("take", o, r))
                    if o in toggleable:
                        add(*(command("toggle", o, r)))
                for o in held:
                    if open_ and (rt, otype.get(o)) in g.can_contain:
                        add(*command("put", o, r))
                    if verb is not None and o in static.get(verb + "able", ()):
                        add(*command(verb, o, r))
            for o in held:
                add(f"examine {g.name(o)}", ("examine_o", o))
                if otype.get(o) in ("knifetype", "butterknifetype") and loc is not None:
                    for co, cl in sorted(f["objectatlocation"]):
                        if cl == loc and g.is_("sliceable", co):
                            add(*command("slice", co, o))
        for cmd, act in _ALWAYS:
            out[cmd] = act
        self.state.admissible = out
        return out

    def admissible(self) -> list[str]:
        adm = self.state.sorted_admissible
        if adm is None:
            adm = self.state.sorted_admissible = sorted(self.admissible_map())
        return list(adm)

    def step(self, command: str) -> str:
        """Apply a command; returns the feedback ("Nothing happens." if not admissible)."""
        act = self.admissible_map().get(command.strip())
        if act is None:
            return NOTHING
        text = self._apply(act)
        self.moves += 1
        changed = CHANGES.get(act[0], frozenset())
        if changed:
            self.version += 1
            f = self.facts
            key = list(self.key)
            for i in _CHANGED_AT[act[0]]:
                key[i] = f[DYNAMIC[i]]
            self.key = key = tuple(key)
            states = self.game.states
            state = states.get(key)
            if state is None:
                # the goal reads none of the changed predicates: it holds as before
                state = State(self._goal_holds() if changed & self.game.goal_preds else self.won)
                prev = self.state
                if "holds" not in changed:
                    state.held = prev.held
                by = prev.by_rec
                if "inreceptacle" not in changed:
                    if by is None:
                        by = prev.by_rec = {}
                    state.by_rec = by  # the same contents: one table for both states
                elif by:  # a take or a move: every receptacle but its own is as before
                    state.by_rec = {r: c for r, c in by.items() if r != act[2]}
                if len(states) < STATES_PER_GAME:
                    states[key] = state
            self.state = state
            self.won = state.won
        return text

    # ------------------------------------------------------------------ effects and text

    def _apply(self, act: tuple) -> str:
        g, f, a = self.game, self.facts, self.game.agent
        n = g.name
        kind = act[0]
        if kind == "goto":
            r = act[1]
            f["atlocation"] = frozenset([x for x in f["atlocation"] if x[0] != a] + [g.agent_at[r]])
            return f"You arrive at {n(r)}. " + self._examine_r(r)
        if kind == "open":
            f["opened"] = f["opened"] | {(act[1],)}
            return f"You open the {n(act[1])}. " + self._examine_r(act[1])
        if kind == "close":
            f["opened"] = f["opened"] - {(act[1],)}
            return f"You close the {n(act[1])}."
        if kind == "take":
            o, r = act[1], act[2]
            at = (o, self.loc)
            f["inreceptacle"] = f["inreceptacle"] - {(o, r)}
            f["not_inreceptacle"] = f["not_inreceptacle"] | {(o, r)}
            f["holds"] = f["holds"] | {(a, o)}
            f["holdsany"] = f["holdsany"] | {(a,)}
            f["objectatlocation"] = f["objectatlocation"] - {at}
            return f"You pick up the {n(o)} from the {n(r)}."
        if kind == "put":
            o, r = act[1], act[2]
            at = (o, self.loc)
            f["inreceptacle"] = f["inreceptacle"] | {(o, r)}
            f["not_inreceptacle"] = f["not_inreceptacle"] - {(o, r)}
            f["objectatlocation"] = f["objectatlocation"] | {at}
            f["holds"] = f["holds"] - {(a, o)}
            f["holdsany"] = f["holdsany"] - {(a,)}
            return f"You move the {n(o)} to the {n(r)}."
        if kind == "clean":
            f["isclean"] = f["isclean"] | {(act[1],)}
            return f"You clean the {n(act[1])} using the {n(act[2])}."
        if kind == "heat":
            f["ishot"] = f["ishot"] | {(act[1],)}
            f["iscool"] = f["iscool"] - {(act[1],)}
            return f"You heat the {n(act[1])} using the {n(act[2])}."
        if kind == "cool":
            f["iscool"] = f["iscool"] | {(act[1],)}
            f["ishot"] = f["ishot"] - {(act[1],)}
            return f"You cool the {n(act[1])} using the {n(act[2])}."
        if kind == "toggle":
            o = act[1]
            f["ison"] = f["ison"] ^ {(o,)}  # on if it was off, off if it was on
            f["istoggled"] = f["istoggled"] | {(o,)}
            return f"You turn on the {n(o)}."
        if kind == "slice":
            f["issliced"] = f["issliced"] | {(act[1],)}
            return f"You sliced the {n(act[1])} with the {n(act[2])}."
        if kind == "examine_r":
            return self._examine_r(act[1])
        if kind == "examine_o":
            return self._examine_o(act[1])
        if kind == "inventory":
            held = self.held()
            if (a,) in f["holdsany"]:
                return "You are carrying: " + _listing([f"a {n(o)}" for o in held]) + "."
            return "You are not carrying anything."
        if kind == "look":
            return self._look(action=True)
        if kind == "help":
            return HELP_TEXT
        raise AssertionError(kind)  # pragma: no cover

    def _examine_r(self, r: str) -> str:
        n = self.game.name
        openable = self.game.is_("openable", r)
        if openable and (r,) not in self.facts["opened"]:
            return f"The {n(r)} is closed."  # its contents are not shown: not listed
        items = _listing([f"a {n(o)}" for o in self.contents(r)])
        if openable:
            return f"The {n(r)} is open. In it, you see {items}."
        return f"On the {n(r)}, you see {items}."

    def _examine_o(self, o: str) -> str:
        g, f = self.game, self.facts
        n = g.name(o)
        if g.is_("isreceptacleobject", o):
            inner = sorted(i for i, outer in f.get("inreceptacleobject", ()) if outer == o)
            return f"This is a normal {n}. In it, you see " + _listing([f"a {g.name(i)}" for i in inner]) + "."
        clean, hot, cool, sliced = ((o,) in f[p] for p in ("isclean", "ishot", "iscool", "issliced"))
        if clean and hot and sliced:
            return f"This is a hot and clean sliced {n}."
        if clean and cool and sliced:
            return f"This is a cool and clean sliced {n}."
        if clean and sliced:
            return f"This is a clean sliced {n}."
        if hot and sliced:
            return f"This is a hot sliced {n}."
        if cool and sliced:
            return f"This is a cool sliced {n}."
        if clean and hot:
            return f"This is a hot and clean {n}."
        if clean and cool:
            return f"This is a cool and clean {n}."
        if hot:
            return f"This is a hot {n}."
        if clean:
            return f"This is a clean {n}."
        if cool:
            return f"This is a cold {n}."
        if g.is_("toggleable", o) and (o,) in f["istoggled"]:
            return f"This {n} is on."
        if g.is_("toggleable", o) and (o,) in f.get("not_istoggled", ()):
            return f"This {n} is off."  # pragma: no cover - the engine never stores this fact
        if g.is_("sliceable", o) and sliced:
            return f"This is a sliced {n}."  # pragma: no cover - caught by the sliced cases above
        return f"There's nothing special about {n}."

    def _look(self, action: bool = False) -> str:
        g, f = self.game, self.facts
        loc = self.loc
        here = g.recs_at.get(loc, []) if loc is not None else []
        if here:
            loose = [
                f"a {g.name(o)}"
                for o, ol in sorted(f["objectatlocation"])
                if ol == loc
                for r in here
                if (o, r) in f["not_inreceptacle"]
            ]
            return (
                "You are facing the "
                + _listing([g.name(r) for r in here])
                + ". Next to it, you see "
                + _listing(loose)
                + "."
            )
        # the intro derives this with no variables bound (every receptacle of the room); the
        # look action binds the agent's location, where no receptacle stands: "nothing"
        every = [] if action else sorted(g.rloc)
        return (
            "You are in the middle of a room. Looking quickly around you, you see "
            + _listing([f"a {g.name(r)}" for r in every])
            + "."
        )

"""The oracle: a shortest walkthrough for any task of the six types.

Every ALFWorld action costs one step, and the agent starts away from every receptacle, so a
shortest plan is: fetch the task object (go, open if closed, take), visit the station if the
task needs one (sink, microwave, fridge; they work closed), then go to the target and put it
down (opening it if closed); for ``look_at_obj_in_light`` go to the lamp and use it; for
``pick_two_obj_and_place`` do the fetch-and-place twice into the same receptacle. The oracle
tries every choice of object instance(s) and target receptacle on a copy of the simulator
and keeps the shortest plan that wins (ties: the first in id order), so the plan is optimal
and verified. ``tests/test_household_oracle.py`` compares its length with ALFWorld's own PDDL
planner.
"""

from __future__ import annotations

from itertools import permutations

from proas.envs.household.sim import Sim
from proas.errors import ProasError

_STATION_TYPE = {
    "pick_clean_then_place_in_recep": ("clean", "sinkbasintype"),
    "pick_heat_then_place_in_recep": ("heat", "microwavetype"),
    "pick_cool_then_place_in_recep": ("cool", "fridgetype"),
}


class _Planner:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.plan: list[str] = []

    def do(self, command: str) -> None:
        if command not in self.sim.admissible_map():
            raise _Dead(command)
        self.sim.step(command)
        self.plan.append(command)

    def go(self, r: str) -> None:
        if self.sim.loc != self.sim.game.rloc[r]:
            self.do(f"go to {self.sim.game.name(r)}")

    def open_if_closed(self, r: str) -> None:
        if not self.sim.accessible(r):
            self.do(f"open {self.sim.game.name(r)}")

    def fetch(self, o: str) -> None:
        if o in self.sim.held():
            return
        for other in self.sim.held():
            self.drop(other)
        r = self.sim.where(o)[0]
        self.go(r)
        self.open_if_closed(r)
        n = self.sim.game.name
        self.do(f"take {n(o)} from {n(r)}")

    def drop(self, o: str) -> None:
        """Put a held object that is in the way into the first receptacle that takes it."""
        g = self.sim.game
        here = g.recs_at.get(self.sim.loc, [])
        order = here + [r for r in g.receptacles if r not in here and r in g.rloc]
        for r in order:
            if (g.rtype.get(r), g.otype.get(o)) in g.can_contain:
                self.place(o, r)
                return
        raise _Dead(f"nowhere to put {o}")

    def place(self, o: str, r: str) -> None:
        self.go(r)
        self.open_if_closed(r)
        n = self.sim.game.name
        self.do(f"move {n(o)} to {n(r)}")


class _Dead(Exception):
    pass


def solve(sim: Sim, task_type: str, obj: str, recep: str = "", toggle: str = "") -> list[str]:
    """A shortest winning command list from the sim's current state.

    From the start state the plan is optimal; from a mid-game state (``hint``) it reuses what
    is done (an object held, treated, or already placed; a lamp on) and puts a held distractor
    down first, which is shortest in the usual cases but not searched exhaustively.

    ``obj``, ``recep``, ``toggle`` are ALFWorld class names (``"Apple"``, ``"CounterTop"``,
    ``"DeskLamp"``), as in ``traj_data.json``'s ``pddl_params``.
    """
    g = sim.game
    otype, rtype, ttype = (f"{x.lower()}type" if x else "" for x in (obj, recep, toggle))
    objs = [
        o for o in g.objects if g.otype.get(o) == otype and g.is_("pickupable", o) and (sim.where(o) or o in sim.held())
    ]
    targets = [r for r in g.receptacles if g.rtype.get(r) == rtype and r in g.rloc]
    candidates = []
    if task_type == "pick_two_obj_and_place":
        for t in targets:
            inside = [o for o in objs if t in sim.where(o)]
            rest = [o for o in objs if o not in inside]
            if inside:  # one is there already (mid-game): one more will do
                for o in rest:
                    candidates.append(lambda p, o=o, t=t: (p.fetch(o), p.place(o, t)))
            for o1, o2 in permutations(rest, 2):
                candidates.append(
                    lambda p, o1=o1, o2=o2, t=t: (p.fetch(o1), p.place(o1, t), p.fetch(o2), p.place(o2, t))
                )
    elif task_type == "look_at_obj_in_light":
        lamps = [(o, r) for o in g.objects if g.otype.get(o) == ttype for r in sim.where(o) if r in g.rloc]

        def look(p, o, lamp, host):
            p.fetch(o)
            p.go(host)
            if (lamp,) not in p.sim.facts["istoggled"] or not p.sim.won:
                p.do(f"use {g.name(lamp)}")

        for o in objs:
            for lamp, host in lamps:
                candidates.append(lambda p, o=o, lamp=lamp, host=host: look(p, o, lamp, host))
    elif task_type in _STATION_TYPE or task_type == "pick_and_place_simple":
        verb, stype = _STATION_TYPE.get(task_type, ("", ""))
        flag = {"clean": "isclean", "heat": "ishot", "cool": "iscool"}.get(verb, "")
        stations = [r for r in g.receptacles if g.rtype.get(r) == stype and r in g.rloc] if verb else [None]
        for o in objs:
            for s in stations:
                for t in targets:
                    def plan(p, o=o, s=s, t=t):
                        p.fetch(o)
                        if s is not None and (o,) not in p.sim.facts[flag]:
                            p.go(s)
                            p.do(f"{verb} {g.name(o)} with {g.name(s)}")
                        p.place(o, t)
                    candidates.append(plan)
    else:
        raise ProasError(f"no oracle for task type {task_type!r}")
    best: list[str] | None = None
    for build in candidates:
        p = _Planner(sim.clone())
        try:
            build(p)
        except _Dead:
            continue
        if p.sim.won and (best is None or len(p.plan) < len(best)):
            best = p.plan
    if best is None:
        raise ProasError(f"the oracle found no winning plan for this {task_type} game")
    return best

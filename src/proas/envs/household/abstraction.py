"""The abstract state of a household episode: task-relative and progress-relevant.

The reference graph needs states that recur across tasks of one type, so the abstraction
names things by their role in the task, never by instance ("cabinet 3", "apple 2"):

- ``at``: where the agent is relative to the task: ``start`` (middle of the room),
  ``target`` (a receptacle of the goal's class), ``station`` (sink / microwave / fridge, the
  one the task needs), ``lamp`` (the receptacle holding the goal's lamp), ``obj`` (a receptacle
  holding a task object that is not yet placed), or ``other``; ``target`` and ``obj`` are
  suffixed ``:closed`` while that receptacle is closed (so opening it is a visible step of
  progress; the stations work closed, so they carry no such mark);
- ``hold``: ``none``, ``obj`` (a task object, not yet treated), ``obj+done`` (a task object
  already cleaned/heated/cooled as the goal requires), or ``other`` (a distractor);
- ``placed``: how many task objects satisfying the goal's conditions are in target receptacles
  (0..1, or 0..2 for pick-two);
- ``lamp``: ``on`` once the goal's lamp was used (look tasks only).

Left out on purpose: instance names, which distractors lie where, what was examined, the
count of steps. Those change between tasks or do not move the task forward; keeping them
would split one progress state into many and stop the graph from generalising.
"""

from __future__ import annotations

from dataclasses import dataclass

from proas.envs.household.sim import Sim

_TREATMENT = {
    "pick_clean_then_place_in_recep": ("isclean", "sinkbasintype"),
    "pick_heat_then_place_in_recep": ("ishot", "microwavetype"),
    "pick_cool_then_place_in_recep": ("iscool", "fridgetype"),
}


@dataclass(frozen=True)
class TaskRoles:
    task_type: str
    otype: str  # lower-case PDDL type, e.g. "appletype"
    rtype: str
    ttype: str = ""

    @classmethod
    def from_params(cls, task_type: str, obj: str, recep: str = "", toggle: str = "") -> "TaskRoles":
        low = lambda x: f"{x.lower()}type" if x else ""  # noqa: E731
        return cls(task_type, low(obj), low(recep), low(toggle))


def abstraction_tables(sim: Sim, roles: TaskRoles) -> tuple:
    """What the abstraction reads of a game for a task's roles; made once per game and roles."""
    g = sim.game
    key = ("abstraction", roles)
    out = g.memo.get(key)
    if out is None:
        task_objs = frozenset(o for o, t in g.otype.items() if t == roles.otype)
        target_recs = frozenset(r for r, t in g.rtype.items() if roles.rtype and t == roles.rtype)
        lamp_objs = frozenset(o for o, t in g.otype.items() if roles.ttype and t == roles.ttype)
        out = g.memo[key] = (task_objs, target_recs, lamp_objs)
    return out


def abstract_state(sim: Sim, roles: TaskRoles, tables: tuple | None = None) -> str:
    """The abstract state of ``sim`` for a task's ``roles`` (module docstring); ``tables`` are
    what ``abstraction_tables`` gives for this game and roles, when the caller keeps them."""
    g, f = sim.game, sim.facts
    flag, station = _TREATMENT.get(roles.task_type, ("", ""))
    task_objs, target_recs, lamp_objs = tables if tables is not None else abstraction_tables(sim, roles)
    treated = f[flag] if flag else ()

    placed = 0
    if roles.rtype:
        inrec = f["inreceptacle"]
        placed_objs = {
            o for o in task_objs if (not flag or (o,) in treated) and any((o, r) in inrec for r in target_recs)
        }
        if roles.task_type == "pick_two_obj_and_place":
            per_rec: dict[str, int] = {}
            for o, r in f["inreceptacle"]:
                if o in placed_objs:
                    per_rec[r] = per_rec.get(r, 0) + 1
            placed = min(2, max(per_rec.values(), default=0))
        else:
            placed = min(1, len(placed_objs))

    loc = sim.loc
    here = g.recs_at.get(loc, []) if loc is not None else []
    at = "start" if not here else "other"
    if here:
        inrec = f["inreceptacle"]
        lamp_hosts = {r for r in here if any((o, r) in inrec for o in lamp_objs)} if lamp_objs else ()
        for r in here:
            if r in target_recs:
                at = "target"
            elif station and g.rtype.get(r) == station:
                at = "station"
            elif r in lamp_hosts:
                at = "lamp"
            elif any(o in task_objs for o in sim.contents(r)):
                at = "obj"
            else:
                continue
            break
        # closedness matters only where the task must reach inside (the object's or the target's
        # receptacle); stations work closed, so marking them would split states for nothing
        if at in ("target", "obj") and any(g.is_("openable", r) and (r,) not in f["opened"] for r in here):
            at += ":closed"

    held = sim.held()
    if not held:
        hold = "none"
    elif any(o in task_objs for o in held):
        hold = "obj+done" if flag and any(o in task_objs and (o,) in treated for o in held) else "obj"
    else:
        hold = "other"

    parts = [roles.task_type, f"at={at}", f"hold={hold}"]
    if roles.task_type == "look_at_obj_in_light":
        lamp_on = any(o in lamp_objs for (o,) in f["istoggled"])
        parts.append(f"lamp={'on' if lamp_on else 'off'}")
    else:
        parts.append(f"placed={placed}")
    return "|".join(parts)

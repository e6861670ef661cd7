"""Task generator: ALFWorld-format games for the six task types, deterministic by task id.

A task id ``"<split>-<type>-<index>"`` (e.g. ``"train-heat-0042"``) seeds a random generator
that picks one of ALFWorld's real floor plans (the receptacle ids and poses shipped in
``alfworld/gen/layouts``), a subset of its receptacles, the task's object and target classes,
and object placements under ALFRED's own validity tables (``alfworld.gen.constants``: what can
go where, what can be cleaned, heated, cooled, toggled, sliced). Openable receptacles start
closed, so objects placed in them are hidden until the agent opens them; distractor objects of
other classes fill the room.

The output is what ``alfworld-generate`` writes: ``traj_data.json`` (task type and PDDL
parameters), and ``game.tw-pddl`` (domain, grammar with the goal text, the PDDL problem in the
structure of ALFWorld's ``initial_state.pddl``, ``solvable``, ``walkthrough``). Rooms are kept
to at most ``MAX_RECEPTACLES`` receptacles so that the real engine stays usable.

Splits: ``train`` and ``valid_seen`` draw from the same floor plans; ``valid_unseen`` only from
floor plans held out of both (every plan whose number is a multiple of 10), as ALFWorld's unseen
split holds out rooms.
"""

from __future__ import annotations

import copy
import functools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proas.envs.household.pddl import Problem, parse_problem
from proas.errors import ProasError

#: bump when generated games change (part of the on-disk cache key and the manifests)
GENERATOR_VERSION = 1
MAX_RECEPTACLES = 12
MIN_RECEPTACLES = 8

TASK_TYPES = {
    "pick": "pick_and_place_simple",
    "look": "look_at_obj_in_light",
    "clean": "pick_clean_then_place_in_recep",
    "heat": "pick_heat_then_place_in_recep",
    "cool": "pick_cool_then_place_in_recep",
    "pick2": "pick_two_obj_and_place",
}
SHORT_OF = {v: k for k, v in TASK_TYPES.items()}

#: pool sizes per split and type: ALFWorld's own split sizes (train 3553, valid_seen 140,
#: valid_unseen 134 games)
SPLIT_SIZES = {
    "train": {"pick": 790, "look": 308, "clean": 650, "heat": 459, "cool": 533, "pick2": 813},
    "valid_seen": {"pick": 35, "look": 13, "clean": 27, "heat": 16, "cool": 25, "pick2": 24},
    "valid_unseen": {"pick": 24, "look": 18, "clean": 31, "heat": 23, "cool": 21, "pick2": 17},
}

_STATION = {"clean": "SinkBasin", "heat": "Microwave", "cool": "Fridge"}
_ABILITY = {"clean": "Cleanable", "heat": "Heatable", "cool": "Coolable"}
_LAMP_HOSTS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand")
_LAMPS = ("DeskLamp", "FloorLamp")
# classes the domain's actions name: a game must declare them even when absent
_DOMAIN_TYPES = {"otype": ("Knife", "ButterKnife"), "rtype": ("SinkBasin", "Microwave", "Fridge")}


#: the install that gives the generator ALFWorld's data files without building the planner
#: (the README's fast install; the version is the ``alfworld`` extra's pin in pyproject.toml)
ALFWORLD_FILES_INSTALL = "pip install --no-deps alfworld==0.4.2"


def _alfworld():
    try:
        import alfworld  # noqa: F401
        from alfworld.gen import constants, goal_library
    except ImportError:
        raise ProasError(
            "the household generator needs the `alfworld` package (its layouts, class tables and "
            f"PDDL files); install them in seconds with: {ALFWORLD_FILES_INSTALL} (the full "
            "'proas[alfworld]' extra builds the PDDL planner, about 11 minutes, and is only "
            "needed for the real engine, backend=alfworld)"
        ) from None
    return constants, goal_library


def alfworld_data_dir() -> Path:
    import alfworld

    return Path(alfworld.__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def domain_and_grammar() -> tuple[str, str]:
    """ALFWorld's PDDL domain and TextWorld grammar, as shipped inside the package."""
    _alfworld()
    base = alfworld_data_dir() / "data"
    return (base / "alfred.pddl").read_text(), (base / "alfred.twl2").read_text()


@dataclass
class Scene:
    number: int
    receptacles: dict[str, tuple[float, float, int, int]]  # ALFRED id -> pose
    object_classes: list[str]

    @property
    def room(self) -> str:
        return {0: "kitchen", 2: "livingroom", 3: "bedroom", 4: "bathroom"}[self.number // 100]


@functools.lru_cache(maxsize=1 << 16)  # ids of the shipped layouts: a few thousand
def receptacle_class(rid: str) -> str:
    parts = rid.split("|")
    return parts[4] if len(parts) == 5 else parts[0]


@functools.lru_cache(maxsize=1)
def scenes() -> dict[int, Scene]:
    _alfworld()
    base = alfworld_data_dir() / "gen" / "layouts"
    out = {}
    for path in sorted(base.glob("FloorPlan*-openable.json")):
        num = int(path.name[len("FloorPlan") : -len("-openable.json")])
        recs = {k: tuple(v) for k, v in json.loads(path.read_text()).items()}
        objs = json.loads((base / f"FloorPlan{num}-objects.json").read_text())
        out[num] = Scene(num, recs, list(objs))  # type: ignore[arg-type]
    if not out:
        raise ProasError(f"no floor-plan layouts found under {base}")
    return out


def is_unseen_scene(number: int) -> bool:
    return number % 10 == 0


@dataclass
class TaskSpec:
    """Everything the generator decided for one task; ``to_pddl`` renders it."""

    task_id: str
    task_type: str  # long ALFWorld name
    scene: int
    obj: str
    recep: str
    toggle: str = ""
    goal_text: str = ""
    start: str = ""
    receptacles: list[tuple[str, str]] = field(default_factory=list)  # (id, location)
    objects: list[tuple[str, str, str]] = field(default_factory=list)  # (id, receptacle id, location)

    @property
    def pddl_params(self) -> dict[str, Any]:
        return {
            "object_target": self.obj,
            "parent_target": self.recep,
            "toggle_target": self.toggle,
            "mrecep_target": "",
            "object_sliced": False,
        }


def parse_task_id(task_id: str) -> tuple[str, str, int]:
    """``"valid_seen-heat-0003"`` -> ``("valid_seen", "heat", 3)``; a bad id is a ProasError."""
    parts = str(task_id).split("-")
    if len(parts) != 3 or parts[0] not in SPLIT_SIZES or parts[1] not in TASK_TYPES or not parts[2].isdigit():
        raise ProasError(
            f"bad household task id {task_id!r}; expected '<split>-<type>-<index>' with split in "
            f"{sorted(SPLIT_SIZES)} and type in {sorted(TASK_TYPES)}, e.g. 'train-pick-0007'"
        )
    split, short, idx = parts[0], parts[1], int(parts[2])
    if idx >= SPLIT_SIZES[split][short]:
        raise ProasError(
            f"task id {task_id!r}: index out of range (the {split} pool has {SPLIT_SIZES[split][short]} {short} tasks)"
        )
    return split, short, idx


def make_task_id(split: str, short: str, index: int) -> str:
    return f"{split}-{short}-{index:04d}"


#: the fixed validation set's per-type counts: ALFWorld valid_seen as used in the paper
VALID_COUNTS = {"pick": 33, "look": 12, "clean": 25, "heat": 12, "cool": 24, "pick2": 22}


def fixed_valid_ids() -> list[str]:
    """The 128 fixed validation tasks: the first N of each type of the valid_seen pool."""
    return [make_task_id("valid_seen", short, i) for short, n in VALID_COUNTS.items() for i in range(n)]


def _can_contain(constants, rclass: str, oclass: str) -> bool:
    return oclass in constants.VAL_RECEPTACLE_OBJECTS.get(rclass, ())


def _pickupable_classes(constants) -> set[str]:
    out: set[str] = set()
    for objs in constants.VAL_RECEPTACLE_OBJECTS.values():
        out.update(objs)
    return {o for o in out if not o.endswith("Sliced")}


def _fmt(v: float) -> str:
    return f"{v:+06.2f}"


def generate_spec(task_id: str) -> TaskSpec:
    """Decide the room and task for ``task_id`` (deterministic)."""
    split, short, _ = parse_task_id(task_id)
    constants, goal_library = _alfworld()
    rng = random.Random(f"proas-household:{GENERATOR_VERSION}:{task_id}")
    all_scenes = scenes()
    unseen = split == "valid_unseen"
    pool = sorted(n for n in all_scenes if is_unseen_scene(n) == unseen)
    for _attempt in range(200):
        spec = _try_spec(task_id, short, all_scenes[rng.choice(pool)], rng, constants, goal_library)
        if spec is not None:
            return spec
    raise ProasError(f"could not generate task {task_id!r} (no valid room found)")  # pragma: no cover


def _try_spec(task_id, short, scene: Scene, rng: random.Random, constants, goal_library) -> TaskSpec | None:
    """One attempt at task ``task_id`` (type ``short``) in ``scene``; ``None`` when the room
    cannot host it (``generate_spec`` then draws another floor plan).

    The phases run in this order, and each draws from ``rng`` in turn, so the order is part of
    what a task id means (the shipped fingerprints check it): choose the task (its object,
    target and lamp), choose the room's receptacles, locate them and the agent, place the
    objects, and word the goal.
    """
    recs_by_class = _receptacles_by_class(scene, constants)
    pickable = _pickupable_classes(constants)
    scene_objs = [o for o in dict.fromkeys(scene.object_classes) if o in pickable]
    task = _choose_task(short, scene, set(recs_by_class), scene_objs, rng, constants)
    if task is None:
        return None
    chosen, lamp_host = _choose_receptacles(short, task, recs_by_class, rng)
    rec_loc, start = _locate(scene, chosen, rng)
    objects = _place_objects(short, task, scene_objs, chosen, rec_loc, lamp_host, rng, constants)
    if objects is None:
        return None
    template = rng.choice(goal_library.gdict[TASK_TYPES[short]]["templates"])
    goal_text = template.format(obj=task.obj.lower(), recep=task.recep.lower(), toggle=task.toggle.lower(), mrecep="")
    return TaskSpec(
        task_id=task_id,
        task_type=TASK_TYPES[short],
        scene=scene.number,
        obj=task.obj,
        recep=task.recep,
        toggle=task.toggle,
        goal_text=goal_text,
        start=start,
        receptacles=[(r, rec_loc[r]) for r in chosen],
        objects=objects,
    )


@dataclass
class _Task:
    """What a task asks, chosen before the room is furnished."""

    obj: str  # the object class to move
    recep: str  # the target receptacle class ("" for look)
    toggle: str  # the lamp class (look only, else "")
    needed: list[str]  # receptacle classes the task needs besides the target: its station
    holders: list[str]  # receptacle classes of the floor plan that can hold ``obj``, sorted


def _receptacles_by_class(scene: Scene, constants) -> dict[str, list[str]]:
    """The floor plan's fixed receptacle ids by class, keeping one per pose (two receptacles at
    one pose would share a location)."""
    recs_by_class: dict[str, list[str]] = {}
    seen_poses = set()
    for rid in sorted(scene.receptacles):
        rclass = receptacle_class(rid)
        pose = tuple(scene.receptacles[rid])
        if rclass not in constants.VAL_RECEPTACLE_OBJECTS or rclass in constants.MOVABLE_RECEPTACLES_SET:
            continue
        if pose in seen_poses:
            continue
        seen_poses.add(pose)
        recs_by_class.setdefault(rclass, []).append(rid)
    return recs_by_class


def _choose_task(
    short: str, scene: Scene, classes_here: set[str], scene_objs: list[str], rng: random.Random, constants
) -> _Task | None:
    """Phase 1: the lamp (look), the object class and the target receptacle class; ``None``
    when the floor plan lacks what the task type needs."""
    needed: list[str] = []
    toggle = ""
    if short in _STATION:
        if _STATION[short] not in classes_here:
            return None
        needed.append(_STATION[short])
        candidates = [o for o in scene_objs if o in constants.VAL_ACTION_OBJECTS[_ABILITY[short]]]
    else:
        candidates = list(scene_objs)
    if short == "look":
        lamps = [lamp for lamp in _LAMPS if lamp in scene.object_classes]
        hosts = [h for h in _LAMP_HOSTS if h in classes_here]
        if not lamps or not hosts:
            return None
        toggle = rng.choice(lamps)
    if not candidates:
        return None
    obj = rng.choice(sorted(candidates))
    holders = [r for r in sorted(classes_here) if _can_contain(constants, r, obj)]
    if short == "look":
        recep = ""
        if not holders:
            return None
    else:
        targets = [r for r in holders if r != _STATION.get(short)]
        # the target must leave somewhere else to start the object from
        targets = [r for r in targets if any(h != r for h in holders)]
        if not targets:
            return None
        recep = rng.choice(targets)
    return _Task(obj=obj, recep=recep, toggle=toggle, needed=needed, holders=holders)


def _choose_receptacles(
    short: str, task: _Task, recs_by_class: dict[str, list[str]], rng: random.Random
) -> tuple[list[str], str]:
    """Phase 2: the room's receptacle ids, sorted, and the lamp's host id (look, else "").

    Required ones first (the target, the station, the lamp host, a source for the object),
    then random others up to a room size of ``MIN_RECEPTACLES`` to ``MAX_RECEPTACLES``.
    """
    size = rng.randint(MIN_RECEPTACLES, MAX_RECEPTACLES)
    chosen: list[str] = []
    if task.recep:
        _take(task.recep, recs_by_class, chosen, rng)
    for n in task.needed:
        _take(n, recs_by_class, chosen, rng)
    lamp_host = ""
    if short == "look":
        lamp_host_class = rng.choice([h for h in _LAMP_HOSTS if h in recs_by_class])
        _take(lamp_host_class, recs_by_class, chosen, rng)
        lamp_host = next(r for r in chosen if receptacle_class(r) == lamp_host_class)
    sources = [h for h in task.holders if h != task.recep]
    _take(rng.choice(sources), recs_by_class, chosen, rng)
    rest = [r for rs in recs_by_class.values() for r in rs if r not in chosen]
    rng.shuffle(rest)
    chosen.extend(rest[: max(0, size - len(chosen))])
    chosen.sort()
    return chosen, lamp_host


def _take(rclass: str, recs_by_class: dict[str, list[str]], chosen: list[str], rng: random.Random) -> None:
    """Add a random not yet chosen receptacle of class ``rclass`` to ``chosen`` (if one is left)."""
    free = [r for r in recs_by_class[rclass] if r not in chosen]
    if free:
        chosen.append(rng.choice(free))


def _locate(scene: Scene, chosen: list[str], rng: random.Random) -> tuple[dict[str, str], str]:
    """Phase 3: each receptacle's location, the ALFRED grid point (quarter-metre steps) of its
    pose, and the agent's start location, a random point that is none of them."""
    used_locs: set[str] = set()
    rec_loc: dict[str, str] = {}
    for rid in chosen:
        x, z, rot, hor = scene.receptacles[rid]
        loc = f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{int(rot)}|{int(hor)}"
        while loc in used_locs:  # pragma: no cover - distinct poses give distinct points
            loc += "0"
        used_locs.add(loc)
        rec_loc[rid] = loc
    start = f"loc|{rng.randint(-20, 20)}|{rng.randint(-20, 20)}|{rng.choice((0, 90, 180, 270))}|30"
    while start in used_locs:
        start = f"loc|{rng.randint(-20, 20)}|{rng.randint(-20, 20)}|{rng.choice((0, 90, 180, 270))}|30"
    return rec_loc, start


def _place_objects(
    short: str,
    task: _Task,
    scene_objs: list[str],
    chosen: list[str],
    rec_loc: dict[str, str],
    lamp_host: str,
    rng: random.Random,
    constants,
) -> list[tuple[str, str, str]] | None:
    """Phase 4: ``(object id, receptacle id, location)`` of the task objects, the lamp and the
    distractors; ``None`` when a task object has nowhere to go."""
    objects: list[tuple[str, str, str]] = []
    used_ids: set[str] = set()
    # task objects: never already in a receptacle of the target class (the goal would hold at once)
    n_targets = rng.choice((2, 2, 3)) if short == "pick2" else rng.choice((1, 1, 1, 2))
    for _ in range(n_targets):
        if not _place(task.obj, _holders(constants, chosen, task.obj, task.recep), objects, used_ids, rec_loc, rng):
            return None
    if short == "look":
        objects.append((f"{task.toggle}|{_coords(rng)}", lamp_host, rec_loc[lamp_host]))
    # distractors: other classes found in this floor plan
    others = [o for o in scene_objs if o != task.obj]
    rng.shuffle(others)
    for oclass in others[: rng.randint(6, 12)]:
        _place(oclass, _holders(constants, chosen, oclass), objects, used_ids, rec_loc, rng)
    return objects


def _holders(constants, chosen: list[str], oclass: str, exclude_class: str = "") -> list[str]:
    """The receptacles of ``chosen`` that can hold ``oclass``, but none of ``exclude_class``."""
    return [
        r
        for r in chosen
        if _can_contain(constants, receptacle_class(r), oclass) and receptacle_class(r) != exclude_class
    ]


def _place(
    oclass: str,
    allowed: list[str],
    objects: list[tuple[str, str, str]],
    used_ids: set[str],
    rec_loc: dict[str, str],
    rng: random.Random,
) -> bool:
    """Put a new object of class ``oclass`` in a random one of ``allowed`` (appended to
    ``objects``); ``False`` when ``allowed`` is empty."""
    if not allowed:
        return False
    rid = rng.choice(allowed)
    oid = f"{oclass}|{_coords(rng)}"
    while oid in used_ids:  # pragma: no cover
        oid = f"{oclass}|{_coords(rng)}"
    used_ids.add(oid)
    objects.append((oid, rid, rec_loc[rid]))
    return True


def _coords(rng: random.Random) -> str:
    """An object id's coordinates part, as ALFRED writes them."""
    return "|".join(_fmt(rng.uniform(-3, 3)) for _ in range(3))


@functools.lru_cache(maxsize=1 << 16)
def mangle(ident: str) -> str:
    """ALFRED id -> PDDL name, as ALFWorld encodes it."""
    for a, b in (("|", "_bar_"), ("+", "_plus_"), ("-", "_minus_"), (".", "_dot_"), (",", "_comma_")):
        ident = ident.replace(a, b)
    return ident


def problem_parts(spec: TaskSpec) -> tuple[list[tuple[str, str]], list[tuple[str, ...]], str]:
    """The PDDL problem's objects (name, type), its initial facts (predicate, args...) as
    ALFWorld's ``initial_state.pddl`` writes them (case kept), and the goal's text."""
    constants, goal_library = _alfworld()
    oclass = {oid: oid.split("|")[0] for oid, _, _ in spec.objects}
    rclass = {rid: receptacle_class(rid) for rid, _ in spec.receptacles}
    otypes = sorted(
        set(oclass.values()) | set(_DOMAIN_TYPES["otype"]) | {spec.obj} | ({spec.toggle} if spec.toggle else set())
    )
    rtypes = sorted(set(rclass.values()) | set(_DOMAIN_TYPES["rtype"]) | ({spec.recep} if spec.recep else set()))
    locs = sorted({loc for _, loc in spec.receptacles} | {spec.start})
    objects = [("agent1", "agent")]
    objects += [(f"{t}Type", "otype") for t in otypes]
    objects += [(f"{t}Type", "rtype") for t in rtypes]
    objects += [(mangle(o), "object") for o, _, _ in sorted(spec.objects)]
    objects += [(mangle(r), "receptacle") for r, _ in spec.receptacles]
    objects += [(mangle(loc), "location") for loc in locs]
    init: list[tuple[str, ...]] = [("atLocation", "agent1", mangle(spec.start))]
    for rid, _ in spec.receptacles:
        init.append(("receptacleType", mangle(rid), f"{rclass[rid]}Type"))
    for rid, loc in spec.receptacles:
        init.append(("receptacleAtLocation", mangle(rid), mangle(loc)))
    for rid, _ in spec.receptacles:
        if rclass[rid] in constants.OPENABLE_CLASS_SET:
            init.append(("openable", mangle(rid)))
    acts = constants.VAL_ACTION_OBJECTS
    for oid, rid, loc in sorted(spec.objects):
        c, m = oclass[oid], mangle(oid)
        init.append(("objectType", m, f"{c}Type"))
        init.append(("inReceptacle", m, mangle(rid)))
        init.append(("objectAtLocation", m, mangle(loc)))
        if c not in _LAMPS:
            init.append(("pickupable", m))
        if c in constants.MOVABLE_RECEPTACLES_SET:
            init.append(("isReceptacleObject", m))
        for ability, pred in (
            ("Cleanable", "cleanable"),
            ("Heatable", "heatable"),
            ("Coolable", "coolable"),
            ("Toggleable", "toggleable"),
            ("Sliceable", "sliceable"),
        ):
            if c in acts[ability]:
                init.append((pred, m))
    for rt in rtypes:
        for ot in otypes:
            if _can_contain(constants, rt, ot):
                init.append(("canContain", f"{rt}Type", f"{ot}Type"))
    goal = goal_library.gdict[spec.task_type]["pddl"].format(
        obj=spec.obj, recep=spec.recep, toggle=spec.toggle, mrecep=""
    )
    return objects, init, goal.replace("#", "-")


def to_pddl(spec: TaskSpec, parts: tuple | None = None) -> str:
    """The PDDL problem in the structure of ALFWorld's ``initial_state.pddl`` (from ``parts``,
    ``problem_parts(spec)``, when the caller has them)."""
    objects, init, goal = parts if parts is not None else problem_parts(spec)
    lines = [f"(define (problem plan_{spec.task_id})", "    (:domain alfred)", "    (:objects"]
    lines += [f"        {name} - {kind}" for name, kind in objects]
    lines += ["        )", "    (:init"]
    lines += [f"        ({' '.join(fact)})" for fact in init]
    lines.append("        )")
    return "\n".join(lines) + "\n" + goal


@functools.lru_cache(maxsize=1024)
def _goal_formula(goal: str) -> Any:
    return parse_problem("(define " + goal).goal


def to_problem(spec: TaskSpec, parts: tuple | None = None) -> Problem:
    """``parse_problem(to_pddl(spec))``, made from the parts (``problem_parts(spec)``, or the
    caller's) without writing and reading the text."""
    objects, init, goal = parts if parts is not None else problem_parts(spec)
    return Problem({name.lower(): kind for name, kind in objects},
                   [tuple(x.lower() for x in fact) for fact in init], copy.deepcopy(_goal_formula(goal)))


def traj_data(spec: TaskSpec) -> dict[str, Any]:
    return {
        "task_id": spec.task_id,
        "task_type": spec.task_type,
        "scene": {"floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene},
        "pddl_params": spec.pddl_params,
        "turk_annotations": {"anns": [{"task_desc": spec.goal_text[:1].upper() + spec.goal_text[1:] + "."}]},
        "generator": f"proas.envs.household.generator v{GENERATOR_VERSION}",
    }


def fingerprint(task_id: str) -> str:
    """sha256 of what defines a generated game (its PDDL problem and goal text).

    ``src/proas/data/household/fingerprints.json`` records it for the fixed validation tasks
    and a sample of training tasks; a test regenerates them, so any change of the generator,
    of ALFWorld's tables or of Python's random module that would silently change the games
    behind the shipped task sets is caught.
    """
    import hashlib

    spec = generate_spec(task_id)
    return hashlib.sha256((to_pddl(spec) + "\n" + spec.goal_text).encode("utf-8")).hexdigest()


def game_data(spec: TaskSpec, walkthrough: list[str] | None = None, parts: tuple | None = None) -> dict[str, Any]:
    """The ``game.tw-pddl`` JSON object (``parts``: ``to_pddl``'s)."""
    domain, grammar = domain_and_grammar()
    return {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", spec.goal_text),
        "pddl_problem": to_pddl(spec, parts),
        "solvable": walkthrough is not None,
        "walkthrough": walkthrough,
    }


def fingerprint_ids() -> list[str]:
    """The tasks whose fingerprints are shipped: the fixed validation set and a sample of others."""
    return fixed_valid_ids() + [
        f"{split}-{short}-{i:04d}" for split in ("train", "valid_unseen") for short in TASK_TYPES for i in range(3)
    ]


def write_fingerprints(path: str | Path) -> None:
    """Record the fingerprints of ``fingerprint_ids()`` (run after a deliberate generator change)."""
    import alfworld.info

    from proas.fileio import atomic_write_json

    atomic_write_json(
        path,
        {
            "generator_version": GENERATOR_VERSION,
            "alfworld_version": alfworld.info.__version__,
            "what": "sha256 of each generated game's PDDL problem + newline + goal text (generator.fingerprint)",
            "made_by": "python -m proas.envs.household.generator src/proas/data/household/fingerprints.json",
            "fingerprints": {t: fingerprint(t) for t in fingerprint_ids()},
        },
    )


if __name__ == "__main__":  # pragma: no cover
    import sys

    write_fingerprints(
        sys.argv[1]
        if len(sys.argv) > 1
        else Path(__file__).resolve().parents[2] / "data" / "household" / "fingerprints.json"
    )

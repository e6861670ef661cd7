"""``HouseholdEnv``: ALFWorld's six task types behind the proas env protocol, two backends.

- ``backend="fast"``: the pure-Python simulator (``sim.py``), same texts and outcomes;
- ``backend="alfworld"``: the real engine, TextWorld's ``PddlEnv`` with the wrappers ALFWorld's
  ``AlfredTWEnv`` uses (``AlfredDemangler``, ``AlfredInfos``), on game files on disk.

Task ids: ``"<split>-<type>-<index>"`` for generated tasks (``generator.py``), or
``"alfworld:<path>"`` for a game directory of the official data (a path relative to
``$ALFWORLD_DATA``, ALFWorld's own variable, or absolute) holding ``game.tw-pddl`` and
``traj_data.json``. Generated games are written, for the real engine, under a cache directory
(``$PROAS_HOUSEHOLD_CACHE``, default ``~/.cache/proas/household``), keyed by generator version.

Reward is ``SUCCESS_REWARD`` (10.0) on the step that wins (verl-agent's ALFWorld reward), else 0.0; ``score`` is
1.0/0.0. An episode terminates when won and is truncated after ``max_steps`` (50) steps without a
win (the env protocol's ``terminated`` / ``truncated``).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proas.envs.base import SUCCESS_REWARD
from proas.envs.household import generator
from proas.envs.household.abstraction import TaskRoles, abstract_state, abstraction_tables
from proas.envs.household.oracle import solve
from proas.envs.household.sim import NOTHING, Game, Sim
from proas.envs.replay import replay_oracle
from proas.errors import ProasError
from proas.fileio import atomic_write_json, read_regular

if TYPE_CHECKING:  # pragma: no cover
    from proas.types import Trajectory

WIN_REWARD = SUCCESS_REWARD  # the household package exports it under this name
MAX_STEPS = 50
OFFICIAL_PREFIX = "alfworld:"
# the shapes of every command template in alfred.twl2; anything else is malformed text
_COMMAND_SHAPES = re.compile(
    r"^(look|inventory|help|go to \S.*|open \S.*|close \S.*|take \S.* from \S.*|move \S.* to \S.*|"
    r"put \S.* (in|into) \S.*|examine \S.*|use \S.*|heat \S.* with \S.*|clean \S.* with \S.*|"
    r"cool \S.* with \S.*|slice \S.* with \S.*)$"
)


def is_malformed(action: Any) -> bool:
    """True when ``action`` is not a command of the game's grammar at all (not just inadmissible)."""
    return not isinstance(action, str) or _malformed_text(action)


@functools.lru_cache(maxsize=1 << 16)  # a run's policies keep sending the same few thousand commands
def _malformed_text(text: str) -> bool:
    return not _COMMAND_SHAPES.match(text.strip())


def _generated(task_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(game.tw-pddl data, traj_data) of a generated task, walkthrough included."""
    data, traj, _ = _generated_game(task_id)
    return data, traj


@functools.lru_cache(maxsize=256)  # the parsed games below are what episodes use
def _generated_game(task_id: str) -> tuple[dict[str, Any], dict[str, Any], Game]:
    """``_generated`` and the parsed game (the one the walkthrough was solved on)."""
    spec = generator.generate_spec(task_id)
    parts = generator.problem_parts(spec)  # the problem's objects, facts and goal, made once for both
    data = generator.game_data(spec, walkthrough=None, parts=parts)
    game = Game.from_problem(generator.to_problem(spec, parts), data["grammar"])  # Game.from_data(data), unparsed
    walkthrough = solve(Sim(game), spec.task_type, spec.obj, spec.recep, spec.toggle)
    data = dict(data, solvable=True, walkthrough=walkthrough)
    return data, generator.traj_data(spec), game


@functools.lru_cache(maxsize=4096)
def _parsed(task_id: str) -> tuple[Game, dict[str, Any], list[str] | None]:
    if not (isinstance(task_id, str) and task_id.startswith(OFFICIAL_PREFIX)):
        # the game the generator's data parses to (Game.from_data reads no walkthrough)
        data, traj, game = _generated_game(str(task_id))
        return game, traj, data.get("walkthrough")
    data, traj = load_task(task_id)
    return Game.from_data(data), traj, data.get("walkthrough")


def official_root() -> Path:
    return Path(os.environ.get("ALFWORLD_DATA", os.path.expanduser("~/.cache/alfworld")))


def _official_dir(task_id: str) -> Path:
    rel = Path(task_id[len(OFFICIAL_PREFIX) :])
    path = rel if rel.is_absolute() else official_root() / rel
    if path.name == "game.tw-pddl":
        path = path.parent
    return path


def load_task(task_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The game data and traj_data of any task id (generated or official)."""
    if isinstance(task_id, str) and task_id.startswith(OFFICIAL_PREFIX):
        d = _official_dir(task_id)
        try:
            data = _read_json(d / "game.tw-pddl")
            traj = _read_json(d / "traj_data.json")
        except FileNotFoundError as exc:
            raise ProasError(f"ALFWorld game {task_id!r}: {exc.filename} is missing") from None
        except json.JSONDecodeError as exc:
            raise ProasError(f"ALFWorld game {task_id!r}: corrupt JSON ({exc.msg})") from None
        return data, traj
    return _generated(str(task_id))


def _read_json(path: Path) -> Any:
    """A data folder's JSON file, read as data (``read_regular``): a FIFO or a device in its
    place is a one-line ``ProasError`` instead of a read that blocks for ever."""
    return json.loads(read_regular(path, follow_symlinks=True))


def cache_root() -> Path:
    base = os.environ.get("PROAS_HOUSEHOLD_CACHE") or os.path.expanduser("~/.cache/proas/household")
    return Path(base) / f"v{generator.GENERATOR_VERSION}"


def game_file(task_id: str, root: str | Path | None = None) -> Path:
    """Path of the task's ``game.tw-pddl`` on disk, writing the generated game if needed."""
    if task_id.startswith(OFFICIAL_PREFIX):
        return _official_dir(task_id) / "game.tw-pddl"
    split, short, _ = generator.parse_task_id(task_id)
    d = Path(root) if root is not None else cache_root()
    d = d / split / generator.TASK_TYPES[short] / task_id
    path = d / "game.tw-pddl"
    if not path.is_file() or not (d / "traj_data.json").is_file():
        data, traj = _generated(task_id)
        atomic_write_json(d / "traj_data.json", traj)
        atomic_write_json(path, data, indent=None)
    return path


def official_task_ids(split: str, root: str | Path | None = None) -> list[str]:
    """Ids (``"alfworld:<dir>"``) of the official games of a split found under ``$ALFWORLD_DATA``.

    Looks under ``<root>/json_2.1.1/<split>`` (ALFWorld's layout; ``root`` defaults to
    ``$ALFWORLD_DATA``) and keeps, as ``AlfredTWEnv`` does, directories with ``traj_data.json``
    and a ``game.tw-pddl`` marked solvable, skipping movable-receptacle and sliced variants and
    task types other than the six.
    """
    base = Path(root) if root is not None else official_root()
    split_dir = base / "json_2.1.1" / split
    if not split_dir.is_dir():
        raise ProasError(f"no official ALFWorld games at {split_dir} (set ALFWORLD_DATA to ALFWorld's data directory)")
    out = []
    for traj in sorted(split_dir.rglob("traj_data.json")):
        d = traj.parent
        rel = d.relative_to(base)
        if "movable" in str(rel) or "Sliced" in str(rel) or not (d / "game.tw-pddl").is_file():
            continue
        try:
            if _read_json(traj).get("task_type") not in generator.SHORT_OF:
                continue
            if _read_json(d / "game.tw-pddl").get("solvable") is not True:
                continue
        except (ValueError, OSError, ProasError):  # unreadable or not a regular file: skipped, as corrupt
            continue
        out.append(OFFICIAL_PREFIX + str(rel))
    return out


def task_ids(split: str) -> list[str]:
    """Task ids of a split.

    Generated: ``train``, ``valid_seen``, ``valid_unseen``, or ``valid`` (the fixed 128).
    Official data (when ``$ALFWORLD_DATA`` holds it): ``alfworld:train``, ``alfworld:valid_seen``,
    ``alfworld:valid_unseen``.
    """
    if split.startswith(OFFICIAL_PREFIX):
        return official_task_ids(split[len(OFFICIAL_PREFIX) :])
    if split == "valid":
        return generator.fixed_valid_ids()
    if split not in generator.SPLIT_SIZES:
        raise ProasError(f"unknown household split {split!r}; choose train, valid_seen, valid_unseen or valid")
    return [
        generator.make_task_id(split, short, i)
        for short in generator.TASK_TYPES
        for i in range(generator.SPLIT_SIZES[split][short])
    ]


class _RealEngine:
    """The real ALFWorld engine on one game file at a time."""

    def __init__(self) -> None:
        try:
            import textworld
            from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
            from textworld.envs.pddl import PddlEnv
        except ImportError:
            raise ProasError(
                "backend 'alfworld' needs the alfworld package: pip install 'proas[alfworld]'"
            ) from None
        infos = textworld.EnvInfos(won=True, admissible_commands=True)
        self._env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
        self._loaded: str | None = None

    def reset(self, path: Path) -> tuple[str, list[str], bool]:
        # fast-downward's translator, run on every load and reset, overwrites sys.argv
        argv = list(sys.argv)
        try:
            if self._loaded != str(path):
                self._env.load(str(path))
                self._loaded = str(path)
            state = self._env.reset()
        finally:
            sys.argv[:] = argv
        return state.feedback, list(state["admissible_commands"]), bool(state["won"])

    def step(self, command: str) -> tuple[str, list[str], bool]:
        state, _, _ = self._env.step(command)
        return state.feedback, list(state["admissible_commands"]), bool(state["won"])


class HouseholdEnv:
    """ALFWorld household tasks; see the module docstring. Cheap to construct."""

    name = "household"
    taskset_source = (
        f"proas.envs.household generator v{generator.GENERATOR_VERSION}: generated ALFWorld-format games; "
        "valid = first N per type of the valid_seen pool"
    )

    def __init__(self, backend: str = "fast", max_steps: int = MAX_STEPS, cache_dir: str | Path | None = None) -> None:
        if backend not in ("fast", "alfworld"):
            raise ProasError(f"unknown household backend {backend!r}; choose 'fast' or 'alfworld'")
        self.backend = backend
        self.max_steps = int(max_steps)
        self.cache_dir = cache_dir
        self._real: _RealEngine | None = None
        self._sim: Sim | None = None
        self.task_id: str | None = None
        self._derived_key: tuple | None = None
        self._derived: tuple[str, list[str]] = ("", [])
        self._abs_tables: tuple | None = None  # the abstraction's tables of the game and roles (reset)

    # -------------------------------------------------------------- protocol

    def task_ids(self, split: str) -> list[str]:
        return task_ids(split)

    def oracle(self, task_id: str) -> list[str]:
        game, traj, walkthrough = _parsed(task_id)
        if task_id.startswith(OFFICIAL_PREFIX) or not walkthrough:
            p = traj["pddl_params"]
            return solve(
                Sim(game), traj["task_type"], p["object_target"], p.get("parent_target", ""), p.get("toggle_target", "")
            )
        return list(walkthrough)

    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        game, traj, _ = _parsed(task_id)
        self.task_id = task_id
        self.task_type = traj["task_type"]
        p = traj["pddl_params"]
        self.roles = TaskRoles.from_params(
            self.task_type, p["object_target"], p.get("parent_target", ""), p.get("toggle_target", "")
        )
        # the roles' key in the states' memo (a string hashes once; the dataclass at every look-up)
        self._roles_key = "|".join((self.roles.task_type, self.roles.otype, self.roles.rtype, self.roles.ttype))
        self._sim = Sim(game)  # tracks the state for the abstraction with both backends
        self._abs_tables = abstraction_tables(self._sim, self.roles)
        obs = self._sim.reset()
        admissible = self._sim.admissible()
        won = self._sim.won
        if self.backend == "alfworld":
            if self._real is None:
                self._real = _RealEngine()
            obs, admissible, won = self._real.reset(game_file(task_id, self.cache_dir))
        self.steps = 0
        self.won = won
        self.obs = obs
        self.admissible = admissible
        return obs, self._info(error=False, kind=None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._sim is None:
            raise ProasError("household env: call reset(task_id) before step()")
        if self.steps >= self.max_steps or self.won:
            raise ProasError("household env: the episode is over; call reset()")
        text = action if isinstance(action, str) else ""
        kind = None
        if is_malformed(text):
            kind = "malformed"
        elif text.strip() not in self._sim.admissible_map():
            kind = "inadmissible"
        sim_obs = self._sim.step(text)
        if self.backend == "alfworld":
            assert self._real is not None
            obs, admissible, won = self._real.step(text)
        else:
            obs, admissible, won = sim_obs, self._sim.admissible(), self._sim.won
        if kind is None and obs == NOTHING:
            kind = "nothing_happens"
        self.steps += 1
        reward = WIN_REWARD if won and not self.won else 0.0
        self.won = won
        self.obs = obs
        self.admissible = admissible
        truncated = not won and self.steps >= self.max_steps
        return obs, reward, won, truncated, self._info(error=kind is not None, kind=kind)

    # -------------------------------------------------------------- helpers

    def hint(self) -> str | None:
        """The oracle's next action from the current state (None once won)."""
        if self._sim is None or self.won:
            return None
        plan = solve(self._sim, self.task_type, *self._params())
        return plan[0] if plan else None

    def _params(self) -> tuple[str, str, str]:
        _, traj, _ = _parsed(self.task_id)  # type: ignore[arg-type]
        p = traj["pddl_params"]
        return p["object_target"], p.get("parent_target", ""), p.get("toggle_target", "")

    @property
    def goal(self) -> str:
        return self._sim.game.intro_task if self._sim else ""

    def _invalid_candidates(self) -> list[str]:
        """A few plausible commands the game would reject now (for policies that score candidates)."""
        sim = self._sim
        assert sim is not None
        adm = sim.admissible_map() if self.backend == "fast" else set(self.admissible)
        out: list[str] = []
        for cand in self._candidate_stream(sim):
            if cand not in adm and cand not in out:
                out.append(cand)
                if len(out) == 4:
                    break
        return out

    @staticmethod
    def _candidate_stream(sim: Sim):
        g = sim.game
        loc = sim.loc
        here = g.recs_at.get(loc, []) if loc is not None else []
        held = sim.held()
        for r in here:
            yield f"go to {g.name(r)}"  # already there
        for r in g.receptacles:
            if r in here:
                continue
            inside = sim.contents(r)
            if inside:
                yield g.command("take", inside[0], r)[0]  # from afar
            if g.is_("openable", r):
                yield f"open {g.name(r)}"
            if held:
                yield g.command("put", held[0], r)[0]
            break
        for r in here:
            for o in sim.contents(r)[:1]:
                yield g.command("put", o, r)[0]  # not held
        for verb, st in (("heat", "microwavetype"), ("clean", "sinkbasintype"), ("cool", "fridgetype")):
            for r in g.recs_of_type.get(st, ()):
                if r not in here:
                    yield g.command(verb, held[0] if held else g.objects[0], r)[0]

    def _info(self, error: bool, kind: str | None) -> dict[str, Any]:
        sim = self._sim
        assert sim is not None
        key = (sim, sim.version)
        if self._derived_key != key:  # the state changed: what depends on it
            if self.backend == "fast":
                # a function of the state and the task's roles: kept with the state (``sim.State``)
                state = sim.state
                if state.memo_key != self._roles_key:
                    state.memo = (abstract_state(sim, self.roles, self._abs_tables), self._invalid_candidates())
                    state.memo_key = self._roles_key
                self._derived = state.memo
            else:  # the real engine's admissible commands decide the invalid candidates
                self._derived = (abstract_state(sim, self.roles, self._abs_tables), self._invalid_candidates())
            self._derived_key = key
        return {
            "won": bool(self.won),
            "score": 1.0 if self.won else 0.0,
            "error": bool(error),
            "error_kind": kind,
            "admissible": list(self.admissible),
            "abstract_state": self._derived[0],
            "anchor": self.obs,
            "task_type": self.task_type,
            "task_id": self.task_id,
            "goal": self.goal,
            "steps": self.steps,
            "invalid_candidates": list(self._derived[1]),
        }


def oracle_trajectory(env: HouseholdEnv, task_id: str) -> Trajectory:
    """The oracle's won walkthrough of ``task_id`` in ``env``, as the trainer's reference graph
    records it (``proas.envs.replay.replay_oracle``); ``ProasError`` when it does not win."""
    replay = replay_oracle(env, task_id)
    if replay.trajectory is None:
        raise ProasError(f"{task_id}: the oracle replay failed: {replay.failure}")
    return replay.trajectory


def make_household_env(backend: str = "fast", **kwargs: Any) -> HouseholdEnv:
    """The household env's factory in the env registry (``proas.envs.make("household", **options)``)."""
    return HouseholdEnv(backend=backend, **kwargs)

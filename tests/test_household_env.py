"""HouseholdEnv (fast backend): protocol, rewards, errors, abstraction, generator, task ids."""

from __future__ import annotations

import json
import re

import pytest

from proas.envs import check_env
from proas.envs.household import (
    SPLIT_SIZES,
    TASK_TYPES,
    HouseholdEnv,
    game_file,
    load_task,
    make_household_env,
    task_ids,
)
from proas.envs.household.generator import generate_spec, is_unseen_scene
from proas.envs.household.pddl import display_names, holds, parse_sexpr
from proas.errors import ProasError

HEAT = "train-heat-0003"  # potato on countertop 1 -> microwave 1 -> into the (closed) fridge 1


@pytest.fixture()
def env():
    return make_household_env("fast")


@pytest.mark.parametrize("short", list(TASK_TYPES))
def test_protocol_checker_passes_for_every_task_type(env, short):
    check_env(env, f"train-{short}-0000")
    check_env(env, f"valid_unseen-{short}-0001")


def test_heat_walkthrough_texts_rewards_and_abstract_states(env):
    obs, info = env.reset(HEAT)
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.")
    assert obs.endswith("Your task is to: heat some potato and put it in fridge.")
    assert info["abstract_state"] == "pick_heat_then_place_in_recep|at=start|hold=none|placed=0"
    steps = [
        (
            "go to countertop 1",
            "You arrive at countertop 1. On the countertop 1, you see a potato 1, and a tomato 1.",
            "at=obj|hold=none|placed=0",
        ),
        (
            "take potato 1 from countertop 1",
            "You pick up the potato 1 from the countertop 1.",
            "at=other|hold=obj|placed=0",
        ),
        ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed.", "at=station|hold=obj|placed=0"),
        (
            "heat potato 1 with microwave 1",
            "You heat the potato 1 using the microwave 1.",
            "at=station|hold=obj+done|placed=0",
        ),
        (
            "go to fridge 1",
            "You arrive at fridge 1. The fridge 1 is closed.",
            "at=target:closed|hold=obj+done|placed=0",
        ),
        (
            "open fridge 1",
            "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1.",
            "at=target|hold=obj+done|placed=0",
        ),
        ("move potato 1 to fridge 1", "You move the potato 1 to the fridge 1.", "at=target|hold=none|placed=1"),
    ]
    assert env.oracle(HEAT) == [a for a, _, _ in steps]
    for k, (action, text, state) in enumerate(steps):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs == text and info["anchor"] == text
        assert info["abstract_state"] == "pick_heat_then_place_in_recep|" + state
        assert not info["error"]
        last = k == len(steps) - 1
        assert (reward, terminated, truncated, info["won"], info["score"]) == (
            (10.0, True, False, True, 1.0) if last else (0.0, False, False, False, 0.0)
        )


def test_examine_and_inventory_texts(env):
    env.reset(HEAT)
    assert env.step("inventory")[0] == "You are not carrying anything."
    env.step("go to countertop 1")
    env.step("take potato 1 from countertop 1")
    assert env.step("inventory")[0] == "You are carrying: a potato 1."
    assert env.step("examine potato 1")[0] == "There's nothing special about potato 1."
    env.step("go to microwave 1")
    env.step("heat potato 1 with microwave 1")
    assert env.step("examine potato 1")[0] == "This is a hot potato 1."
    assert env.step("look")[0] == "You are facing the microwave 1. Next to it, you see nothing."


def test_errors_malformed_inadmissible_and_nothing_happens(env):
    obs, info = env.reset(HEAT)
    before = info["abstract_state"]
    for action, kind in [
        ("fly to the moon", "malformed"),
        ("", "malformed"),
        ("take potato 1 from countertop 1", "inadmissible"),  # not there yet
        ("open fridge 1", "inadmissible"),
    ]:
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        assert obs == "Nothing happens."
        assert info["error"] and info["error_kind"] == kind, action
        assert info["abstract_state"] == before and reward == 0.0 and not done
    obs, _, _, _, info = env.step("look")
    assert not info["error"] and info["error_kind"] is None


def test_invalid_candidates_are_plausible_and_rejected(env):
    _, info = env.reset(HEAT)
    for _ in range(3):
        assert info["invalid_candidates"], "expected some candidates"
        assert not set(info["invalid_candidates"]) & set(info["admissible"])
        obs, _, _, _, after = env.step(info["invalid_candidates"][0])
        assert after["error"] and obs == "Nothing happens."
        _, _, _, _, info = env.step(info["admissible"][0])


def test_episode_ends_at_max_steps():
    env = HouseholdEnv(max_steps=3)
    env.reset(HEAT)
    # the step limit truncates (Gymnasium's convention); it never terminates an unsolved task
    assert [env.step("look")[2:4] for _ in range(3)] == [(False, False), (False, False), (False, True)]
    with pytest.raises(ProasError, match="episode is over"):
        env.step("look")


def test_step_before_reset_and_bad_backend_are_clear_errors():
    with pytest.raises(ProasError, match="call reset"):
        HouseholdEnv().step("look")
    with pytest.raises(ProasError, match="unknown household backend"):
        HouseholdEnv(backend="thor")


@pytest.mark.parametrize("bad", ["pick-0001", "train-fly-0001", "train-pick-9999", "test-pick-0001", "train-pick-x"])
def test_bad_task_ids_are_clear_errors(env, bad):
    with pytest.raises(ProasError, match="task id"):
        env.reset(bad)


def test_splits_sizes_and_disjointness():
    train, seen, unseen = task_ids("train"), task_ids("valid_seen"), task_ids("valid_unseen")
    assert (len(train), len(seen), len(unseen)) == (3553, 140, 134)
    assert not set(train) & set(seen) and not set(train) & set(unseen)
    valid = task_ids("valid")
    assert len(valid) == 128 and set(valid) <= set(seen)
    with pytest.raises(ProasError, match="unknown household split"):
        task_ids("test")
    assert sum(SPLIT_SIZES["train"].values()) == 3553


def test_unseen_split_uses_only_held_out_floor_plans():
    for short in TASK_TYPES:
        for i in range(5):
            assert is_unseen_scene(generate_spec(f"valid_unseen-{short}-{i:04d}").scene)
            assert not is_unseen_scene(generate_spec(f"train-{short}-{i:04d}").scene)
            assert not is_unseen_scene(generate_spec(f"valid_seen-{short}-{i:04d}").scene)


def test_generation_is_deterministic_and_ids_differ():
    a, b = generate_spec("train-pick2-0042"), generate_spec("train-pick2-0042")
    assert a == b
    assert generate_spec("train-pick2-0043") != a


def test_generated_tasks_start_unsolved_with_hidden_objects_somewhere():
    env = make_household_env("fast")
    hidden = 0
    for short in TASK_TYPES:
        for i in range(10):
            task_id = f"train-{short}-{i:04d}"
            spec = generate_spec(task_id)
            _, info = env.reset(task_id)
            assert not info["won"]
            closed = {
                r
                for r, _ in spec.receptacles
                if r.split("|")[0] in ("Cabinet", "Drawer", "Fridge", "Microwave", "Safe")
            }
            hidden += any(rid in closed and oid.startswith(spec.obj + "|") for oid, rid, _ in spec.objects)
            assert 3 <= len(spec.receptacles) <= 12  # 8..12, fewer where the floor plan has fewer
    assert hidden >= 10  # task objects often start inside closed receptacles


def test_game_files_are_alfworld_format(tmp_path):
    path = game_file("valid_seen-look-0004", tmp_path)
    data = json.loads(path.read_text())
    assert set(data) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
    assert data["solvable"] is True and data["walkthrough"]
    assert "(:domain alfred)" in data["pddl_problem"] and "UNKNOWN GOAL" not in data["grammar"]
    traj = json.loads((path.parent / "traj_data.json").read_text())
    assert traj["task_type"] == "look_at_obj_in_light" and traj["pddl_params"]["toggle_target"] in (
        "DeskLamp",
        "FloorLamp",
    )
    assert path.parent.parent.name == "look_at_obj_in_light"


def test_official_layout_games_load_by_path(tmp_path, monkeypatch):
    # a game in the official data layout, reached through $ALFWORLD_DATA
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    src = game_file("train-clean-0005", tmp_path / "gen")
    trial = tmp_path / "json_2.1.1" / "valid_seen" / "pick_clean_then_place_in_recep-X" / "trial_1"
    trial.mkdir(parents=True)
    for name in ("game.tw-pddl", "traj_data.json"):
        (trial / name).write_text((src.parent / name).read_text())
    env = make_household_env("fast")
    task = "alfworld:json_2.1.1/valid_seen/pick_clean_then_place_in_recep-X/trial_1"
    # ALFWorld's loader rules: sliced / movable variants and unsolvable games are skipped
    for skipped, solvable in (
        ("pick_clean_then_place_in_recep-Sliced-Y", True),
        ("pick_heat_then_place_in_recep-Z", False),
    ):
        d = trial.parent.parent / skipped / "trial_1"
        d.mkdir(parents=True)
        (d / "traj_data.json").write_text((src.parent / "traj_data.json").read_text())
        (d / "game.tw-pddl").write_text(json.dumps(dict(json.loads(src.read_text()), solvable=solvable)))
    assert task_ids("alfworld:valid_seen") == [task]
    with pytest.raises(ProasError, match="no official ALFWorld games"):
        task_ids("alfworld:valid_unseen")
    check_env(env, task)
    assert env.oracle(task) == env.oracle("train-clean-0005")
    with pytest.raises(ProasError, match="missing"):
        load_task("alfworld:json_2.1.1/nowhere")


def test_display_names_follow_alfworlds_demangler():
    ids = [
        "cabinet_bar__plus_00_dot_68",
        "cabinet_bar__minus_01_dot_18",
        "sink_bar__plus_00_dot_02_bar_sinkbasin",
        "agent1",
    ]
    names = display_names(ids)
    # sorted ids: cabinet_bar__minus... < cabinet_bar__plus...; the first gets the highest number
    assert names["cabinet_bar__minus_01_dot_18"] == "cabinet 2"
    assert names["cabinet_bar__plus_00_dot_68"] == "cabinet 1"
    assert names["sink_bar__plus_00_dot_02_bar_sinkbasin"] == "sinkbasin 1"


def test_goal_evaluator_on_hand_written_facts():
    goal = parse_sexpr(
        "(exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 MugType) (inReceptacle ?o1 ?r)"
        " (exists (?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o2 MugType) (inReceptacle ?o2 ?r))))))"
    )[0]
    facts = {
        "objecttype": {("m1", "mugtype"), ("m2", "mugtype"), ("a", "appletype")},
        "inreceptacle": {("m1", "shelf1"), ("a", "shelf1")},
    }
    assert not holds(goal, facts)
    facts["inreceptacle"].add(("m2", "shelf2"))
    assert not holds(goal, facts)  # two mugs, but not in the same receptacle
    facts["inreceptacle"].add(("m2", "shelf1"))
    assert holds(goal, facts)


def test_constructor_is_cheap_engine_and_games_are_made_lazily():
    # construction starts no engine and generates nothing; speed figures live in benchmarks/
    env = HouseholdEnv(backend="alfworld", cache_dir="/nonexistent/never-written")
    assert env._real is None and env._sim is None and env.task_id is None
    fast = HouseholdEnv()
    first = fast.reset("train-pick-0100")
    assert fast.reset("train-pick-0100") == first  # a reset replays the same start


def test_observations_never_leak_pddl_ids(env):
    obs, info = env.reset("train-pick2-0003")
    for a in env.oracle("train-pick2-0003"):
        obs, _, _, _, info = env.step(a)
        assert not re.search(r"_bar_|Type\b", obs + " ".join(info["admissible"]))


def test_generated_games_match_the_shipped_fingerprints():
    # made in another process: generation does not depend on hash seeds or run order
    import json as _json
    from pathlib import Path

    import proas
    from proas.envs.household.generator import GENERATOR_VERSION, fingerprint

    path = Path(proas.__file__).parent / "data" / "household" / "fingerprints.json"
    shipped = _json.loads(path.read_text())
    assert shipped["generator_version"] == GENERATOR_VERSION
    assert len(shipped["fingerprints"]) == 128 + 36
    for task_id, digest in shipped["fingerprints"].items():
        assert fingerprint(task_id) == digest, f"{task_id}: generated game changed"


def test_problem_parser_reads_types_facts_and_skips_numeric_init():
    from proas.envs.household.pddl import parse_problem

    prob = parse_problem(
        "; comment\n(define (problem p) (:domain alfred) "
        "(:objects agent1 - agent a_bar_1 b_bar_2 # object L1 - location)"
        " (:init (atLocation agent1 L1) (= (distance L1 L1) 3) (inReceptacle a_bar_1 r))"
        " (:goal (and (holds agent1 a_bar_1))))"
    )
    assert prob.objects == {"agent1": "agent", "a_bar_1": "object", "b_bar_2": "object", "l1": "location"}
    assert prob.init == [("atlocation", "agent1", "l1"), ("inreceptacle", "a_bar_1", "r")]
    assert holds(prob.goal, {"holds": {("agent1", "a_bar_1")}}) and not holds(prob.goal, {})
    with pytest.raises(ProasError, match="unbalanced"):
        parse_problem("(define (problem p)")


def test_generated_problems_are_their_pddl_text_parsed():
    """The generator's problem built from its parts (what episodes play) is the problem its PDDL
    text parses to (what the files hold and the real engine reads), for every task type and split."""
    from proas.envs.household import generator
    from proas.envs.household.env import task_ids
    from proas.envs.household.pddl import parse_problem

    kinds = set()
    for split in ("train", "valid_seen", "valid_unseen"):
        ids = task_ids(split)
        for tid in ids[:: max(1, len(ids) // 40)]:
            spec = generator.generate_spec(tid)
            assert generator.to_problem(spec) == parse_problem(generator.to_pddl(spec))
            kinds.add((split, spec.task_type))
    assert len(kinds) == 3 * len(generator.TASK_TYPES)


def test_official_data_files_that_are_fifos_are_refused_or_skipped_without_blocking(tmp_path, monkeypatch):
    """*Found:* the official data's ``game.tw-pddl`` / ``traj_data.json`` were read with
    ``read_text`` (after at most an ``is_file``): a FIFO in their place blocked ``load_task`` and
    the listing of a split for ever. Loading one is now a one-line error; listing skips it, as it
    skips a corrupt game."""
    import os
    import signal

    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    src = game_file("train-clean-0005", tmp_path / "gen")
    split = tmp_path / "json_2.1.1" / "valid_seen"
    for trial, fifo in (("A/trial_1", None), ("B/trial_1", "traj_data.json"), ("C/trial_1", "game.tw-pddl")):
        (split / trial).mkdir(parents=True)
        for name in ("game.tw-pddl", "traj_data.json"):
            if name == fifo:
                os.mkfifo(split / trial / name)
            else:
                (split / trial / name).write_text((src.parent / name).read_text())
    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("blocked on a FIFO"))
    signal.alarm(10)
    try:
        assert task_ids("alfworld:valid_seen") == ["alfworld:json_2.1.1/valid_seen/A/trial_1"]
        for trial, name in (("B", "traj_data.json"), ("C", "game.tw-pddl")):
            with pytest.raises(ProasError, match=f"{name}: is a FIFO; a file read as data must be a regular file") \
                    as info:
                load_task(f"alfworld:json_2.1.1/valid_seen/{trial}/trial_1")
            assert "\n" not in str(info.value)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

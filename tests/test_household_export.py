"""`proas household export`: generated games play in ALFWorld's own gym env, AlfredTWEnv."""

from __future__ import annotations

import importlib.util
import json

import pytest

from proas import cli
from proas.envs.household import make_household_env

HAS_ALFWORLD = importlib.util.find_spec("alfworld") is not None


def test_export_writes_alfworld_layout(tmp_path, capsys):
    assert (
        cli.main(
            [
                "household",
                "export",
                "--out",
                str(tmp_path),
                "--task",
                "train-cool-0001",
                "--task",
                "valid_seen-look-0000",
            ]
        )
        == 0
    )
    assert "wrote 2 ALFWorld game directories" in capsys.readouterr().out
    d = tmp_path / "train" / "pick_cool_then_place_in_recep" / "train-cool-0001"
    data = json.loads((d / "game.tw-pddl").read_text())
    assert data["solvable"] is True
    assert data["walkthrough"] == make_household_env().oracle("train-cool-0001")
    assert json.loads((d / "traj_data.json").read_text())["task_type"] == "pick_cool_then_place_in_recep"
    assert (tmp_path / "valid_seen" / "look_at_obj_in_light" / "valid_seen-look-0000" / "game.tw-pddl").is_file()


def test_export_bad_limit_is_an_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # refused as the command line is parsed
        cli.main(["household", "export", "--out", str(tmp_path), "--limit", "-1"])
    assert stop.value.code == 2
    assert "--limit" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.alfworld
@pytest.mark.skipif(not HAS_ALFWORLD, reason="alfworld is not installed")
def test_export_writes_the_logic_alfredtwenv_reads_from_alfworld_data(tmp_path, capsys):
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    from proas.envs.household.generator import domain_and_grammar

    out = tmp_path / "json_2.1.1"
    args = ["household", "export", "--out", str(out), "--task", "train-pick-0000", "--logic", str(tmp_path / "logic")]
    assert cli.main(args) == 0
    assert "wrote alfred.pddl and alfred.twl2" in capsys.readouterr().out
    domain, grammar = domain_and_grammar()
    assert "(define (domain alfred)" in domain and grammar
    assert (tmp_path / "logic" / "alfred.pddl").read_text() == domain
    assert (tmp_path / "logic" / "alfred.twl2").read_text() == grammar
    # what verl-agent's config_tw.yaml names, read the way AlfredTWEnv reads it
    alf = AlfredTWEnv.__new__(AlfredTWEnv)
    alf.config = {"logic": {"domain": str(tmp_path / "logic" / "alfred.pddl"),
                            "grammar": str(tmp_path / "logic" / "alfred.twl2")}}
    alf.get_game_logic()
    assert alf.game_logic == {"pddl_domain": domain, "grammar": grammar}


@pytest.mark.alfworld
@pytest.mark.skipif(not HAS_ALFWORLD, reason="alfworld is not installed")
def test_alfredtwenv_collects_and_wins_exported_games(tmp_path):
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    ids = ["valid_seen-heat-0001", "valid_seen-pick2-0001"]
    assert cli.main(["household", "export", "--out", str(tmp_path)] + [a for t in ids for a in ("--task", t)]) == 0
    config = {
        "env": {
            "goal_desc_human_anns_prob": 0,
            "task_types": [1, 2, 3, 4, 5, 6],
            "domain_randomization": False,
            "expert_type": "handcoded",
        },
        "dataset": {
            "data_path": str(tmp_path),
            "eval_id_data_path": str(tmp_path),
            "eval_ood_data_path": str(tmp_path),
            "num_train_games": -1,
            "num_eval_games": -1,
        },
        "logic": {"domain": "unused", "grammar": "unused"},
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": 50}},
    }
    alf = AlfredTWEnv(config, train_eval="eval_in_distribution")
    assert len(alf.game_files) == 2
    env = alf.init_env(batch_size=1)
    try:
        for _ in ids:
            obs, infos = env.reset()
            path = infos["extra.gamefile"][0]
            walkthrough = json.loads(open(path).read())["walkthrough"]
            fast = make_household_env("fast")
            task_id = path.split("/")[-2]
            fast_obs, _ = fast.reset(task_id)
            assert obs[0] == fast_obs
            for cmd in walkthrough:
                obs, scores, dones, infos = env.step([cmd])
                assert obs[0] == fast.step(cmd)[0]
            assert dones[0] and infos["won"][0]
    finally:
        env.close()


def test_export_of_an_official_game_is_refused_not_reported_as_written(tmp_path, capsys):
    """An ``alfworld:`` id names a game that already lies under $ALFWORLD_DATA: export used to
    print "wrote 1" and write nothing."""
    out = tmp_path / "games"
    assert cli.main(["household", "export", "--out", str(out), "--task", "alfworld:train/x/trial"]) == 2
    err = capsys.readouterr().err
    assert "export writes generated tasks only" in err and "wrote" not in err
    assert not out.exists()


def test_export_per_type_takes_the_first_n_of_every_type(tmp_path, capsys):
    # a split lists its tasks type by type: --limit alone would give pick tasks only
    assert cli.main(["household", "export", "--out", str(tmp_path), "--split", "train", "--per-type", "2"]) == 0
    assert "wrote 12 ALFWorld game directories" in capsys.readouterr().out
    games = sorted(p.name for p in (tmp_path / "train").glob("*/*"))
    types = ("pick", "look", "clean", "heat", "cool", "pick2")
    assert games == sorted(f"train-{t}-000{i}" for t in types for i in (0, 1))
    assert cli.main(["household", "export", "--out", str(tmp_path / "v"), "--split", "valid", "--per-type", "30",
                     "--limit", "40"]) == 0
    assert "wrote 40 ALFWorld game directories" in capsys.readouterr().out
    looks = list((tmp_path / "v" / "valid_seen" / "look_at_obj_in_light").iterdir())
    assert len(looks) == 10  # 30 pick, then 10 of the 12 look

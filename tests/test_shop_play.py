"""`proas play shop`: a person can play a goal; following the hints wins it."""

import io

from proas.cli import main
from proas.envs import ENVS
from proas.envs.cli import play
from proas.envs.shop import make_shop_env


def test_shop_is_playable_and_hints_win():
    assert ENVS["shop"].factory == "proas.envs.shop:make_shop_env"
    env = make_shop_env(nouns="stored")
    tid = env.task_ids("valid")[0]
    out = io.StringIO()
    # start with a detour, then type "hint" and the hinted command, alternately
    script = iter(["search[something unrelated]", "2"] + ["hint", None] * 20)

    def read():
        line = next(script)
        if line is None:  # type what the last hint said
            hint_line = [ln for ln in out.getvalue().splitlines() if ln.startswith("hint: ")][-1]
            line = hint_line[len("hint: "):]
        return line

    assert play(env, tid, read, out) == 0
    assert "WON" in out.getvalue()


def test_play_bad_task_is_a_one_line_error(capsys):
    assert main(["play", "shop", "--task", "not-a-goal"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("proas: error: shop task id") and err.count("\n") == 1

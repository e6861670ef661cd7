"""Abstract states for verl-agent's own envs (proas.integrations.verl.states), the start-up check,
and the vectorised env behind verl-agent's managers.

ALFWorld: the real engine (TextWorld's ``PddlEnv`` with ALFWorld's ``AlfredDemangler`` and
``AlfredInfos``, the wrappers and infos verl-agent's ``AlfredTWEnv`` registers) plays games that
``proas household export`` wrote, behind verl-agent's vectorised-env contract; the lockstep
tracker's states must equal ``proas/household``'s for the same games and actions, and recur
across trajectories. WebShop's own server cannot run here (its product files, spaCy model and
Lucene index cannot be fetched), so the page tracker is driven by proas's shop env, whose pages
are WebShop's text mode.
"""

from __future__ import annotations

import json
import types

import pytest

pytest.importorskip("alfworld")

import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from proas.credit import ReferenceGraph  # noqa: E402
from proas.envs.household import make_household_env  # noqa: E402
from proas.envs.shop import make_shop_env  # noqa: E402
from proas.errors import ProasError  # noqa: E402
from proas.integrations.verl import ProasEnvManager, step_columns  # noqa: E402
from proas.integrations.verl.envs import ProasVecEnv, default_prompt  # noqa: E402
from proas.integrations.verl.states import (  # noqa: E402
    AlfworldLockstep,
    WebshopPages,
    instruction_options,
    webshop_page_kind,
)
from proas.integrations.verl.verl_agent import (  # noqa: E402
    check_config,
    check_env_states,
    states_source,
    with_proas_envs,
)
from proas.types import Step, Trajectory  # noqa: E402

# two games of one type (states recur across tasks) and one of another; the real engine's reset
# runs the PDDL translator twice, so the module plays them once (``played``)
TASKS = ["train-pick-0000", "train-pick-0001", "train-clean-0000"]


class EngineVec:
    """The real ALFWorld engine, one per env, behind verl-agent's vectorised-env contract
    (``reset() -> (obs, None, infos)``, ``step(actions) -> (obs, None, rewards, dones, infos)``);
    env i plays ``gamefiles[i]``. What verl-agent's ``AlfworldEnvs`` returns, without its Ray
    workers and gym batching."""

    def __init__(self, gamefiles):
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        self.gamefiles = [str(g) for g in gamefiles]
        self.engines = [AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False)) for _ in self.gamefiles]
        self.admissible = [[] for _ in self.gamefiles]

    def reset(self):
        import sys

        obs, infos = [], []
        for k, (engine, path) in enumerate(zip(self.engines, self.gamefiles)):
            argv = list(sys.argv)  # fast-downward's translator overwrites sys.argv
            engine.load(path)
            state = engine.reset()
            sys.argv[:] = argv
            obs.append(state.feedback)
            self.admissible[k] = list(state["admissible_commands"])
            infos.append({"won": bool(state["won"]), "admissible_commands": self.admissible[k],
                          "extra.gamefile": state["extra.gamefile"]})
        return obs, None, infos

    def step(self, actions):
        obs, rewards, dones, infos = [], [], [], []
        for k, (engine, action) in enumerate(zip(self.engines, actions)):
            state, _, _ = engine.step(action)
            obs.append(state.feedback)
            self.admissible[k] = list(state["admissible_commands"])
            rewards.append(10.0 * bool(state["won"]))
            dones.append(bool(state["won"]))
            infos.append({"won": bool(state["won"]), "admissible_commands": self.admissible[k]})
        return obs, None, rewards, dones, infos

    @property
    def get_admissible_commands(self):
        return self.admissible


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    """The tasks exported as ALFWorld's data (``proas household export``), one game file each."""
    pytest.importorskip("textworld")  # the real engine (the verl venv has alfworld's data only)
    from proas.cli import main as proas_main

    root = tmp_path_factory.mktemp("alfworld") / "json_2.1.1"
    argv = ["household", "export", "--out", str(root)]
    for t in TASKS:
        argv += ["--task", t]
    assert proas_main(argv) == 0
    return {t: next(root.rglob(f"{t}/game.tw-pddl")) for t in TASKS}


def detour(task: str, seed: int) -> list[str]:
    """A trajectory with detours: admissible moves, an inadmissible and a malformed command,
    then the oracle's walkthrough from the start."""
    env = make_household_env()
    _, info = env.reset(task)
    rng = np.random.default_rng(seed)
    moves = [a for a in info["admissible"] if a.startswith("go to")]
    picks = [moves[int(k)] for k in rng.choice(len(moves), size=2, replace=False)]
    return picks + ["take the moon from the sky", "juggle"] + env.oracle(task)


@pytest.fixture(scope="module")
def played(games):
    """Every task with detours, and the two pick tasks' walkthroughs, through the lockstep
    tracker on the engine (one vectorised env): plans, start states and steps by key."""
    plans = {("detour", t): detour(t, seed=k) for k, t in enumerate(TASKS)}
    plans.update({("walk", t): make_household_env().oracle(t) for t in TASKS[:2]})
    keys = list(plans)
    vec = AlfworldLockstep(EngineVec([games[t] for _, t in keys]))
    _, _, infos = vec.reset()
    start = {key: info["abstract_state"] for key, info in zip(keys, infos)}
    steps = {key: [] for key in keys}
    for k in range(max(len(p) for p in plans.values())):
        _, _, _, _, infos = vec.step([plans[key][k] if k < len(plans[key]) else "look" for key in keys])
        for key, info in zip(keys, infos):
            if "proas" in info:
                p = info["proas"]
                steps[key].append((p["abstract_state"], p["action"], p["next_abstract_state"], p["env_error"]))
    return plans, start, steps


def play_household(task, actions):
    env = make_household_env()
    _, info = env.reset(task)
    start, out = info["abstract_state"], []
    for a in actions:
        before = info["abstract_state"]
        _, _, terminated, truncated, info = env.step(a)
        done = terminated or truncated
        out.append((before, a, info["abstract_state"], info["error"]))
        if done:
            break
    return start, out


def test_lockstep_states_equal_proas_household_on_exported_games(played):
    plans, start, steps = played
    for key in plans:
        h_start, h_steps = play_household(key[1], plans[key])
        assert start[key] == h_start
        assert steps[key] == h_steps
        assert steps[key][-1][2].endswith("placed=1")  # won: the episode ended on the last action
    for t in TASKS:
        errors = [err for *_, err in steps[("detour", t)]]
        assert errors[2:4] == [True, True] and not any(errors[:2]) and not any(errors[4:])


def to_trajectories(steps):
    return [Trajectory(key[1], f"{key[0]}-{key[1]}", 10.0, [Step(s, a, n, error=e) for s, a, n, e in seq])
            for key, seq in steps.items()]


def test_lockstep_states_recur_across_trajectories_and_the_graph_matches_household(played):
    plans, start, steps = played
    walk = {t: [s for s, *_ in steps[("walk", t)]] + [steps[("walk", t)][-1][2]] for t in TASKS[:2]}
    # two rooms, one task type: the walkthroughs start and end in the same states and share more
    assert walk[TASKS[0]][0] == walk[TASKS[1]][0] and walk[TASKS[0]][-1] == walk[TASKS[1]][-1]
    assert len(set(walk[TASKS[0]]) & set(walk[TASKS[1]])) >= 3
    # a trajectory with detours passes through the walkthrough's states of its task
    for t in TASKS[:2]:
        assert set(walk[t][1:]) <= {s for step in steps[("detour", t)] for s in (step[0], step[2])}
    lock = ReferenceGraph.from_trajectories(to_trajectories(steps))
    house = ReferenceGraph.from_trajectories(to_trajectories({key: play_household(key[1], plans[key])[1]
                                                              for key in plans}))
    assert sorted(lock.edges()) == sorted(house.edges()) and lock.num_nodes == house.num_nodes > 5


class Altered(EngineVec):
    """An engine whose texts differ from the game file's (as randomised names would)."""

    def reset(self):
        obs, image, infos = super().reset()
        return [o.replace("1", "7") for o in obs], image, infos


def test_lockstep_refuses_an_engine_that_differs_from_the_simulator(games):
    with pytest.raises(ProasError, match="differs from proas's simulator.*at reset"):
        AlfworldLockstep(Altered([games[TASKS[0]]])).reset()
    vec = EngineVec([games[TASKS[0]]])
    real = vec.reset
    vec.reset = lambda: (lambda o, i, infos: (o, i, [{k: v for k, v in infos[0].items() if k != "extra.gamefile"}]))(
        *real())
    with pytest.raises(ProasError, match="extra.gamefile"):
        AlfworldLockstep(vec).reset()


def test_lockstep_leaves_finished_envs_without_rows_and_passes_the_rest_through(games):
    task = TASKS[0]
    walk = make_household_env().oracle(task)
    vec = AlfworldLockstep(EngineVec([games[task]]))
    vec.reset()
    assert vec.get_admissible_commands[0]  # the wrapped env's attribute
    for a in walk:
        *_, dones, infos = vec.step([a])
    assert dones[0] and infos[0]["won"] and infos[0]["proas"]["next_abstract_state"].endswith("placed=1")
    *_, infos = vec.step(["look"])  # verl-agent steps finished envs too
    assert "proas" not in infos[0]
    assert step_columns(infos)["abstract_state"].tolist() == [None]


class ActorHandle:
    """A Ray actor handle's ``__ray_call__`` without Ray: ``remote(fn, *args)`` runs ``fn`` on the
    worker (what Ray does inside the actor) and returns the value."""

    def __init__(self, worker):
        self.worker = worker
        self.__ray_call__ = types.SimpleNamespace(remote=lambda fn, *args: fn(self.worker, *args))


class GymVec:
    """verl-agent's ``AlfworldEnvs`` in one process: one worker per env, each holding TextWorld's
    batch gym env of ALFWorld's registration (``AlfredTWEnv.init_env``: seeded once, the next game
    of its seeded shuffle at every reset), reached through ``workers`` as Ray actor handles."""

    def __init__(self, gamefiles, seeds):
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        self.workers = []
        for seed in seeds:
            env_id = textworld.gym.register_games([str(g) for g in gamefiles], infos, batch_size=1,
                                                  asynchronous=False, max_episode_steps=50,
                                                  wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
            env = textworld.gym.make(env_id)
            env.seed(seed)
            self.workers.append(ActorHandle(types.SimpleNamespace(env=env)))

    def reset(self):
        import sys

        obs, infos = [], []
        for w in self.workers:
            argv = list(sys.argv)  # fast-downward's translator overwrites sys.argv
            o, info = w.worker.env.reset()
            sys.argv[:] = argv
            obs.append(o[0])
            infos.append({k: v[0] for k, v in info.items()})
        return obs, None, infos


def test_lockstep_keeps_the_game_draws_so_a_resume_plays_the_next_games(games):
    files = [games[t] for t in TASKS]
    run = AlfworldLockstep(GymVec(files, seeds=[3, 4]))
    drawn = []
    for _ in range(3):
        _, _, infos = run.reset()
        drawn.append([info["extra.gamefile"] for info in infos])
    assert run.state_dict() == {"resets": 3}
    # the third draw is a game the first two were not (one pass of a 3-game shuffle), so a fresh
    # worker that did not skip would play another game
    assert all(drawn[2][w] not in (drawn[0][w], drawn[1][w]) for w in range(2))
    resumed = AlfworldLockstep(GymVec(files, seeds=[3, 4]))
    resumed.load_state_dict({"resets": 2})
    _, _, infos = resumed.reset()  # the lockstep check: the engine's game matches the simulator's
    assert [info["extra.gamefile"] for info in infos] == drawn[2]
    assert resumed.state_dict() == {"resets": 3}
    fresh = AlfworldLockstep(GymVec(files, seeds=[3, 4]))
    assert [info["extra.gamefile"] for info in fresh.reset()[2]] == drawn[0]
    # a bad count, a restore after the envs drew, or an env without workers is refused
    with pytest.raises(ProasError, match="expected a count 'resets' >= 0"):
        fresh.load_state_dict({"resets": -1})
    with pytest.raises(ProasError, match="drawn 1 games a worker already"):
        fresh.load_state_dict({"resets": 0})
    with pytest.raises(ProasError, match="has no 'workers'"):
        AlfworldLockstep(EngineVec(files)).load_state_dict({"resets": 1})


def test_game_skips_run_inside_ray_actors():
    ray = pytest.importorskip("ray")
    from proas.integrations.verl import states

    @ray.remote(num_cpus=0)
    class Worker:  # verl-agent's AlfworldWorker holds its TextWorld env as ``env``
        def __init__(self):
            self.env = types.SimpleNamespace(skipped=0)
            self.env.skip = lambda n: setattr(self.env, "skipped", self.env.skipped + n)

        def skipped(self):
            return self.env.skipped

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        workers = [Worker.remote() for _ in range(2)]
        vec = AlfworldLockstep(types.SimpleNamespace(workers=workers))
        vec.load_state_dict({"resets": 5})
        assert ray.get([w.skipped.remote() for w in workers]) == [5, 5]
        assert states._ray_get([7]) == [7]
    finally:
        ray.shutdown()


# ---------------------------------------------------------------------- WebShop pages
def test_instruction_options_reads_the_synthetic_goal_clause():
    text = "i want a loose fit shirt with color: navy blue, and size: x-large, and price lower than 40.00 dollars"
    assert instruction_options(text) == [("color", "navy blue"), ("size", "x-large")]
    assert instruction_options("find me a shirt with color: red") == [("color", "red")]
    assert instruction_options("i need shoes, and price lower than 30.00 dollars") == []
    assert instruction_options("a mug with handle and lid") == []  # " with " of the product, not options


@pytest.mark.parametrize("before,action,after", [
    ("search", "search[red shirt]", "results"), ("item", "search[x]", "results"), ("search", "search[]", None),
    ("search", "click[search]", None), ("results", "click[next >]", "results"), ("results", "click[< prev]", "results"),
    ("results", "click[b0abc]", "item"), ("item", "click[description]", "description"),
    ("description", "click[< prev]", "item"), ("item", "click[< prev]", "results"), ("item", "click[red]", "item"),
    ("item", "click[buy now]", "done"), ("features", "click[back to search]", "search"), ("done", "click[x]", None),
    ("item", "buy it", None),
])
def test_webshop_page_kind_follows_webshops_transitions(before, action, after):
    assert webshop_page_kind(before, action) == after


class ShopAsWebshop(ProasVecEnv):
    """proas's shop env behind WebShop's vectorised-env contract, its own states removed: the
    pages and actions are all the page tracker sees, as with verl-agent's WebShop workers."""

    def _outer(self, info, task_id):
        out = super()._outer(info, task_id)
        return {k: v for k, v in out.items() if k not in ("abstract_state", "proas")}


def shop_tasks(n):
    env = make_shop_env()
    ids = env.task_ids("train")
    return [t for t in ids if len(instruction_options(env.goal(t)["instruction_text"])) >= 2][:n]


def play_pages(tasks, plans):
    vec = WebshopPages(ShopAsWebshop(make_shop_env, layout="webshop", tasks=lambda: tasks))
    _, infos = vec.reset()
    states = [[info["abstract_state"]] for info in infos]
    errors = [[] for _ in tasks]
    for k in range(max(len(p) for p in plans)):
        _, _, _, infos = vec.step([p[k] if k < len(p) else "click[nothing]" for p in plans])
        for i, info in enumerate(infos):
            if "proas" in info:
                states[i].append(info["proas"]["next_abstract_state"])
                errors[i].append(info["proas"]["env_error"])
    return states, errors


class DrawingShop(ShopAsWebshop):
    """``ShopAsWebshop`` drawing each reset's goals as verl-agent's ``WebshopMultiProcessEnv``
    does: ``env_num`` distinct goals from a ``numpy.random.RandomState`` seeded once (``_rng``)."""

    def __init__(self, seed, pool, env_num):
        self._rng = np.random.RandomState(seed)
        super().__init__(make_shop_env, layout="webshop",
                         tasks=lambda: [pool[i] for i in self._rng.choice(len(pool), size=env_num, replace=False)])


def test_webshop_pages_keep_the_goal_draws_so_a_resume_draws_the_next_goals():
    pool = make_shop_env().task_ids("train")[:40]
    run = WebshopPages(DrawingShop(7, pool, env_num=2))
    drawn = [run.reset()[0] for _ in range(3)]
    saved = json.loads(json.dumps(WebshopPages(DrawingShop(7, pool, env_num=2)).state_dict()))  # fresh
    assert set(saved) == {"rng"} and saved["rng"]["bit_generator"] == "MT19937"
    # the state after two resets, through JSON as state.json keeps it
    again = WebshopPages(DrawingShop(7, pool, env_num=2))
    again.reset()
    again.reset()
    state = json.loads(json.dumps(again.state_dict()))
    resumed = WebshopPages(DrawingShop(7, pool, env_num=2))
    resumed.load_state_dict(state)
    assert resumed.reset()[0] == drawn[2]
    fresh = WebshopPages(DrawingShop(7, pool, env_num=2))
    assert fresh.reset()[0] == drawn[0] != drawn[2]
    # an env without the generator has nothing to keep; bad states are refused in one line
    plain = WebshopPages(ShopAsWebshop(make_shop_env, layout="webshop", tasks=lambda: pool[:2]))
    assert plain.state_dict() == {}
    plain.load_state_dict({})
    with pytest.raises(ProasError, match="no numpy RandomState '_rng'"):
        plain.load_state_dict(state)
    with pytest.raises(ProasError, match="bad goal-draw generator state"):
        resumed.load_state_dict({"rng": {**state["rng"], "key": [1, 2, 3]}})
    with pytest.raises(ProasError, match="bad goal-draw generator state"):
        resumed.load_state_dict({"rng": {"bit_generator": "MT19937"}})


def test_webshop_pages_follow_an_oracle_purchase_and_recur_across_tasks():
    tasks = shop_tasks(2)
    env = make_shop_env()
    plans = [env.oracle(t) for t in tasks]
    states, errors = play_pages(tasks, plans)
    for task, seq, errs in zip(tasks, states, errors):
        n = len(instruction_options(env.goal(task)["instruction_text"]))
        assert seq[0] == "webshop|search" and seq[1] == "webshop|results"
        assert seq[-1] == "webshop|done|won" and not any(errs)
        items = [s for s in seq if s.startswith("webshop|item|")]
        # opened with nothing selected; bought once every option the instruction asks for was
        assert items[0] == f"webshop|item|opts=0/{n}" and items[-1] == f"webshop|item|opts={n}/{n}"
    assert states[0][:2] == states[1][:2] and states[0][-1] == states[1][-1]


def test_webshop_pages_flag_no_ops_and_clear_options_on_a_new_search():
    task = shop_tasks(1)[0]
    env = make_shop_env()
    plan = env.oracle(task)
    buy = plan.index("click[buy now]")
    # the oracle's clicks up to the purchase, then no-ops, back to search and the results again
    moves = plan[:buy] + ["click[search]", "buy it", "search[]", "click[back to search]", plan[0]]
    states, errors = play_pages([task], [moves])
    seq, errs = states[0], errors[0]
    assert errs[buy:buy + 3] == [True, True, True] and not any(errs[:buy]) and not any(errs[buy + 3:])
    assert seq[buy] == seq[buy + 1] == seq[buy + 2] == seq[buy + 3]  # a no-op leaves the state
    n = seq[buy].split("/")[-1]
    assert seq[buy] == f"webshop|item|opts={n}/{n}"
    assert seq[buy + 4] == "webshop|search" and seq[buy + 5] == "webshop|results"
    # back on the item page after a new search, nothing is selected any more


# ---------------------------------------------------------------------- start-up check
def config(env_name, enable=True, **proas):
    return OmegaConf.create({
        "env": {"env_name": env_name, "rollout": {"n": 2}, "seed": 0, "max_steps": 5, "history_length": 2},
        "data": {"train_batch_size": 1, "val_batch_size": 2},
        "algorithm": {"adv_estimator": "grpo", "gamma": 1.0, "norm_adv_by_std_in_grpo": True},
        "actor_rollout_ref": {"actor": {"use_invalid_action_penalty": True, "invalid_action_penalty_coef": 0.1}},
        "proas": {"enable": enable, "graph": None, "estimator": None, "shaping": "proas", **proas},
    })


@pytest.mark.parametrize("name,source", [("proas/household", "proas"), ("proas/shop", "proas"),
                                         ("alfworld/AlfredTWEnv", "alfworld"), ("Webshop", "webshop"),
                                         ("alfworld/AlfredThorEnv", None), ("sokoban", None), ("search", None)])
def test_states_source_by_env_name(name, source):
    assert states_source(name) == source
    if source is None:
        with pytest.raises(ProasError, match=rf"env.env_name='{name}' gives no abstract states.*proas.enable=False"):
            check_env_states(config(name))
        check_env_states(config(name, enable=False))  # ProAS off: any env
    else:
        check_env_states(config(name))


def test_check_config_refuses_in_one_line_with_exit_status_2(capsys, tmp_path):
    with pytest.raises(SystemExit) as stop:
        check_config(config("sokoban"))
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("proas: proas.enable=True, but env.env_name='sokoban'")
    with pytest.raises(SystemExit):
        check_config(config("proas/household", graph=str(tmp_path / "missing.json.gz")))
    assert "does not exist; build it with proas verl build-graph" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        check_config(config("proas/household", shaping="sideways"))
    assert "unknown shaping" in capsys.readouterr().err
    check_config(config("proas/household"))
    check_config(config("sokoban", enable=False))
    assert capsys.readouterr().err == ""


class Manager:
    def __init__(self, envs):
        self.envs = envs


def test_with_proas_envs_wraps_verl_agents_envs_only_with_proas_on():
    calls = []

    def theirs(cfg):
        calls.append(cfg.env.env_name)
        return Manager("train-vec"), Manager("val-vec")

    make = with_proas_envs(theirs)
    envs, val_envs = make(config("alfworld/AlfredTWEnv"))
    assert isinstance(envs.envs, AlfworldLockstep) and envs.envs.envs == "train-vec"
    assert isinstance(val_envs.envs, AlfworldLockstep) and val_envs.envs.envs == "val-vec"
    envs, _ = make(config("Webshop"))
    assert isinstance(envs.envs, WebshopPages)
    envs, _ = make(config("alfworld/AlfredTWEnv", enable=False))
    assert envs.envs == "train-vec"
    ours, _ = make(config("proas/household"))  # proas's envs; verl-agent's make is not called
    assert isinstance(ours, ProasEnvManager)
    assert calls == ["alfworld/AlfredTWEnv", "Webshop", "alfworld/AlfredTWEnv"]
    with pytest.raises(ProasError, match="gives no abstract states"):
        make(config("sokoban"))
    assert len(calls) == 3  # refused before verl-agent built anything


# ---------------------------------------------------------------------- vectorised env, prompt
def test_proas_vec_env_speaks_verl_agents_alfworld_contract():
    vec = ProasVecEnv(make_household_env, layout="alfworld", tasks=["train-pick-0000", "train-look-0000"],
                      env_num=2, group_n=2, seed=1)
    obs, image, infos = vec.reset()
    assert image is None and len(obs) == 4 and vec.task_ids[0] == vec.task_ids[1] != vec.task_ids[2]
    assert all("Your task is to: " in o for o in obs)
    assert infos[0]["extra.gamefile"].startswith("proas/household/") and infos[0]["extra.gamefile"].endswith(
        vec.task_ids[0])
    assert vec.get_admissible_commands[0] == infos[0]["admissible_commands"] != []
    walk = make_household_env().oracle(vec.task_ids[0])
    obs, _, rewards, dones, infos = vec.step([walk[0], "juggle", walk[0] if vec.task_ids[2] == vec.task_ids[0]
                                              else "look", "look"])
    assert infos[0]["proas"]["step_index"] == 0 and infos[0]["proas"]["env_error"] is False
    assert infos[1]["proas"]["env_error"] is True
    for a in walk[1:]:
        obs, _, rewards, dones, infos = vec.step([a, "look", "look", "look"])
    assert dones[0] and rewards[0] == 10.0 and infos[0]["won"]
    *_, infos = vec.step(["look"] * 4)
    assert "proas" not in infos[0] and "proas" in infos[1]  # finished envs are not stepped again


def test_proas_vec_env_speaks_webshops_contract():
    task = make_shop_env().task_ids("train")[0]
    vec = ProasVecEnv(make_shop_env, layout="webshop", tasks=[task], env_num=1)
    obs, infos = vec.reset()
    assert obs[0].split(" [SEP] ")[1] == "Instruction:"
    assert infos[0]["available_actions"] == {"has_search_bar": True, "clickables": ["search"]}  # as WebShop
    obs, rewards, dones, infos = vec.step(["search[something]"])
    assert "next >" in infos[0]["available_actions"]["clickables"] and infos[0]["task_score"] == 0.0


def test_the_default_prompt_states_the_task_at_every_step():
    manager = ProasEnvManager(make_household_env, group_n=1, history_length=2, tasks=lambda: ["train-pick-0000"])
    obs, _ = manager.reset(kwargs=None)
    walk = make_household_env().oracle("train-pick-0000")
    prompts = [obs["text"][0]]
    for a in walk[:-1]:
        obs, *_ = manager.step([f"<think>x</think><action>{a}</action>"])
        prompts.append(obs["text"][0])
    task = make_household_env().reset("train-pick-0000")[1]["goal"]
    assert len(prompts) >= 3 and all(p.startswith(task) for p in prompts)
    assert f"Steps taken so far: {len(walk) - 1}." in prompts[-1]
    assert default_prompt("o", {"task": "buy a red shirt"}, []).startswith("Your task is to: buy a red shirt")

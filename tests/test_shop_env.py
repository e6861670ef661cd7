"""ShopEnv on a tiny hand-made WebShop-schema catalog: exact page texts, clickables, transitions,
no-ops, rewards, step limit, abstraction; and the protocol and oracle on the shipped catalog."""

import dataclasses
import json

import pytest

from proas.envs import check_env
from proas.envs.base import SUCCESS_REWARD
from proas.envs.shop import ShopCatalog, ShopEnv, make_shop_env, parse_action
from proas.envs.shop.env import DonePage, ItemPage, ResultsPage, SearchPage, SubPage
from proas.errors import ProasError

SHIRT = "B000000001"
RIVAL = "B000000002"
FILLERS = [f"B1000000{n:02d}" for n in range(22)]


def _raw(asin, name, pricing, options, nouns):
    return {
        "asin": asin, "name": name, "category": "fashion", "query": "shirt",
        "product_category": "Clothing › Men › Shirts", "full_description": f"The {name}, made well.",
        "small_description": ["Machine wash cold." if asin == SHIRT else "Hand wash only.", "Cotton blend."],
        "pricing": pricing, "customization_options": options, "images": [None], "title_nouns": nouns,
    }


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    d = tmp_path_factory.mktemp("shop")
    opts = {"Color": [{"value": "Red"}, {"value": "Blue/Navy"}], "Size": [{"value": "Small"}, {"value": "X-Large"}]}
    items = [_raw(SHIRT, "Acme Red Shirt", "$10.00 - $20.00", opts, ["acme", "shirt"]),
             _raw(RIVAL, "Zeta Shirt", "$55.00", {}, ["zeta", "shirt"])]
    items += [_raw(a, f"Filler Shirt {i:02d}", "$5.00", None, ["filler", "shirt"]) for i, a in enumerate(FILLERS)]
    attrs = {a["asin"]: {"attributes": ["cotton"], "instruction": None, "instruction_attributes": None} for a in items}
    attrs[SHIRT] = {"attributes": ["machine wash"], "instruction": "i need a machine wash shirt",
                    "instruction_attributes": ["machine wash"]}
    attrs[RIVAL] = {"attributes": ["hand wash"], "instruction": None, "instruction_attributes": None}
    (d / "items.json").write_text(json.dumps(items))
    (d / "attrs.json").write_text(json.dumps(attrs))
    (d / "human.json").write_text("{}")
    return ShopCatalog.load(
        items=d / "items.json", attrs=d / "attrs.json", human=d / "human.json", nouns="stored", seed=7
    )


@pytest.fixture()
def env(catalog):
    return ShopEnv(catalog)


def task_for(catalog, color, size):
    [i] = [i for i, g in enumerate(catalog.goals) if g["goal_options"] == {"color": color, "size": size}]
    return str(i)


def test_four_goals_one_per_option_combination(catalog):
    assert len(catalog.goals) == 4
    assert {tuple(g["goal_options"].values()) for g in catalog.goals} == {
        ("red", "small"), ("red", "x-large"), ("blue | navy", "small"), ("blue | navy", "x-large")}


def test_search_page(env, catalog):
    tid = task_for(catalog, "blue | navy", "x-large")
    obs, info = env.reset(tid)
    instr = catalog.goals[int(tid)]["instruction_text"]
    assert instr.startswith(
        "i need a machine wash shirt with color: blue | navy, and size: x-large, and price lower than "
    )
    assert obs == f"WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search"
    assert info["clickables"] == ["search"] and info["has_search_bar"]
    assert info["admissible"] == [
        "search[i need a machine wash shirt with color: blue | navy, and size: x-large]",
        "search[i need a machine wash shirt]",
    ]
    assert info["abstract_state"] == "shop|search" and info["anchor"] == obs and info["task"] == instr
    assert not info["won"] and info["score"] == 0.0 and not info["error"]


def test_results_pages_paging_and_prev(env, catalog):
    tid = task_for(catalog, "red", "small")
    env.reset(tid)
    instr = catalog.goals[int(tid)]["instruction_text"]
    obs, r, _, _, info = env.step("search[Shirt]")
    parts = obs.split(" [SEP] ")
    assert parts[:6] == ["Instruction:", instr, "Back to Search", "Page 1 (Total results: 24)", "Next >", parts[5]]
    assert len(parts) == 5 + 3 * 10
    assert info["clickables"][:2] == ["back to search", "next >"] and len(info["clickables"]) == 12
    assert all(c == c.lower() for c in info["clickables"])
    env.step("click[next >]")
    obs, *_ = env.step("click[next >]")
    assert " [SEP] Page 3 (Total results: 24) [SEP] < Prev [SEP] Next > [SEP] " in obs
    assert len(obs.split(" [SEP] ")) == 6 + 3 * 4
    obs, *_ = env.step("click[next >]")  # past the last page: an empty page, still with Next >
    assert obs.endswith("Page 4 (Total results: 24) [SEP] < Prev [SEP] Next >")
    obs, *_ = env.step("click[< prev]")
    assert "Page 3 (Total results: 24)" in obs


def test_item_page_text_and_clickables(env, catalog):
    tid = task_for(catalog, "red", "small")
    env.reset(tid)
    instr = catalog.goals[int(tid)]["instruction_text"]
    env.step("search[acme red shirt]")
    obs, r, _, _, info = env.step(f"click[{SHIRT.lower()}]")
    assert obs == (
        f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] red [SEP] "
        "blue | navy [SEP] size [SEP] small [SEP] x-large [SEP] Acme Red Shirt [SEP] "
        "Price: $10.0 to $20.0 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    assert info["clickables"] == ["back to search", "< prev", "description", "features", "reviews", "buy now",
                                  "red", "blue | navy", "small", "x-large"]
    assert info["abstract_state"] == "shop|item|match|opts=-"


def test_sub_pages_and_prev_keep_options(env, catalog):
    tid = task_for(catalog, "blue | navy", "x-large")
    env.reset(tid)
    instr = catalog.goals[int(tid)]["instruction_text"]
    env.step("search[acme]")
    env.step(f"click[{SHIRT.lower()}]")
    _, _, _, _, info = env.step("click[blue | navy]")
    assert info["abstract_state"] == "shop|item|match|opts=color"
    obs, _, _, _, info = env.step("click[description]")
    assert obs == f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] < Prev [SEP] The Acme Red Shirt, made well."
    assert info["clickables"] == ["back to search", "< prev"]
    assert info["abstract_state"] == "shop|description|match|opts=color"
    env.step("click[< prev]")
    obs, *_ = env.step("click[features]")
    assert obs.endswith("< Prev [SEP] Machine wash cold. [SEP] Cotton blend.")
    env.step("click[< prev]")
    obs, *_ = env.step("click[reviews]")
    assert obs.endswith("Back to Search [SEP] < Prev")  # WebShop's released data has no reviews
    env.step("click[< prev]")
    env.step("click[x-large]")
    obs, reward, terminated, truncated, info = env.step("click[Buy Now]")  # the argument is lower-cased
    assert (terminated, truncated) == (True, False)  # buying ends the task: terminated
    assert reward == 10.0 and info["won"] and info["score"] == 1.0
    assert (
        f"Purchased [SEP] asin [SEP] {SHIRT} [SEP] options [SEP] " + '{"color": "blue | navy", "size": "x-large"}'
        in obs
    )
    assert obs.endswith("Your score (min 0.0, max 1.0) [SEP] 1.0 [SEP] Reward Details [SEP] None")
    assert info["abstract_state"] == "shop|done|won" and info["clickables"] == []
    obs2, reward, terminated, truncated, info = env.step("click[buy now]")  # after the end: refused, still done
    done = terminated or truncated
    assert obs2 == obs and done and info["error"] and reward == 0.0


def test_partial_purchase_scores_but_does_not_win(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    env.step("search[acme]")
    env.step(f"click[{SHIRT.lower()}]")
    env.step("click[red]")
    obs, reward, terminated, truncated, info = env.step("click[buy now]")
    done = terminated or truncated
    # attribute 1 + options 1 of 2 + price ok 1, over 1 + 2 + 1
    assert done and reward == 0.0 and not info["won"] and info["score"] == pytest.approx(0.75)
    assert info["abstract_state"] == "shop|done|lost"


def test_last_option_click_wins_and_prev_from_item_clears_options(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    env.step("search[acme]")
    env.step(f"click[{SHIRT.lower()}]")
    env.step("click[blue | navy]")
    _, _, _, _, info = env.step("click[red]")
    assert isinstance(env.page, ItemPage) and env.page.options == {"color": "red"}
    assert info["abstract_state"] == "shop|item|match|opts=color"
    obs, _, _, _, info = env.step("click[< prev]")
    assert "Page 1 (Total results:" in obs and isinstance(env.page, ResultsPage)  # options left behind
    env.step(f"click[{SHIRT.lower()}]")
    _, reward, _, _, info = env.step("click[buy now]")
    assert info["score"] == pytest.approx(0.5)  # (1 + 0 + 1) / 4


def test_back_to_search_resets(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    first, _ = env.reset(task_for(catalog, "red", "small"))
    env.step("search[acme]")
    env.step(f"click[{SHIRT.lower()}]")
    env.step("click[red]")
    obs, _, _, _, info = env.step("click[back to search]")
    assert obs == first and env.page == SearchPage()
    assert info["abstract_state"] == "shop|search"


def test_pages_are_typed_states_holding_what_their_transitions_need(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    assert env.page == SearchPage()
    env.step("search[acme]")
    results = env.page
    assert isinstance(results, ResultsPage) and (results.keywords, results.number) == (("acme",), 1)
    assert SHIRT in [p["asin"] for p in results.shown]
    env.step(f"click[{SHIRT.lower()}]")
    env.step("click[red]")
    item = env.page
    assert item == ItemPage(results, SHIRT, {"color": "red"})  # < Prev searches results' keywords again
    _, _, _, _, info = env.step("click[features]")
    assert env.page == SubPage(item, "features") and info["page"] == "sub"
    env.step("click[< prev]")
    assert env.page == item  # the sub-page gives its item page back, options included
    env.step("click[small]")
    _, reward, terminated, truncated, info = env.step("click[buy now]")
    done = terminated or truncated
    bought = env.page
    assert isinstance(bought, DonePage) and bought.item.options == {"color": "red", "size": "small"}
    assert (bought.score, reward, done, info["reward_info"]) == (1.0, SUCCESS_REWARD, True, bought.reward_info)
    with pytest.raises(dataclasses.FrozenInstanceError):
        bought.score = 0.0  # type: ignore[misc]  # the point of the test: pages are immutable
    assert item.options == {"color": "red"}  # the purchase made a new page; the old one is unchanged


@pytest.mark.parametrize("action", [
    "click[search]", "click[buy now]", "click[next >]", "buy now", "search[]", "search", "click[]",
    "%%% not an action %%%", "click [search]", "SEARCH[shirt]",
])
def test_invalid_actions_are_no_ops_flagged_error(env, catalog, action):
    obs0, _ = env.reset(task_for(catalog, "red", "small"))
    obs, reward, terminated, truncated, info = env.step(action)
    done = terminated or truncated
    assert obs == obs0 and info["error"] and not done and reward == 0.0
    assert info["abstract_state"] == "shop|search"


def test_invalid_candidates_are_refused(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    env.step("search[acme]")
    _, _, _, _, info = env.step(f"click[{SHIRT.lower()}]")
    assert info["invalid_candidates"]
    for cand in info["invalid_candidates"]:
        probe = ShopEnv(catalog)
        probe.reset(task_for(catalog, "red", "small"))
        probe.step("search[acme]")
        probe.step(f"click[{SHIRT.lower()}]")
        assert probe.step(cand)[4]["error"], cand


def test_search_works_from_any_page_and_regex_is_greedy(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    env.step("search[acme]")
    env.step(f"click[{SHIRT.lower()}]")
    obs, _, _, _, info = env.step("search[filler shirt]")
    assert not info["error"] and isinstance(env.page, ResultsPage)
    assert (env.page.keywords, env.page.number, info["page"]) == (("filler", "shirt"), 1, "results")
    # WebShop's regex is greedy on the name too: the name runs to the last '[' -> not a search
    assert parse_action("search[filler [shirt]]") == ("search[filler ", "shirt]")
    assert env.step("search[filler [shirt]]")[4]["error"]
    assert parse_action("click[a]]") == ("click", "a]")
    assert parse_action("click[buy now] please") == ("click", "buy now")  # trailing text is ignored
    assert parse_action("search[red\nshirt]") == ("search[red\nshirt]", None)  # '.' stops at newlines
    assert parse_action("nothing") == ("nothing", None)


def test_results_abstraction_tells_whether_a_winning_product_is_shown(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    _, _, _, _, info = env.step("search[filler]")
    assert info["abstract_state"] == "shop|results|nomatch"
    _, _, _, _, info = env.step("search[acme red]")
    assert info["abstract_state"] == "shop|results|match"
    env.step("search[zeta]")
    _, _, _, _, info = env.step(f"click[{RIVAL.lower()}]")
    assert not info["error"] and info["abstract_state"] == "shop|item|other"


def test_debug_query_prefix_lists_every_product_of_a_query(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    obs, *_ = env.step("search[<q> shirt]")
    assert "Page 1 (Total results: 24)" in obs


def test_step_limit_ends_the_episode(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    for _ in range(14):
        _, _, terminated, truncated, _ = env.step("click[nothing]")
        done = terminated or truncated
        assert not done
    _, reward, terminated, truncated, info = env.step("click[nothing]")
    assert (terminated, truncated) == (False, True)  # the step limit cut it: truncated, not terminated
    assert reward == 0.0 and not info["won"]
    *_, terminated, truncated, info = env.step("click[nothing]")  # after the end: the same end, refused
    assert (terminated, truncated) == (False, True) and info["error"]


def test_bad_task_ids(env):
    for bad in ("x", "-1", "4", "01"):
        with pytest.raises(ProasError):
            env.reset(bad)


def test_oracle_and_protocol_on_tiny_catalog(env, catalog):
    for tid in env.task_ids("all"):
        check_env(env, tid)
    plan = env.oracle(task_for(catalog, "blue | navy", "x-large"))
    assert plan[1:] == [f"click[{SHIRT.lower()}]", "click[blue | navy]", "click[x-large]", "click[buy now]"]


# ------------------------------------------------------------------ the shipped catalog


@pytest.fixture(scope="module")
def shipped():
    return make_shop_env(nouns="stored")


def test_shipped_splits(shipped):
    valid, train = shipped.task_ids("valid"), shipped.task_ids("train")
    assert len(valid) == 128 and len(set(valid)) == 128
    assert all(500 <= int(t) < 1500 for t in valid)
    texts = {shipped.goal(t)["instruction_text"] for t in valid}
    assert len(texts) == 128
    assert not set(train) & set(valid)
    assert not {shipped.goal(t)["instruction_text"] for t in train} & texts
    assert min(int(t) for t in train) == 500
    with pytest.raises(ProasError, match="unknown shop split"):
        shipped.task_ids("bogus")


def test_shipped_protocol_and_oracle_wins_every_validation_goal(shipped):
    check_env(shipped, shipped.task_ids("valid")[0])
    for tid in shipped.task_ids("valid"):
        plan = shipped.oracle(tid)
        shipped.reset(tid)
        for action in plan:
            obs, reward, terminated, truncated, info = shipped.step(action)
            done = terminated or truncated
            assert not info["error"] and info["abstract_state"].startswith("shop|")
        assert done and info["won"] and reward == 10.0, tid


def test_oracle_does_not_disturb_a_running_episode(shipped):
    tid = shipped.task_ids("valid")[3]
    shipped.reset(tid)
    obs, *_ = shipped.step("search[red shirt]")
    shipped.oracle(shipped.task_ids("valid")[5])
    assert shipped.obs == obs and shipped.steps == 1


def test_done_page_options_are_rendered_like_jinja_tojson():
    from proas.envs.shop.env import _tojson

    assert _tojson({"size": "men's <1>", "a": "\u00e9"}) == '{"a": "\\u00e9", "size": "men\\u0027s \\u003c1\\u003e"}'


def test_hints_lead_to_a_win_from_a_detour(env, catalog):
    tid = task_for(catalog, "blue | navy", "x-large")
    env.reset(tid)
    env.step("search[shirt]")
    env.step("click[next >]")
    env.step("click[next >]")  # page 3 of 24 hits: wherever the shirt is, the hints must get there
    for _ in range(env.max_steps - env.steps):
        action = env.hint()
        _, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        assert not info["error"], action
        if done:
            break
    assert info["won"] and reward == 10.0
    assert env.hint() is None


def test_hint_after_a_wrong_option_reclicks_it(env, catalog):
    env.reset(task_for(catalog, "red", "small"))
    env.step("search[acme]")
    env.step(f"click[{SHIRT.lower()}]")
    env.step("click[blue | navy]")
    env.step("click[small]")
    assert env.hint() == "click[red]"
    env.step("click[red]")
    assert env.hint() == "click[buy now]"

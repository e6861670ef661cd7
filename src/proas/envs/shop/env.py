"""``ShopEnv``: WebShop's text mode (``observation_mode='text'``) behind proas's env protocol.

Pages, clickables and transitions follow WebShop's ``SimServer``/``WebAgentTextEnv``:

- search page ``WebShop [SEP] Instruction: [SEP] <goal> [SEP] Search``;
- results pages, 10 products of the top 50, ``< Prev`` from page 2 on, ``Next >`` always;
- item page with its options (a click on a value selects it; one value per option name; the page
  does not show which is selected), ``Description`` / ``Features`` / ``Reviews`` sub-pages
  (reviews are empty, as in the released WebShop), ``Buy Now`` ends the episode with the reward;
- ``search[kw]`` works on every page; ``click[x]`` needs ``x`` (lower-cased) to be a clickable of
  the current page and not ``search``; anything else is a no-op that returns the same page, flagged
  ``info["error"]``.

The episode also ends after ``max_steps`` (15, as verl-agent). The step reward is 10.0 when the
purchase scores exactly 1 (verl-agent's rule-based reward), else 0; ``info["score"]`` is WebShop's
raw score of the purchase (0 until something is bought).

``info["admissible"]``: the current page's clicks as ``click[...]`` (without WebShop's refused
``click[search]``), and on the search page two candidate queries read off the instruction (the
instruction without its price clause, and without its option and price clauses). Any other
``search[...]`` is accepted too; the list is a menu for policies that score candidates, not a limit.

``info["abstract_state"]`` (``shop|...``) records progress towards the goal: the page kind, whether
the results page shows a product that can still score 1 (``match``), whether the item is such a
product, and which goal options the current selection satisfies.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from proas.envs.shop.engine import DEFAULT_GOAL_SEED, ShopCatalog
from proas.envs.shop.reward import MATCH_THRESHOLD, goal_option_items, normalize_color, token_set_ratio
from proas.errors import ProasError

SEP = " [SEP] "
PRODUCT_WINDOW = 10
SUB_PAGES = {"description": "Description", "features": "Features", "reviews": "Reviews"}
TASK_TYPE = "shop"
#: WebShop's evaluation index range, from which the 128 validation goals are drawn
VALID_RANGE = (500, 1500)
VALID_SIZE = 128
VALID_DRAW_SEED = 0
TEST_RANGE = (0, 500)

# WebShop's pattern, applied with re.match: anchored at the start only, '.' stops at a newline
_ACTION = re.compile(r"(.+)\[(.+)\]")
_PRICE_CLAUSE = re.compile(r", and price lower than [\d.]+ dollars$")


def _tojson(obj: Any) -> str:
    """Jinja/Flask's ``tojson`` filter: sorted keys, ASCII, HTML-unsafe characters escaped."""
    text = json.dumps(obj, sort_keys=True)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        text = text.replace(ch, esc)
    return text


def parse_action(action: str) -> tuple[str, str | None]:
    """WebShop's ``parse_action``: ``name[arg]`` (greedy, so arg runs to the last ``]``)."""
    m = _ACTION.match(action)
    if m is None:
        return action, None
    return m.group(1), m.group(2)


class ShopEnv:
    """WebShop over a ``ShopCatalog``; task ids are goal indices (as strings) of its shuffle."""

    name = "shop"

    def __init__(self, catalog: ShopCatalog | None = None, *, max_steps: int = 15, **load_kwargs: Any) -> None:
        self.catalog = catalog if catalog is not None else ShopCatalog.load(**load_kwargs)
        self.max_steps = max_steps
        self.taskset_source = (
            f"shop goals of {Path(self.catalog.source).name} (sha256 {self.catalog.source_sha256}), "
            f"shuffled with seed {self.catalog.seed}; valid = {VALID_SIZE} unique goals drawn "
            f"with seed {VALID_DRAW_SEED} from index range [{VALID_RANGE[0]}, {VALID_RANGE[1]}), "
            f"train = indices >= {VALID_RANGE[0]} minus valid"
        )
        self._rng = random.Random(0)
        self._splits: dict[str, list[str]] | None = None
        self._goal_idx: int | None = None

    # ================================================================== protocol
    def task_ids(self, split: str) -> list[str]:
        """``valid``: 128 unique goals from [500, 1500); ``train``: indices >= 500 minus those
        (and minus any goal whose instruction equals a validation one); ``test``: WebShop's
        test range [0, 500); ``all``: every goal."""
        if self._splits is None:
            self._splits = self._make_splits()
        if split not in self._splits:
            raise ProasError(f"unknown shop split {split!r}; choose one of {sorted(self._splits)}")
        return list(self._splits[split])

    def _make_splits(self) -> dict[str, list[str]]:
        goals = self.catalog.goals
        n = len(goals)
        lo, hi = VALID_RANGE[0], min(VALID_RANGE[1], n)
        candidates = random.Random(VALID_DRAW_SEED).sample(range(lo, hi), k=max(0, hi - lo)) if hi > lo else []
        valid: list[int] = []
        seen: set[str] = set()
        for i in candidates:
            text = goals[i]["instruction_text"]
            if text in seen:
                continue
            seen.add(text)
            valid.append(i)
            if len(valid) == VALID_SIZE:
                break
        valid.sort()
        valid_set = set(valid)
        train = [i for i in range(lo, n) if i not in valid_set and goals[i]["instruction_text"] not in seen]
        return {
            "valid": [str(i) for i in valid],
            "train": [str(i) for i in train],
            "test": [str(i) for i in range(TEST_RANGE[0], min(TEST_RANGE[1], n))],
            "all": [str(i) for i in range(n)],
        }

    def goal(self, task_id: str) -> dict[str, Any]:
        return self.catalog.goals[self._index(task_id)]

    def _index(self, task_id: str) -> int:
        try:
            idx = int(task_id)
        except (TypeError, ValueError):
            raise ProasError(f"shop task id must be a goal index like '512', got {task_id!r}") from None
        if not 0 <= idx < len(self.catalog.goals) or str(idx) != str(task_id).strip():
            raise ProasError(f"shop task id {task_id!r} is not a goal index in [0, {len(self.catalog.goals)})")
        return idx

    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._goal_idx = self._index(task_id)
        self._goal = self.catalog.goals[self._goal_idx]
        self._rng = random.Random(self._goal_idx)
        self.steps = 0
        self.done = False
        self.score = 0.0
        self.reward_info: dict[str, Any] | None = None
        self._to_search_page()
        self._render()
        return self.obs, self._info(error=False)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._goal_idx is None:
            raise ProasError("shop env: call reset(task_id) before step()")
        if self.done:
            return self.obs, 0.0, True, self._info(error=True)
        self.steps += 1
        error = not self._apply(action)
        if not error:
            self._render()
        if self.steps >= self.max_steps:
            self.done = True
        won = self.page == "done" and self.score == 1.0
        reward = 10.0 if won else 0.0
        return self.obs, reward, self.done, self._info(error=error)

    # ================================================================== transitions
    def _apply(self, action: str) -> bool:
        """Perform ``action`` as WebShop's text env does; False for a no-op."""
        if not isinstance(action, str):
            return False
        name, arg = parse_action(action)
        if arg is not None:
            arg = arg.lower()
        if name == "search" and arg:
            self._search(arg.split(" "), page=1)
            return True
        if name == "click" and arg is not None and arg in self.clickables and arg != "search":
            self._click(arg)
            return True
        return False

    def _to_search_page(self) -> None:
        self.page = "search"
        self.keywords: list[str] | None = None
        self.results_page: int | None = None
        self.asin: str | None = None
        self.visited: set[str] = set()
        self.options: dict[str, str] = {}
        self.sub_page: str | None = None

    def _search(self, keywords: list[str], page: int) -> None:
        self.keywords = keywords
        self.results_page = page
        self.asin = None
        self.options = {}
        self.top_n = self.catalog.search(keywords, self._rng)
        self.page = "results"

    def _click(self, label: str) -> None:
        kind, payload = self.clickables[label]
        if label == "buy now":
            self.score, self.reward_info = self.catalog.reward(self.asin, self._goal, self.options)  # type: ignore[arg-type]
            self.page = "done"
            self.done = True
        elif label == "back to search":
            self._to_search_page()
        elif label == "next >" and self.page == "results":
            self._search(self.keywords, self.results_page + 1)  # type: ignore[arg-type, operator]
        elif label == "< prev" and self.page == "results":
            self._search(self.keywords, self.results_page - 1)  # type: ignore[arg-type, operator]
        elif label == "< prev" and self.page == "sub":
            self.page = "item"
        elif label == "< prev" and self.page == "item":
            self._search(self.keywords, self.results_page)  # type: ignore[arg-type]
        elif label in SUB_PAGES:
            self.page, self.sub_page = "sub", label
        elif kind == "product":
            self.asin = payload
            self.visited.add(payload)
            self.page = "item"
        elif kind == "option":
            self.options[payload] = label
            self.page = "item"

    # ================================================================== rendering
    def _render(self) -> None:
        """Build the page text and ``clickables`` (label -> (kind, payload)) in WebShop's order."""
        instr = self._goal["instruction_text"]
        head = ["Instruction:", instr]
        clickables: dict[str, tuple[str, Any]] = {}
        self.has_search_bar = False
        if self.page == "search":
            parts = ["WebShop", *head, "Search"]
            clickables["search"] = ("button", None)
            self.has_search_bar = True
        elif self.page == "results":
            page = self.results_page
            shown = self.top_n[(page - 1) * PRODUCT_WINDOW: page * PRODUCT_WINDOW]
            parts = [*head, "Back to Search", f"Page {page} (Total results: {len(self.top_n)})"]
            clickables["back to search"] = ("button", None)
            if page > 1:
                parts.append("< Prev")
                clickables["< prev"] = ("button", None)
            parts.append("Next >")
            clickables["next >"] = ("button", None)
            for p in shown:
                parts += [p["asin"], p["Title"], p["Price"]]
            for p in shown:
                clickables[p["asin"].lower()] = ("product", p["asin"])
            self.shown = [p["asin"] for p in shown]
        elif self.page == "item":
            product = self.catalog.by_asin[self.asin]
            parts = [*head, "Back to Search", "< Prev"]
            for opt_name, values in product["options"].items():
                parts += [opt_name, *values]
            parts += [product["Title"], f"Price: {product['Price']}", f"Rating: {product['Rating']}",
                      "Description", "Features", "Reviews", "Buy Now"]
            for label in ("back to search", "< prev", "description", "features", "reviews", "buy now"):
                clickables[label] = ("button", None)
            for opt_name, values in product["options"].items():
                for v in values:
                    clickables[v] = ("option", opt_name)  # a later radio overrides an equal key, as in WebShop
        elif self.page == "sub":
            product = self.catalog.by_asin[self.asin]
            parts = [*head, "Back to Search", "< Prev"]
            if self.sub_page == "description":
                parts.append(product["Description"])
            elif self.sub_page == "features":
                parts += list(product["BulletPoints"])
            clickables["back to search"] = ("button", None)
            clickables["< prev"] = ("button", None)
        else:  # done
            parts = ["Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
                     "Purchased", "asin", self.asin, "options", _tojson(self.options),
                     "attrs", "None", "category", "None", "query", "None", "product category", "None",
                     "Target", "asin", "options", "attrs", "price upper", "instuction text", "category",
                     "product category", "query", "Goal", "None", "Reward", "Your score (min 0.0, max 1.0)",
                     str(self.score), "Reward Details", "None"]
        self.obs = SEP.join(s for s in (str(x).strip() for x in parts) if s)
        self.clickables = clickables

    # ================================================================== info
    def admissible(self) -> list[str]:
        out = []
        if self.has_search_bar:
            out += [f"search[{q}]" for q in self.instruction_queries()]
        out += [f"click[{c}]" for c in self.clickables if c != "search"]
        return out

    def instruction_queries(self) -> list[str]:
        """Two search queries read off the visible instruction (no goal knowledge)."""
        text = _PRICE_CLAUSE.sub("", self._goal["instruction_text"]).strip().lower()
        short = text.split(" with ")[0].strip() if isinstance(self._goal["goal_options"], dict) else text
        return list(dict.fromkeys(q for q in (text, short) if q))

    def invalid_candidates(self) -> list[str]:
        """A few well-formed actions WebShop would refuse here (plus one malformed)."""
        out = []
        if self.page == "search":
            out.append("click[search]")
        for label in ("buy now", "next >", "< prev", "back to search", "description"):
            if label not in self.clickables:
                out.append(f"click[{label}]")
        out.append("search[]")
        return out[:4]

    def _matches(self, asin: str) -> bool:
        return self.catalog.can_win_cached(self._goal_idx, asin)  # type: ignore[arg-type]

    def satisfied_options(self) -> list[str]:
        """The goal options (names, or indices for human goals) the current selection satisfies."""
        chosen = [normalize_color(v) for v in self.options.values()]
        goal_opts = self._goal["goal_options"]
        labels = list(goal_opts) if isinstance(goal_opts, dict) else [str(i) for i in range(len(goal_opts))]
        out = []
        for label, g in zip(labels, goal_option_items(goal_opts)):
            g = normalize_color(g)
            if any(token_set_ratio(c, g) > MATCH_THRESHOLD for c in chosen):
                out.append(label)
        return sorted(out)

    def abstract_state(self) -> str:
        if self.page == "search":
            return "shop|search"
        if self.page == "results":
            hit = any(self._matches(a) for a in self.shown)
            return f"shop|results|{'match' if hit else 'nomatch'}"
        if self.page == "done":
            return f"shop|done|{'won' if self.score == 1.0 else 'lost'}"
        where = "item" if self.page == "item" else self.sub_page
        if not self._matches(self.asin):  # type: ignore[arg-type]
            return f"shop|{where}|other"
        return f"shop|{where}|match|opts={','.join(self.satisfied_options()) or '-'}"

    def _info(self, error: bool) -> dict[str, Any]:
        won = self.page == "done" and self.score == 1.0
        return {
            "won": won,
            "score": float(self.score),
            "error": error,
            "admissible": self.admissible(),
            "abstract_state": self.abstract_state(),
            "anchor": self.obs,
            "task_type": TASK_TYPE,
            "task": self._goal["instruction_text"],
            "invalid_candidates": self.invalid_candidates(),
            "page": self.page,
            "has_search_bar": self.has_search_bar,
            "clickables": list(self.clickables),
            "steps": self.steps,
            "reward_info": self.reward_info,
        }

    # ================================================================== oracle
    def hint(self) -> str | None:
        """The next action of a shortest known way to win from the current page (for ``proas play``).

        Opens a product that can score 1 if the page shows one, pages towards one, fixes the
        options one click at a time, buys; otherwise starts over with the oracle's search.
        """
        if self._goal_idx is None or self.done:
            return None
        if self.page == "sub":
            return "click[< prev]"
        if self.page == "item":
            if not self._matches(self.asin):  # type: ignore[arg-type]
                return "click[< prev]"
            _, wanted = self.catalog.best_options(self.asin, self._goal)  # type: ignore[arg-type]
            if self.catalog.reward(self.asin, self._goal, self.options)[0] == 1.0:  # type: ignore[arg-type]
                return "click[buy now]"
            for name, value in wanted.items():
                if self.options.get(name) != value:
                    return f"click[{value}]"
            return "click[buy now]"
        if self.page == "results":
            for asin in self.shown:
                if self._matches(asin):
                    return f"click[{asin.lower()}]"
            ranks = [r for r, p in enumerate(self.top_n) if self._matches(p["asin"])]
            if ranks:
                target_page = ranks[0] // PRODUCT_WINDOW + 1
                return "click[next >]" if target_page > self.results_page else "click[< prev]"  # type: ignore[operator]
        saved = self._save()
        try:
            plan = self.oracle(str(self._goal_idx))
        finally:
            self._restore(saved)
        return plan[0]

    def oracle(self, task_id: str) -> list[str]:
        """A shortest plan found among candidate queries: search, page to the first product that
        can score 1, open it, click the needed option values, buy. Verified by replay.

        Queries tried: the two instruction queries, then the target product's title. Raises
        ``ProasError`` if no plan reaches a score of 1 within ``max_steps``.
        """
        idx = self._index(task_id)
        goal = self.catalog.goals[idx]
        saved = self._save()
        try:
            self.reset(task_id)
            queries = self.instruction_queries() + [goal["name"].lower()]
            best: list[str] | None = None
            for q in queries:
                plan = self._plan_for_query(q, goal)
                if plan is not None and (best is None or len(plan) < len(best)):
                    best = plan
            if best is None or not self._replay_wins(task_id, best):
                raise ProasError(f"shop task {task_id}: no plan found that scores 1 within {self.max_steps} steps")
            return best
        finally:
            self._restore(saved)

    def _plan_for_query(self, query: str, goal: dict[str, Any]) -> list[str] | None:
        hits = self.catalog.search(query.split(" "), random.Random(0))
        for rank, p in enumerate(hits):
            if not self._matches(p["asin"]):
                continue
            best, opts = self.catalog.best_options(p["asin"], goal)
            plan = [f"search[{query}]"] + ["click[next >]"] * (rank // PRODUCT_WINDOW)
            plan += [f"click[{p['asin'].lower()}]"] + [f"click[{v}]" for v in opts.values()] + ["click[buy now]"]
            return plan if len(plan) <= self.max_steps else None
        return None

    def _replay_wins(self, task_id: str, plan: list[str]) -> bool:
        self.reset(task_id)
        info: dict[str, Any] = {}
        for a in plan:
            _, _, done, info = self.step(a)
            if info["error"]:
                return False
        return bool(info.get("won"))

    def _save(self) -> dict[str, Any] | None:
        if self._goal_idx is None:
            return None
        return {
            k: (
                set(v)
                if isinstance(v, set)
                else dict(v)
                if isinstance(v, dict)
                else list(v)
                if isinstance(v, list)
                else v
            )
            for k, v in self.__dict__.items()
            if k not in ("catalog", "_splits")
        }

    def _restore(self, saved: dict[str, Any] | None) -> None:
        if saved is None:
            self._goal_idx = None
            return
        self.__dict__.update(saved)


def make_shop_env(**kwargs: Any) -> ShopEnv:
    """The factory the CLI and the trainer use: ``ShopEnv(**kwargs)`` over the shipped catalog
    by default (kwargs: ``items``, ``attrs``, ``human``, ``human_goals``, ``num_products``,
    ``seed`` (default 233), ``nouns``, ``max_steps``)."""
    return ShopEnv(**kwargs)


__all__ = ["DEFAULT_GOAL_SEED", "ShopEnv", "make_shop_env", "parse_action"]

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

Buying terminates the episode (the env protocol's ``terminated``, whatever the purchase scores);
``max_steps`` (15, as verl-agent) steps without a purchase truncate it (``truncated``). The step reward is
``SUCCESS_REWARD`` (10.0, ``proas.envs.base``) when the purchase scores exactly 1 (verl-agent's
rule-based reward), else 0; ``info["score"]`` is WebShop's raw score of the purchase (0 until
something is bought).

The state is a typed page (``SearchPage``, ``ResultsPage``, ``ItemPage``, ``SubPage``,
``DonePage``), each holding what its transitions need (an item page its results page, for
``< Prev``; a sub-page its item page, options included). A step replaces the page with a new one
and never edits one, so a reference to the episode state is a snapshot.

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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

from proas.envs.base import SUCCESS_REWARD
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


# ====================================================================== page states
Product = dict[str, Any]  # a catalog product (``ShopCatalog.by_asin``'s values)


@dataclass(frozen=True)
class SearchPage:
    """The start page: the instruction and a search bar; nothing to click."""

    kind: ClassVar[str] = "search"


@dataclass(frozen=True)
class ResultsPage:
    """Results page ``number`` (from 1) of ``top_n``, the products ``keywords`` found."""

    kind: ClassVar[str] = "results"
    keywords: tuple[str, ...]
    number: int
    top_n: tuple[Product, ...]

    @property
    def shown(self) -> tuple[Product, ...]:
        """The ``PRODUCT_WINDOW`` products this page lists."""
        return self.top_n[(self.number - 1) * PRODUCT_WINDOW: self.number * PRODUCT_WINDOW]


@dataclass(frozen=True)
class ItemPage:
    """Product ``asin``, opened from ``results``; ``options``: option name -> the value last
    clicked for it (the page does not show them)."""

    kind: ClassVar[str] = "item"
    results: ResultsPage
    asin: str
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SubPage:
    """The ``name`` sub-page (``description``, ``features`` or ``reviews``) of ``item``."""

    kind: ClassVar[str] = "sub"
    item: ItemPage
    name: str


@dataclass(frozen=True)
class DonePage:
    """The purchase of ``item`` (its product and options): WebShop's ``score`` and details."""

    kind: ClassVar[str] = "done"
    item: ItemPage
    score: float
    reward_info: dict[str, Any]


Page = SearchPage | ResultsPage | ItemPage | SubPage | DonePage


class Clickable(NamedTuple):
    """What a page's clickable label does: a ``button``, a ``product`` link (``target``: its
    asin) or an ``option`` value (``target``: the option's name)."""

    kind: Literal["button", "product", "option"]
    target: str = ""


_BUTTON = Clickable("button")


@dataclass(frozen=True)
class _Episode:
    """Everything one episode's future depends on. A step replaces it, so a saved reference is
    a snapshot (``hint`` and ``oracle`` play on the env and put it back). ``rng`` (WebShop's
    ``<r>`` searches draw from it) is the one mutable part; a snapshot may share it because
    every ``reset`` makes a fresh one, so no other episode draws from it."""

    goal_index: int
    goal: dict[str, Any]
    rng: random.Random
    page: Page
    obs: str
    clickables: dict[str, Clickable]
    steps: int = 0
    done: bool = False


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
        self._splits: dict[str, list[str]] | None = None
        self._episode: _Episode | None = None

    # ================================================================== state
    @property
    def _ep(self) -> _Episode:
        if self._episode is None:
            raise ProasError("shop env: call reset(task_id) first")
        return self._episode

    @property
    def page(self) -> Page:
        """The current page."""
        return self._ep.page

    @property
    def obs(self) -> str:
        """The current page's text."""
        return self._ep.obs

    @property
    def clickables(self) -> dict[str, Clickable]:
        """The current page's clickable labels (lower case, in WebShop's order)."""
        return self._ep.clickables

    @property
    def steps(self) -> int:
        return self._ep.steps

    @property
    def done(self) -> bool:
        return self._ep.done

    @property
    def has_search_bar(self) -> bool:
        return isinstance(self._ep.page, SearchPage)

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
        idx = self._index(task_id)
        goal = self.catalog.goals[idx]
        page = SearchPage()
        obs, clickables = self._render(page, goal)
        self._episode = _Episode(idx, goal, random.Random(idx), page, obs, clickables)
        return self.obs, self._info(error=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._episode is None:
            raise ProasError("shop env: call reset(task_id) before step()")
        ep = self._episode
        if ep.done:  # over already: the same end again, and the action is refused
            bought = isinstance(ep.page, DonePage)
            return ep.obs, 0.0, bought, not bought, self._info(error=True)
        page = self._next_page(action)
        if page is not None:
            obs, clickables = self._render(page, ep.goal)
            ep = replace(ep, page=page, obs=obs, clickables=clickables)
        steps = ep.steps + 1
        terminated = isinstance(page, DonePage)
        truncated = not terminated and steps >= self.max_steps
        self._episode = replace(ep, steps=steps, done=terminated or truncated)
        return self.obs, SUCCESS_REWARD if self._won() else 0.0, terminated, truncated, self._info(error=page is None)

    def _won(self) -> bool:
        page = self._ep.page
        return isinstance(page, DonePage) and page.score == 1.0

    # ================================================================== transitions
    def _next_page(self, action: str) -> Page | None:
        """The page ``action`` leads to, as in WebShop's text env; None for a no-op."""
        if not isinstance(action, str):  # the type says str; a policy may hand over anything
            return None
        name, arg = parse_action(action)
        if arg is not None:
            arg = arg.lower()
        if name == "search" and arg:
            return self._search(tuple(arg.split(" ")), number=1)
        if name == "click" and arg is not None and arg in self.clickables and arg != "search":
            return self._click(arg)
        return None

    def _search(self, keywords: tuple[str, ...], number: int) -> ResultsPage:
        """A fresh search, as WebShop runs one for every results page it shows (so ``<r>``
        draws again when paging)."""
        return ResultsPage(keywords, number, tuple(self.catalog.search(keywords, self._ep.rng)))

    def _click(self, label: str) -> Page:
        """The page a click on ``label``, a clickable of the current page, leads to."""
        if label == "back to search":
            return SearchPage()
        page, target = self.page, self.clickables[label].target
        if isinstance(page, ResultsPage):
            if label == "next >":
                return self._search(page.keywords, page.number + 1)
            if label == "< prev":
                return self._search(page.keywords, page.number - 1)
            return ItemPage(page, target)
        if isinstance(page, ItemPage):
            if label == "buy now":
                score, reward_info = self.catalog.reward(page.asin, self._ep.goal, page.options)
                return DonePage(page, score, reward_info)
            if label == "< prev":
                return self._search(page.results.keywords, page.results.number)
            if label in SUB_PAGES:
                return SubPage(page, label)
            # an option value; a later click on a value of the same option replaces it
            return replace(page, options={**page.options, target: label})
        if isinstance(page, SubPage):  # the only other button is "< prev"
            return page.item
        raise ProasError(f"shop env: {label!r} is not clickable on the {page.kind} page")

    # ================================================================== rendering
    def _render(self, page: Page, goal: Mapping[str, Any]) -> tuple[str, dict[str, Clickable]]:
        """The text of ``page`` and its clickables (label -> ``Clickable``), in WebShop's order."""
        head = ["Instruction:", goal["instruction_text"]]
        clickables: dict[str, Clickable] = {}
        parts: list[Any]
        if isinstance(page, SearchPage):
            parts = ["WebShop", *head, "Search"]
            clickables["search"] = _BUTTON
        elif isinstance(page, ResultsPage):
            parts = [*head, "Back to Search", f"Page {page.number} (Total results: {len(page.top_n)})"]
            clickables["back to search"] = _BUTTON
            if page.number > 1:
                parts.append("< Prev")
                clickables["< prev"] = _BUTTON
            parts.append("Next >")
            clickables["next >"] = _BUTTON
            for p in page.shown:
                parts += [p["asin"], p["Title"], p["Price"]]
            for p in page.shown:
                clickables[p["asin"].lower()] = Clickable("product", p["asin"])
        elif isinstance(page, ItemPage):
            product = self.catalog.by_asin[page.asin]
            parts = [*head, "Back to Search", "< Prev"]
            for opt_name, values in product["options"].items():
                parts += [opt_name, *values]
            parts += [product["Title"], f"Price: {product['Price']}", f"Rating: {product['Rating']}",
                      "Description", "Features", "Reviews", "Buy Now"]
            for label in ("back to search", "< prev", "description", "features", "reviews", "buy now"):
                clickables[label] = _BUTTON
            for opt_name, values in product["options"].items():
                for v in values:
                    # a value equal to a label replaces it, as WebShop's later radio does
                    clickables[v] = Clickable("option", opt_name)
        elif isinstance(page, SubPage):
            product = self.catalog.by_asin[page.item.asin]
            parts = [*head, "Back to Search", "< Prev"]
            if page.name == "description":
                parts.append(product["Description"])
            elif page.name == "features":
                parts += list(product["BulletPoints"])
            clickables["back to search"] = _BUTTON
            clickables["< prev"] = _BUTTON
        else:
            parts = ["Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
                     "Purchased", "asin", page.item.asin, "options", _tojson(dict(page.item.options)),
                     "attrs", "None", "category", "None", "query", "None", "product category", "None",
                     "Target", "asin", "options", "attrs", "price upper", "instuction text", "category",
                     "product category", "query", "Goal", "None", "Reward", "Your score (min 0.0, max 1.0)",
                     str(page.score), "Reward Details", "None"]
        return SEP.join(s for s in (str(x).strip() for x in parts) if s), clickables

    # ================================================================== info
    def admissible(self) -> list[str]:
        out = []
        if self.has_search_bar:
            out += [f"search[{q}]" for q in self.instruction_queries()]
        out += [f"click[{c}]" for c in self.clickables if c != "search"]
        return out

    def instruction_queries(self) -> list[str]:
        """Two search queries read off the visible instruction (no goal knowledge)."""
        goal = self._ep.goal
        text = _PRICE_CLAUSE.sub("", goal["instruction_text"]).strip().lower()
        short = text.split(" with ")[0].strip() if isinstance(goal["goal_options"], dict) else text
        return list(dict.fromkeys(q for q in (text, short) if q))

    def invalid_candidates(self) -> list[str]:
        """A few well-formed actions WebShop would refuse here (plus one malformed)."""
        out = []
        if self.has_search_bar:
            out.append("click[search]")
        for label in ("buy now", "next >", "< prev", "back to search", "description"):
            if label not in self.clickables:
                out.append(f"click[{label}]")
        out.append("search[]")
        return out[:4]

    def _matches(self, asin: str) -> bool:
        return self.catalog.can_win_cached(self._ep.goal_index, asin)

    def satisfied_options(self, item: ItemPage) -> list[str]:
        """The goal options (names, or indices for human goals) the selection on ``item`` satisfies."""
        chosen = [normalize_color(v) for v in item.options.values()]
        goal_opts = self._ep.goal["goal_options"]
        labels = list(goal_opts) if isinstance(goal_opts, dict) else [str(i) for i in range(len(goal_opts))]
        out = []
        for label, g in zip(labels, goal_option_items(goal_opts)):
            g = normalize_color(g)
            if any(token_set_ratio(c, g) > MATCH_THRESHOLD for c in chosen):
                out.append(label)
        return sorted(out)

    def abstract_state(self) -> str:
        page = self.page
        if isinstance(page, SearchPage):
            return "shop|search"
        if isinstance(page, ResultsPage):
            hit = any(self._matches(p["asin"]) for p in page.shown)
            return f"shop|results|{'match' if hit else 'nomatch'}"
        if isinstance(page, DonePage):
            return f"shop|done|{'won' if page.score == 1.0 else 'lost'}"
        where, item = ("item", page) if isinstance(page, ItemPage) else (page.name, page.item)
        if not self._matches(item.asin):
            return f"shop|{where}|other"
        return f"shop|{where}|match|opts={','.join(self.satisfied_options(item)) or '-'}"

    def _info(self, error: bool) -> dict[str, Any]:
        ep = self._ep
        done_page = ep.page if isinstance(ep.page, DonePage) else None
        return {
            "won": self._won(),
            "score": float(done_page.score) if done_page else 0.0,
            "error": error,
            "admissible": self.admissible(),
            "abstract_state": self.abstract_state(),
            "anchor": ep.obs,
            "task_type": TASK_TYPE,
            "task": ep.goal["instruction_text"],
            "invalid_candidates": self.invalid_candidates(),
            "page": ep.page.kind,
            "has_search_bar": self.has_search_bar,
            "clickables": list(ep.clickables),
            "steps": ep.steps,
            "reward_info": done_page.reward_info if done_page else None,
        }

    # ================================================================== oracle
    def hint(self) -> str | None:
        """The next action of a shortest known way to win from the current page (for ``proas play``).

        Opens a product that can score 1 if the page shows one, pages towards one, fixes the
        options one click at a time, buys; otherwise starts over with the oracle's search.
        """
        if self._episode is None or self._episode.done:
            return None
        ep = self._episode
        page = ep.page
        if isinstance(page, SubPage):
            return "click[< prev]"
        if isinstance(page, ItemPage):
            if not self._matches(page.asin):
                return "click[< prev]"
            _, wanted = self.catalog.best_options(page.asin, ep.goal)
            if self.catalog.reward(page.asin, ep.goal, page.options)[0] == 1.0:
                return "click[buy now]"
            for name, value in wanted.items():
                if page.options.get(name) != value:
                    return f"click[{value}]"
            return "click[buy now]"
        if isinstance(page, ResultsPage):
            for p in page.shown:
                if self._matches(p["asin"]):
                    return f"click[{p['asin'].lower()}]"
            ranks = [r for r, p in enumerate(page.top_n) if self._matches(p["asin"])]
            if ranks:
                target_page = ranks[0] // PRODUCT_WINDOW + 1
                return "click[next >]" if target_page > page.number else "click[< prev]"
        try:
            plan = self.oracle(str(ep.goal_index))
        finally:
            self._episode = ep
        return plan[0]

    def oracle(self, task_id: str) -> list[str]:
        """A shortest plan found among candidate queries: search, page to the first product that
        can score 1, open it, click the needed option values, buy. Verified by replay.

        Queries tried: the two instruction queries, then the target product's title. Raises
        ``ProasError`` if no plan reaches a score of 1 within ``max_steps``. Leaves the current
        episode as it was.
        """
        idx = self._index(task_id)
        goal = self.catalog.goals[idx]
        saved = self._episode
        try:
            self.reset(task_id)
            queries = self.instruction_queries() + [goal["name"].lower()]
            best: list[str] | None = None
            for q in queries:
                plan = self._plan_for_query(q, goal, idx)
                if plan is not None and (best is None or len(plan) < len(best)):
                    best = plan
            if best is None or not self._replay_wins(task_id, best):
                raise ProasError(f"shop task {task_id}: no plan found that scores 1 within {self.max_steps} steps")
            return best
        finally:
            self._episode = saved

    def _plan_for_query(self, query: str, goal: dict[str, Any], goal_index: int) -> list[str] | None:
        hits = self.catalog.search(query.split(" "), random.Random(0))
        for rank, p in enumerate(hits):
            if not self.catalog.can_win_cached(goal_index, p["asin"]):
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
            *_, info = self.step(a)
            if info["error"]:
                return False
        return bool(info.get("won"))


def make_shop_env(**kwargs: Any) -> ShopEnv:
    """The shop env's factory in the env registry (``proas.envs.make("shop", **kwargs)``):
    ``ShopEnv(**kwargs)`` over the shipped catalog
    by default (kwargs: ``items``, ``attrs``, ``human``, ``human_goals``, ``num_products``,
    ``seed`` (default 233), ``nouns``, ``max_steps``)."""
    return ShopEnv(**kwargs)


__all__ = ["DEFAULT_GOAL_SEED", "Clickable", "DonePage", "ItemPage", "Page", "ResultsPage", "SearchPage", "ShopEnv",
           "SubPage", "make_shop_env", "parse_action"]

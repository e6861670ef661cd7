"""The shop's world: products, hidden prices, goals, search index and reward, built once.

``ShopCatalog.load(...)`` reads WebShop-schema files (the shipped synthetic catalog by default),
derives products, draws hidden prices and goals with one seeded ``random.Random`` (as
verl-agent's WebShop does with its env seed: prices, then price bounds, then a re-seeded shuffle
of the goal list), builds the BM25 index and the title-noun extractor. Loaded catalogs are cached
in memory per (files, options), so constructing more envs over the same data is cheap.
"""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from proas.envs.shop.data import (
    ATTRS_FILE,
    DATA_DIR,
    HUMAN_FILE,
    ITEMS_FILE,
    human_goals,
    load_products,
    product_prices,
    read_json,
    synthetic_goals,
)
from proas.envs.shop.nouns import TitleNouns
from proas.envs.shop.reward import (
    MATCH_THRESHOLD,
    attribute_matches,
    get_reward,
    goal_option_items,
    normalize_color,
    token_set_ratio,
    type_reward,
)
from proas.envs.shop.search import SEARCH_RETURN_N, SearchIndex, cached_index
from proas.errors import ProasError
from proas.fileio import sha256_file

#: WebShop's goal-shuffle seed (SimServer: random.seed(233))
DEFAULT_GOAL_SEED = 233
#: beyond this many option combinations, best_options falls back to a greedy choice
_MAX_COMBOS = 512
#: entries of the (goal, product) -> can-score-1 memo before it is emptied
_WIN_CACHE_MAX = 500_000


def default_files() -> dict[str, Path]:
    """The shipped synthetic catalog's three files."""
    return {
        "items": DATA_DIR / ITEMS_FILE,
        "attrs": DATA_DIR / ATTRS_FILE,
        "human": DATA_DIR / HUMAN_FILE,
    }


@dataclass
class ShopCatalog:
    """Products, prices, goals, search and reward of one data set."""

    products: list[dict[str, Any]]
    prices: dict[str, float]
    goals: list[dict[str, Any]]
    index: SearchIndex
    nouns: TitleNouns
    source: str
    source_sha256: str = ""
    seed: int = DEFAULT_GOAL_SEED
    by_asin: dict[str, dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}
        self._win_cache: dict[tuple[int, str], bool] = {}

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        items: str | Path | None = None,
        attrs: str | Path | None = None,
        human: str | Path | None = None,
        *,
        human_goals: bool = False,
        num_products: int | None = None,
        seed: int = DEFAULT_GOAL_SEED,
        nouns: str = "auto",
    ) -> "ShopCatalog":
        """Load (or fetch from the in-process cache) the catalog of these files and options.

        Args:
            items, attrs, human: WebShop's ``items_shuffle*``, ``items_ins_v2*`` and
                ``items_human_ins`` files (``.json`` or ``.json.gz``); default the shipped ones.
            human_goals: goals from human instructions instead of synthetic ones.
            num_products: use only the first N products of the items file.
            seed: seeds hidden prices, price bounds and the goal shuffle.
            nouns: title-noun source, see ``nouns.py``.
        """
        files = default_files()
        paths = {"items": Path(items or files["items"]), "attrs": Path(attrs or files["attrs"]),
                 "human": Path(human or files["human"])}
        key_files = tuple((str(p.resolve()), p.stat().st_mtime_ns if p.exists() else None) for p in paths.values())
        key = (key_files, human_goals, num_products, seed, nouns)
        with _LOCK:
            cached = _CATALOGS.get(key)
            if cached is not None:
                return cached
        raw = read_json(paths["items"])
        attr_map = read_json(paths["attrs"])
        human_map = read_json(paths["human"]) if human_goals else None
        products = load_products(raw, attr_map, human_map, num_products=num_products, human_goals=human_goals)
        if not products:
            raise ProasError(f"{paths['items']}: no usable products")
        rng = random.Random(seed)
        prices = product_prices(products, rng)
        goals = (human_goals_fn if human_goals else synthetic_goals)(products, prices, rng)
        if not goals:
            raise ProasError(f"{paths['items']}: the data yields no goals")
        random.Random(seed).shuffle(goals)
        stored = {
            p["name"]: p["title_nouns"]
            for p in raw
            if isinstance(p, Mapping) and isinstance(p.get("title_nouns"), list)
        }
        index = cached_index(key_files + (num_products,), products)
        catalog = cls(products, prices, goals, index, TitleNouns(nouns, stored), source=str(paths["items"]),
                      source_sha256=sha256_file(paths["items"]), seed=seed)
        with _LOCK:
            _CATALOGS[key] = catalog
        return catalog

    # ------------------------------------------------------------------ search
    def search(self, keywords: Sequence[str], rng: random.Random) -> list[dict[str, Any]]:
        """WebShop's ``get_top_n_product_from_keywords``, including its debug prefixes.

        ``<r>``: 50 random products; ``<c> CAT``: every product of category CAT; ``<q> QUERY``:
        every product whose query is QUERY; ``<a> ...`` crashes WebShop's text env (no attribute
        map) and returns no products here; anything else: BM25 top 50.
        """
        head = keywords[0] if keywords else ""
        if head == "<r>":
            return rng.sample(self.products, k=min(SEARCH_RETURN_N, len(self.products)))
        if head == "<a>":
            return []
        if head == "<c>":
            category = keywords[1].strip() if len(keywords) > 1 else ""
            return [p for p in self.products if p["category"] == category]
        if head == "<q>":
            query = " ".join(keywords[1:]).strip()
            return [p for p in self.products if p["query"] == query]
        return [self.products[i] for i in self.index.search(" ".join(keywords))]

    # ------------------------------------------------------------------ reward
    def reward(self, asin: str, goal: Mapping[str, Any], options: Mapping[str, str]) -> tuple[float, dict[str, Any]]:
        """WebShop's reward for buying ``asin`` with ``options`` under ``goal``."""
        return get_reward(self.by_asin[asin], goal, self.prices[asin], options, self.nouns)

    def can_win(self, asin: str, goal: Mapping[str, Any]) -> bool:
        """Whether buying ``asin`` (with the best options) scores exactly 1 for ``goal``.

        Cheap necessary conditions first (price, type, attributes), so that the abstraction of a
        results page costs little; the option search runs only for real candidates.
        """
        product = self.by_asin[asin]
        if goal["price_upper"] > 0 and not self.prices[asin] <= goal["price_upper"]:
            return False
        if type_reward(product, goal, self.nouns)["r_type"] != 1.0:
            return False
        if attribute_matches(product, goal["attributes"]) != len(goal["attributes"]):
            return False
        return self.best_options(asin, goal, minimal=False)[0] == 1.0

    def can_win_cached(self, goal_index: int, asin: str) -> bool:
        """``can_win`` for goal number ``goal_index``, memoised for every env sharing this catalog."""
        key = (goal_index, asin)
        hit = self._win_cache.get(key)
        if hit is None:
            if len(self._win_cache) > _WIN_CACHE_MAX:
                self._win_cache.clear()
            hit = self._win_cache[key] = self.can_win(asin, self.goals[goal_index])
        return hit

    def best_options(self, asin: str, goal: Mapping[str, Any], minimal: bool = True) -> tuple[float, dict[str, str]]:
        """The highest reward buying ``asin`` can reach, and a minimal option choice reaching it.

        Tries the greedy choice, then every option combination (only the greedy one past
        ``_MAX_COMBOS``); with ``minimal`` it then drops every click the reward does not need, so
        the oracle clicks only what matters.
        """
        product = self.by_asin[asin]
        names = [n for n in product["options"] if product["options"][n]]
        n_combos = 1
        for n in names:
            n_combos *= max(1, len(product["options"][n]))
        # the greedy choice (per option, the value hitting most goal options) usually scores 1
        combos: Any = [tuple(self._greedy_value(product["options"][n], goal) for n in names)]
        if n_combos <= _MAX_COMBOS:
            combos = itertools.chain(combos, itertools.product(*(product["options"][n] for n in names)))
        best, best_opts = -1.0, {}
        for combo in combos:
            opts = dict(zip(names, combo))
            r, _ = self.reward(asin, goal, opts)
            if r > best:
                best, best_opts = r, opts
                if r == 1.0:
                    break
        for name in list(best_opts) if minimal else ():
            trial = {k: v for k, v in best_opts.items() if k != name}
            if self.reward(asin, goal, trial)[0] >= best:
                best_opts = trial
        return best, best_opts

    @staticmethod
    def _greedy_value(values: Sequence[str], goal: Mapping[str, Any]) -> str:
        wanted = [normalize_color(o) for o in goal_option_items(goal["goal_options"])]

        def hits(v: str) -> int:
            nv = normalize_color(v)
            return sum(token_set_ratio(nv, g) > MATCH_THRESHOLD for g in wanted)

        return max(values, key=hits)


def human_goals_fn(products: list, prices: Mapping[str, float], rng: random.Random) -> list:
    return human_goals(products, prices, rng)


_CATALOGS: dict[Any, ShopCatalog] = {}
_LOCK = threading.Lock()

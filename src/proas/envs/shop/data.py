"""Loading WebShop's data files and building its goals, as ``web_agent_site/engine`` does.

Files (WebShop's schema; ``.json`` or gzip-compressed ``.json.gz``):

- ``items_shuffle*.json``: a JSON list of raw product records (``asin``, ``name``, ``category``,
  ``query``, ``product_category``, ``full_description``, ``small_description``, ``pricing``,
  ``customization_options``, ``images``; extra keys are kept and ignored);
- ``items_ins_v2*.json``: ``asin -> {"attributes", "instruction", "instruction_attributes"}``;
- ``items_human_ins.json``: ``asin -> [{"instruction", "instruction_attributes",
  "instruction_options"}, ...]`` (only read for human goals).

``load_products`` derives the same fields as WebShop's ``load_products`` (``Title``,
``Description``, ``BulletPoints``, ``pricing`` as floats, ``Price`` text, ``options`` lower-cased
with ``/`` -> `` | ``, ``Attributes`` or ``['DUMMY_ATTR']``, ...). ``product_prices`` draws the
hidden price of each product and ``synthetic_goals`` / ``human_goals`` build the goals, consuming one
``random.Random`` in WebShop's order (prices, then goals) so that a seed fixes everything.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import random
import re
from collections import defaultdict
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable, Mapping

from proas.errors import ProasError
from proas.fileio import open_regular

#: where the shipped synthetic catalog lives, and its three files
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "shop"
ITEMS_FILE = "items_shuffle_synth.json.gz"
ATTRS_FILE = "items_ins_v2_synth.json.gz"
HUMAN_FILE = "items_human_ins_synth.json.gz"

#: WebShop's PRICE_RANGE: the candidate upper bounds of a goal's price
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
#: price_upper of a goal without a price clause
NO_PRICE_UPPER = 1000000

RAW_PRODUCT_KEYS = ("asin", "name", "category", "query", "product_category", "full_description",
                    "small_description", "customization_options", "images")
# keys WebShop's clean_product_keys drops from a raw record
_DROPPED_KEYS = ("product_information", "brand", "brand_url", "list_price", "availability_quantity",
                 "availability_status", "total_reviews", "total_answered_questions", "seller_id",
                 "seller_name", "fulfilled_by_amazon", "fast_track_message", "aplus_present",
                 "small_description_old")


def read_json(path: str | Path) -> Any:
    """A JSON file, gzip-compressed when its name ends in ``.gz``; a ``ProasError`` if unreadable."""
    path = Path(path)
    try:  # a regular file only: a FIFO in its place would block the read for ever
        with open_regular(path, follow_symlinks=True) as raw:
            if path.suffix == ".gz":
                with gzip.open(raw, "rt", encoding="utf-8") as fh:
                    return json.load(fh)
            return json.load(io.TextIOWrapper(raw, encoding="utf-8"))
    except FileNotFoundError:
        raise ProasError(f"shop data file not found: {path}") from None
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProasError(f"shop data file {path} is not valid JSON: {exc}") from None


def parse_pricing(pricing: Any, asin: str) -> tuple[list[float], str]:
    """WebShop's pricing parse: ``"$a - $b"`` -> ``([a, b], "$a to $b")``; empty -> ``[100.0]``."""
    if not pricing:
        return [100.0], "$100.0"
    if not isinstance(pricing, str):
        raise ProasError(f"product {asin}: 'pricing' must be a string like '$9.99', got {pricing!r}")
    try:
        values = [float(Decimal(re.sub(r"[^\d.]", "", piece))) for piece in pricing.split("$")[1:]]
    except InvalidOperation:
        raise ProasError(f"product {asin}: cannot read a price in {pricing!r}") from None
    if not values:
        raise ProasError(f"product {asin}: no '$' price in {pricing!r}")
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def load_products(
    raw_products: list[Mapping[str, Any]],
    attributes: Mapping[str, Any],
    human_instructions: Mapping[str, Any] | None = None,
    *,
    num_products: int | None = None,
    human_goals: bool = False,
) -> list[dict[str, Any]]:
    """WebShop's ``load_products``: derived product records in file order, duplicates skipped.

    Args:
        raw_products: the items file's list.
        attributes: the ``items_ins_v2`` dict; for synthetic goals every kept ASIN must be a key.
        human_instructions: the ``items_human_ins`` dict (needed for ``human_goals``).
        num_products: keep only the first N raw records (WebShop assumes the file is shuffled).
        human_goals: attach human instructions instead of the synthetic instruction.
    """
    if not isinstance(raw_products, list):
        raise ProasError("shop items file must hold a JSON list of products")
    if not isinstance(attributes, Mapping):
        raise ProasError("shop attributes file must hold a JSON object keyed by ASIN")
    if human_goals and not isinstance(human_instructions, Mapping):
        raise ProasError("human goals need the human-instructions file (a JSON object keyed by ASIN)")
    if num_products is not None:
        raw_products = raw_products[:num_products]
    seen: set[str] = set()
    products: list[dict[str, Any]] = []
    for n, raw in enumerate(raw_products):
        if not isinstance(raw, Mapping):
            raise ProasError(f"shop product #{n} is not an object")
        missing = [k for k in RAW_PRODUCT_KEYS if k not in raw]
        if missing:
            raise ProasError(f"shop product #{n} ({raw.get('asin', '?')}) lacks {missing}")
        asin = raw["asin"]
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        p = {k: v for k, v in raw.items() if k not in _DROPPED_KEYS}
        p["Title"] = raw["name"]
        p["Description"] = raw["full_description"]
        p["Reviews"] = []
        p["Rating"] = "N.A."
        bullets = raw["small_description"]
        p["BulletPoints"] = list(bullets) if isinstance(bullets, list) else [bullets]
        p["pricing"], p["Price"] = parse_pricing(raw.get("pricing"), asin)
        options: dict[str, list[str]] = {}
        option_to_image: dict[str, Any] = {}
        for opt_name, contents in (raw["customization_options"] or {}).items():
            if contents is None:
                continue
            values = []
            for content in contents:
                value = str(content["value"]).strip().replace("/", " | ").lower()
                values.append(value)
                option_to_image[value] = content.get("image")
            options[opt_name.lower()] = values
        p["options"] = options
        p["option_to_image"] = option_to_image
        entry = attributes.get(asin)
        if isinstance(entry, Mapping) and "attributes" in entry:
            p["Attributes"] = list(entry["attributes"])
        else:
            p["Attributes"] = ["DUMMY_ATTR"]
        if human_goals:
            if asin in human_instructions:  # type: ignore[operator]
                p["instructions"] = human_instructions[asin]  # type: ignore[index]
        else:
            if not isinstance(entry, Mapping):
                raise ProasError(f"product {asin} has no entry in the attributes file (synthetic goals need one)")
            p["instruction_text"] = entry.get("instruction")
            p["instruction_attributes"] = entry.get("instruction_attributes")
        images = raw["images"]
        p["MainImage"] = images[0] if images else None
        p["query"] = str(raw["query"]).lower().strip()
        products.append(p)
    return products


def product_prices(products: Iterable[Mapping[str, Any]], rng: random.Random) -> dict[str, float]:
    """WebShop's ``generate_product_prices``: one hidden price per product (uniform in a range)."""
    prices: dict[str, float] = {}
    for p in products:
        pricing = p["pricing"]
        if not pricing:
            prices[p["asin"]] = 100.0
        elif len(pricing) == 1:
            prices[p["asin"]] = pricing[0]
        else:
            prices[p["asin"]] = rng.uniform(*pricing[:2])
    return prices


def _price_clause(price: float, rng: random.Random) -> tuple[float, str]:
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        _, price_upper = sorted(rng.sample(price_range, 2))
        return price_upper, f", and price lower than {price_upper:.2f} dollars"
    return NO_PRICE_UPPER, ""


def synthetic_goals(
    products: list[Mapping[str, Any]], prices: Mapping[str, float], rng: random.Random
) -> list[dict[str, Any]]:
    """WebShop's ``get_synthetic_goals``: one goal per combination of a product's option values."""
    goals: list[dict[str, Any]] = []
    counts: dict[str, int] = defaultdict(int)
    for p in products:
        if p.get("instruction_text") is None:
            continue
        attrs = p["instruction_attributes"]
        if not attrs:
            raise ProasError(f"product {p['asin']}: a synthetic instruction needs instruction_attributes")
        price_upper, price_text = _price_clause(prices[p["asin"]], rng)
        names = sorted(p["options"])
        for combo in itertools.product(*(p["options"][n] for n in names)):
            goal_options = dict(zip(names, combo))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append({
                "asin": p["asin"],
                "category": p["category"],
                "query": p["query"],
                "name": p["Title"],
                "product_category": p["product_category"],
                "instruction_text": f"{p['instruction_text']}{option_text}{price_text}",
                "attributes": list(attrs),
                "price_upper": price_upper,
                "goal_options": goal_options,
            })
            for a in attrs:
                counts[a] += 1
    for g in goals:
        g["weight"] = sum(1.0 / counts[a] for a in g["attributes"]) / len(g["attributes"])
    return goals


def human_goals(
    products: list[Mapping[str, Any]], prices: Mapping[str, float], rng: random.Random
) -> list[dict[str, Any]]:
    """WebShop's ``get_human_goals``: one goal per human instruction with attributes."""
    goals: list[dict[str, Any]] = []
    for p in products:
        for record in p.get("instructions", ()):
            attrs = record["instruction_attributes"]
            if not attrs:
                continue
            price_upper, price_text = _price_clause(prices[p["asin"]], rng)
            goals.append({
                "asin": p["asin"],
                "category": p["category"],
                "query": p["query"],
                "name": p["name"],
                "product_category": p["product_category"],
                "instruction_text": record["instruction"].strip(".") + price_text,
                "attributes": list(attrs),
                "price_upper": price_upper,
                "goal_options": list(record["instruction_options"]),
                "weight": 1,
            })
    return goals

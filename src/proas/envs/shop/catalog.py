"""proas's synthetic shop catalog, written in WebShop's own file schema.

``generate_catalog(seed)`` builds products for WebShop's five top categories from the vocabulary
in ``catalog_spec.py``: many products per product type (so that similar products compete in
search), each with 2-4 attributes that appear in its text, 0-2 option groups (so that options
matter) and a price or price range in the type's band (so that the goal's price bound binds). It
returns the three files WebShop reads (items list, ``items_ins_v2`` attributes and synthetic
instruction, ``items_human_ins`` human-style instructions). Each raw product carries one extra key,
``title_nouns``: the nouns of its title, which the reward uses when no spaCy model is installed.

``python -m proas.envs.shop.catalog`` rewrites the shipped files under ``proas/data/shop``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import itertools
import json
import random
import re
import string
from pathlib import Path
from typing import Any

from proas.envs.shop.catalog_spec import ADJECTIVES, BRAND_PARTS_A, BRAND_PARTS_B, FILLER, TYPES, ProductType
from proas.envs.shop.data import ATTRS_FILE, DATA_DIR, HUMAN_FILE, ITEMS_FILE
from proas.envs.shop.reward import MATCH_THRESHOLD, normalize_color, token_set_ratio
from proas.fileio import atomic_write_bytes

DEFAULT_SEED = 0
PRODUCTS_PER_TYPE = 30
MAX_GOALS_PER_PRODUCT = 16

_BULLET_TEMPLATES = (
    "{A} for reliable everyday performance.",
    "{A} - a detail our customers love.",
    "Key feature: {a}, so you can shop with confidence.",
    "{A}, checked by our quality team.",
)
_INSTRUCTION_TEMPLATES = (
    "i need a {attrs} {query}",
    "i am looking for {query} that is {attrs}",
    "i'm looking for a {attrs} {query}",
    "find me {query} with {attrs}",
    "i want {query} that has {attrs}",
)
_HUMAN_TEMPLATES = (
    "could you find me some {query} that is {attrs}",
    "i want to buy {query}, it should be {attrs}",
    "looking for {attrs} {query}",
)
_WORD = re.compile(r"[a-z0-9]+")


def _cap(phrase: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in phrase.split())


def _article(text: str) -> str:
    """'a' -> 'an' before a vowel ("i need an easy assembly ...")."""
    return re.sub(r"\ba ([aeio])", r"an \1", text)


def check_type(t: ProductType) -> None:
    """Raise unless the type's attributes are pairwise distinguishable by WebShop's tests."""
    for a, b in itertools.combinations(t.attributes, 2):
        if token_set_ratio(a, b) > MATCH_THRESHOLD or a in b or b in a:
            raise ValueError(f"{t.query}: attributes {a!r} and {b!r} match each other")
    values = [v for _, pool in t.options for v in pool]
    for v in values:
        # WebShop's colour normalisation must not turn a value into a word it lacks
        # ("grapefruit" -> "grape"), or a goal asking for it could never be matched
        if normalize_color(v) != v and normalize_color(v) not in v.split():
            raise ValueError(f"{t.query}: option value {v!r} normalises to {normalize_color(v)!r}")
    if len(values) != len(set(values)):
        raise ValueError(f"{t.query}: an option value repeats across option groups")


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _make_product(
    rng: random.Random, category: str, t: ProductType, brand: str, taken: set[str]
) -> tuple[dict, dict, list]:
    asin = _asin(rng, taken)
    adjective = rng.choice(ADJECTIVES[category])
    phrase = rng.choice(t.phrases)
    attrs = rng.sample(t.attributes, k=rng.randint(2, min(4, len(t.attributes))))
    title = f"{brand} {adjective} {phrase}"
    if rng.random() < 0.5:
        title += f" - {_cap(attrs[0])}" if rng.random() < 0.5 else f", {_cap(attrs[0])}"
    options: dict[str, list[dict[str, Any]]] = {}
    n_goals = 1
    for i, (name, pool) in enumerate(t.options):
        if rng.random() < (0.85 if i == 0 else 0.6):
            k = rng.randint(2, min(4, len(pool)))
            if n_goals * k > MAX_GOALS_PER_PRODUCT:
                continue
            picked = sorted(rng.sample(range(len(pool)), k))
            options[name] = [{"value": pool[j], "image": None} for j in picked]
            n_goals *= k
    lo = round(rng.uniform(*t.price), 2)
    if rng.random() < 0.4:
        pricing = f"${lo:.2f} - ${round(lo * rng.uniform(1.1, 1.6), 2):.2f}"
    else:
        pricing = f"${lo:.2f}"
    filler = list(FILLER[category])
    rng.shuffle(filler)
    bullets = [rng.choice(_BULLET_TEMPLATES).format(A=a[:1].upper() + a[1:], a=a) for a in attrs]
    rng.shuffle(bullets)
    bullets += filler[:2]
    description = (
        f"The {brand} {phrase} is a {adjective.lower()} choice for anyone who wants {t.query}. "
        f"It offers {', '.join(attrs[:-1])} and {attrs[-1]}. {filler[2]} {filler[3]}"
    )
    text = " ".join([title, " ".join(bullets), description]).lower()
    leaked = [a for a in t.attributes if a not in attrs and a in text]
    if leaked:
        raise ValueError(f"{t.query}: product text names attributes it lacks: {leaked}")
    nouns_set = set(t.nouns) | {brand.lower()}
    title_nouns = sorted({w for w in _WORD.findall(title.lower()) if w in nouns_set})
    raw = {
        "asin": asin,
        "name": title,
        "category": category,
        "query": t.query,
        "product_category": t.breadcrumb,
        "full_description": description,
        "small_description": bullets,
        "pricing": pricing,
        "customization_options": options,
        "images": [f"images/{asin}.jpg"],
        "brand": brand,
        "title_nouns": title_nouns,
    }
    ins_attrs = rng.sample(attrs, k=min(len(attrs), rng.choice((1, 2, 2))))
    instruction = _article(rng.choice(_INSTRUCTION_TEMPLATES).format(attrs=" and ".join(ins_attrs), query=t.query))
    attr_entry = {"attributes": attrs, "instruction": instruction, "instruction_attributes": ins_attrs}
    human_attrs = rng.sample(attrs, k=min(len(attrs), 2))
    human_options = [rng.choice(vals)["value"] for vals in options.values()]
    human_text = rng.choice(_HUMAN_TEMPLATES).format(attrs=" and ".join(human_attrs), query=t.query)
    if human_options:
        human_text += ", in " + " and ".join(human_options)
    human = [{"instruction": human_text, "instruction_attributes": human_attrs, "instruction_options": human_options}]
    return raw, attr_entry, human


def generate_catalog(seed: int = DEFAULT_SEED, per_type: int = PRODUCTS_PER_TYPE) -> tuple[list, dict, dict]:
    """The items list, the attributes dict and the human-instructions dict, all in WebShop's schema."""
    rng = random.Random(seed)
    brands = [a + b for a in BRAND_PARTS_A for b in BRAND_PARTS_B]
    taken: set[str] = set()
    items: list[dict] = []
    attrs: dict[str, dict] = {}
    human: dict[str, list] = {}
    for category, types in TYPES.items():
        for t in types:
            check_type(t)
            for brand in rng.sample(brands, per_type):
                raw, entry, instr = _make_product(rng, category, t, brand, taken)
                items.append(raw)
                attrs[raw["asin"]] = entry
                human[raw["asin"]] = instr
    rng.shuffle(items)
    return items, attrs, human


def _gzip_json(obj: Any) -> bytes:
    buf = io.BytesIO()
    # mtime=0 makes the compressed bytes a pure function of the content
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    return buf.getvalue()


def write_catalog(
    out_dir: str | Path = DATA_DIR, seed: int = DEFAULT_SEED, per_type: int = PRODUCTS_PER_TYPE
) -> dict[str, Path]:
    """Generate and write the three files (gzip JSON) into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    items, attrs, human = generate_catalog(seed, per_type)
    paths = {"items": out_dir / ITEMS_FILE, "attrs": out_dir / ATTRS_FILE, "human": out_dir / HUMAN_FILE}
    for key, obj in (("items", items), ("attrs", attrs), ("human", human)):
        atomic_write_bytes(paths[key], _gzip_json(obj))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write proas's synthetic shop catalog (WebShop schema).")
    parser.add_argument("--out", default=str(DATA_DIR), help="output folder (default: the shipped data folder)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--per-type", type=int, default=PRODUCTS_PER_TYPE)
    args = parser.parse_args(argv)
    for key, path in write_catalog(args.out, args.seed, args.per_type).items():
        print(f"{key}: {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""WebShop's purchase reward (``web_agent_site/engine/goal.py``, master), reproduced exactly.

``reward = r_type * (attribute matches + option matches + price ok) / (#attributes + #options + 1)``

Every quirk of the original is kept on purpose, because WebShop task scores (TS = mean reward x 100)
and success rates (reward == 1) are only comparable if the same function computes them:

- fuzzy matching is thefuzz's ``token_set_ratio`` (thefuzz >= 0.20 = rapidfuzz with thefuzz's
  processor: ``str()``, drop code points 128-255, non-alphanumerics to spaces, lower-case, strip;
  the score is rounded to an int with Python's ``round``) and a match needs a score ``> 85``; so
  ``"pack of 2"`` matches ``"pack of 12"`` (95);
- ``normalize_color`` maps a string to the first entry of WebShop's alphabetical colour list that is
  a *substring* of it (``"standard" -> "tan"``, ``"navy blue" -> "blue"``); a synthetic goal's
  options arrive as ``(name, value)`` tuples, for which ``in`` tests element equality, so only a
  value equal to a colour word is normalised and the tuple is otherwise stringified;
- the attribute test falls back to a plain (case-sensitive goal side) substring test on the title,
  the joined bullet points and the description;
- ``r_price`` is a bool summed with ints; the hidden sampled price is compared, not the shown range;
- the type reward compares the title nouns of the purchased and the target product; the noun
  extractor is pluggable (spaCy's ``en_core_web_sm`` when installed, otherwise the nouns the
  catalog stores, see ``nouns.py``).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from rapidfuzz import fuzz

# WebShop's COLOR_SET (normalize.py, MIT licence), in its own alphabetical order: the order matters
# because the first substring hit wins.
COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure",
    "banana", "beige", "black", "blue", "blush", "bordeaux", "bronze",
    "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
    "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark",
    "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
    "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac",
    "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
    "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)

#: a fuzzy match needs a rounded token-set ratio strictly above this
MATCH_THRESHOLD = 85

_HIGH_LATIN1 = {i: None for i in range(128, 256)}
_NON_ALNUM = re.compile(r"(?ui)\W")

NounFn = Callable[[str], Sequence[str]]


@functools.lru_cache(maxsize=1 << 16)
def full_process(value: Any) -> str:
    """thefuzz's ``full_process(s, force_ascii=True)``: the string both sides are compared as."""
    text = str(value).translate(_HIGH_LATIN1)
    return _NON_ALNUM.sub(" ", text).lower().strip()


def token_set_ratio(a: Any, b: Any) -> int:
    """thefuzz's ``fuzz.token_set_ratio`` (0..100, an int) on the processed strings."""
    pa, pb = full_process(a), full_process(b)
    if not pa or not pb:
        return 0
    return int(round(fuzz.token_set_ratio(pa, pb, processor=None)))


def normalize_color(value: Any) -> Any:
    """The first colour word that ``in`` finds in ``value``; ``value`` unchanged when none.

    For a string ``in`` is a substring test; for a ``(name, value)`` tuple it is element equality,
    exactly as in WebShop, where synthetic goal options are passed as ``dict.items()``.
    """
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def split_breadcrumb(product_category: str) -> set[str]:
    return {part.strip() for part in product_category.split("›")}


def type_reward(purchased: Mapping[str, Any], goal: Mapping[str, Any], nouns: NounFn) -> dict[str, Any]:
    """``get_type_reward``: 1, 0.5, 0.1 or 0 from query, breadcrumb and title-noun agreement."""
    query_match = purchased["query"] == goal["query"]
    category_match = (
        len(split_breadcrumb(purchased["product_category"]) & split_breadcrumb(goal["product_category"])) >= 2
    )
    bought = [n.lower() for n in nouns(purchased["name"])]
    wanted = [n.lower() for n in nouns(goal["name"])]
    if not wanted:
        title_score = 0.2
    else:
        title_score = len(set(bought) & set(wanted)) / len(wanted)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def attribute_matches(purchased: Mapping[str, Any], goal_attributes: Sequence[str]) -> int:
    """``get_attribute_reward``'s count: fuzzy against the product's attributes, else substring."""
    title = purchased["Title"].lower()
    bullets = " ".join(purchased["BulletPoints"]).lower()
    description = purchased["Description"].lower()
    count = 0
    for g_attr in goal_attributes:
        if any(token_set_ratio(p_attr, g_attr) > MATCH_THRESHOLD for p_attr in purchased["Attributes"]):
            count += 1
        elif g_attr in title or g_attr in bullets or g_attr in description:
            count += 1
    return count


def goal_option_items(goal_options: Any) -> list[Any]:
    """What WebShop passes as goal options: ``(name, value)`` tuples for a dict, else the list."""
    if isinstance(goal_options, Mapping):
        return list(goal_options.items())
    return list(goal_options)


def option_matches(purchased_options: Iterable[Any], goal_options: Iterable[Any]) -> int:
    """``get_option_reward``'s count: goal options hit by any chosen value (not one-to-one)."""
    bought = [normalize_color(o) for o in purchased_options]
    wanted = [normalize_color(o) for o in goal_options]
    count = 0
    for g_option in wanted:
        if any(token_set_ratio(p_option, g_option) > MATCH_THRESHOLD for p_option in bought):
            count += 1
    return count


def get_reward(
    purchased: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
    nouns: NounFn,
) -> tuple[float, dict[str, Any]]:
    """WebShop's ``get_reward(..., verbose=True)``: the reward in [0, 1] and its parts.

    Args:
        purchased: the bought product (loaded record: ``name``, ``Title``, ``query``,
            ``product_category``, ``Attributes``, ``BulletPoints``, ``Description``).
        goal: the goal (``name``, ``query``, ``product_category``, ``attributes``,
            ``goal_options`` (dict for synthetic goals, list for human ones), ``price_upper``).
        price: the bought product's hidden sampled price.
        options: the selected options, ``{option name: value}``.
        nouns: the title-noun extractor.
    """
    type_info = type_reward(purchased, goal, nouns)
    r_price = (price <= goal["price_upper"]) if goal["price_upper"] > 0 else None
    n_attr = attribute_matches(purchased, goal["attributes"])
    goal_opts = goal_option_items(goal["goal_options"])
    n_opt = option_matches(list(options.values()), goal_opts)
    denominator = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    # WebShop sums a bool (or None, which raises there too) with the two counts.
    total = (n_attr + n_opt + r_price) / denominator
    total *= type_info["r_type"]
    info = dict(type_info)
    info["r_att"] = n_attr / len(goal["attributes"]) if goal["attributes"] else 0.0
    info["w_att"] = len(goal["attributes"]) / denominator
    if goal_opts:
        info["r_option"] = n_opt / len(goal_opts)
        info["w_option"] = len(goal["goal_options"]) / denominator
    if r_price is not None:
        info["r_price"] = r_price
        info["w_price"] = 1 / denominator
    return total, info

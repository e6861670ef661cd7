"""Loading WebShop-schema files: derived fields, hidden prices, goals, errors."""

import gzip
import json
import random

import pytest

from proas.envs.shop.data import (
    NO_PRICE_UPPER,
    human_goals,
    load_products,
    parse_pricing,
    product_prices,
    read_json,
    synthetic_goals,
)
from proas.envs.shop.engine import ShopCatalog
from proas.errors import ProasError


def raw(asin, **kw):
    p = {
        "asin": asin,
        "name": f"Thing {asin}",
        "category": "beauty",
        "query": " Face Cream ",
        "product_category": "Beauty › Skin",
        "full_description": "desc",
        "small_description": ["b1", "b2"],
        "pricing": "$10.00 - $20.00",
        "customization_options": {"Color": [{"value": "Red", "image": "r.jpg"}, {"value": "Blue/Navy", "image": None}],
                                  "Size": [{"value": " Small ", "image": None}]},
        "images": ["img.jpg"],
        "brand": "Acme",
    }
    p.update(kw)
    return p


ATTRS = {
    "A1": {"attributes": ["paraben free"], "instruction": "i need cream", "instruction_attributes": ["paraben free"]},
    "A2": {"attributes": ["vegan"], "instruction": None, "instruction_attributes": None},
}


def test_derived_fields_as_webshop():
    [p] = load_products([raw("A1")], ATTRS)
    assert p["Title"] == "Thing A1" and p["Description"] == "desc"
    assert p["BulletPoints"] == ["b1", "b2"]
    assert p["pricing"] == [10.0, 20.0] and p["Price"] == "$10.0 to $20.0"
    assert p["options"] == {"color": ["red", "blue | navy"], "size": ["small"]}
    assert p["option_to_image"]["red"] == "r.jpg"
    assert p["Attributes"] == ["paraben free"]
    assert p["instruction_text"] == "i need cream"
    assert p["query"] == "face cream"
    assert p["Rating"] == "N.A." and p["Reviews"] == []
    assert "brand" not in p  # dropped by clean_product_keys
    assert p["MainImage"] == "img.jpg"


def test_string_bullets_missing_attrs_dupes_and_bad_asins():
    products = load_products(
        [raw("A1", small_description="one"), raw("A1"), raw("nan"), raw("B" * 11), raw("A3")],
        {**ATTRS, "A3": {"instruction": None}},
    )
    assert [p["asin"] for p in products] == ["A1", "A3"]
    assert products[0]["BulletPoints"] == ["one"]
    assert products[1]["Attributes"] == ["DUMMY_ATTR"]


@pytest.mark.parametrize(
    "pricing,values,tag",
    [("$19.99", [19.99], "$19.99"), ("", [100.0], "$100.0"), (None, [100.0], "$100.0"),
     ("$1,299.00 - $1,499.50 - $2.00", [1299.0, 1499.5], "$1299.0 to $1499.5")],
)
def test_parse_pricing(pricing, values, tag):
    assert parse_pricing(pricing, "X") == (values, tag)


def test_hidden_price_single_value_or_uniform_in_range():
    products = load_products([raw("A1"), raw("A2", pricing="$7.50")], ATTRS)
    rng = random.Random(5)
    prices = product_prices(products, rng)
    assert prices["A2"] == 7.5
    assert prices["A1"] == random.Random(5).uniform(10.0, 20.0)


def test_synthetic_goals_one_per_option_combination():
    products = load_products([raw("A1", customization_options={
        "Size": [{"value": "S"}, {"value": "M"}], "Color": [{"value": "Red"}, {"value": "Blue"}]}), raw("A2")], ATTRS)
    prices = {"A1": 15.0, "A2": 12.0}
    rng = random.Random(0)
    goals = synthetic_goals(products, prices, rng)
    assert len(goals) == 4  # A2 has no instruction
    # price 15 -> PRICE_RANGE above it [20, 30, 40, 50]; upper = max of two sampled
    upper = max(random.Random(0).sample([20.0, 30.0, 40.0, 50.0], 2))
    first = goals[0]
    assert first["goal_options"] == {"color": "red", "size": "s"}  # option names sorted
    assert (
        first["instruction_text"]
        == f"i need cream with color: red, and size: s, and price lower than {upper:.2f} dollars"
    )
    assert all(g["price_upper"] == upper for g in goals)
    assert first["name"] == "Thing A1" and first["attributes"] == ["paraben free"]
    assert all(g["weight"] == 1 / 4 for g in goals)  # one attribute, seen by 4 goals


def test_expensive_product_has_no_price_clause():
    products = load_products([raw("A1", customization_options={}, pricing="$985.00")], ATTRS)
    goals = synthetic_goals(products, {"A1": 985.0}, random.Random(0))
    assert goals[0]["price_upper"] == NO_PRICE_UPPER
    assert goals[0]["instruction_text"] == "i need cream"


def test_human_goals_skip_records_without_attributes():
    human = {
        "A1": [
            {
                "instruction": "a red cream please.",
                "instruction_attributes": ["paraben free"],
                "instruction_options": ["red"],
            },
            {"instruction": "skip me", "instruction_attributes": [], "instruction_options": []},
        ]
    }
    products = load_products([raw("A1", pricing="$985.00")], ATTRS, human, human_goals=True)
    goals = human_goals(products, {"A1": 985.0}, random.Random(0))
    assert len(goals) == 1
    assert goals[0]["instruction_text"] == "a red cream please"  # strip('.')
    assert goals[0]["goal_options"] == ["red"] and goals[0]["weight"] == 1


def test_synthetic_goals_need_an_attributes_entry():
    with pytest.raises(ProasError, match="no entry in the attributes file"):
        load_products([raw("ZZ")], ATTRS)


def test_missing_key_is_a_clear_error():
    bad = raw("A1")
    del bad["images"]
    with pytest.raises(ProasError, match=r"lacks \['images'\]"):
        load_products([bad], ATTRS)


def test_read_json_errors(tmp_path):
    with pytest.raises(ProasError, match="not found"):
        read_json(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ProasError, match="not valid JSON"):
        read_json(tmp_path / "bad.json")
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(ProasError, match="not valid JSON"):
        read_json(tmp_path / "bad.json.gz")
    with gzip.open(tmp_path / "ok.json.gz", "wt") as fh:
        json.dump({"a": 1}, fh)
    assert read_json(tmp_path / "ok.json.gz") == {"a": 1}


def test_catalog_from_webshop_files_is_seeded(tmp_path):
    items = [raw("A1"), raw("A2")]
    (tmp_path / "items.json").write_text(json.dumps(items))
    (tmp_path / "attrs.json").write_text(json.dumps(ATTRS))
    (tmp_path / "human.json").write_text("{}")
    kw = dict(
        items=tmp_path / "items.json", attrs=tmp_path / "attrs.json", human=tmp_path / "human.json", nouns="stored"
    )
    a = ShopCatalog.load(seed=1, **kw)
    b = ShopCatalog.load(seed=2, **kw)
    assert len(a.goals) == 2 and {g["asin"] for g in a.goals} == {"A1"}
    assert a.prices["A1"] != b.prices["A1"]
    assert ShopCatalog.load(seed=1, **kw) is a  # cached in memory
    # WebShop's order: prices, then price bounds from the same stream, then a re-seeded shuffle
    rng = random.Random(1)
    price = rng.uniform(10.0, 20.0)
    assert a.prices["A1"] == price


def test_option_without_contents_is_skipped_and_an_empty_one_yields_no_goals():
    [p] = load_products([raw("A1", customization_options={"Color": None, "Size": []})], ATTRS)
    assert p["options"] == {"size": []}
    # WebShop takes the product of the option value lists: an empty list means no goal at all
    assert synthetic_goals([p], {"A1": 15.0}, random.Random(0)) == []


def test_read_json_refuses_a_fifo_without_blocking(tmp_path):
    """*Found:* ``env.options.items=`` naming a FIFO blocked the shop env's load for ever."""
    import os
    import signal

    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("blocked on the FIFO"))
    signal.alarm(10)
    try:
        for name in ("items.json", "items.json.gz"):
            os.mkfifo(tmp_path / name)
            with pytest.raises(ProasError, match="is a FIFO; a file read as data must be a regular file"):
                read_json(tmp_path / name)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

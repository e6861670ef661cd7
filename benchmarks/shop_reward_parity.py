"""Parity check: proas's shop reward against WebShop's own ``get_reward``.

Imports ``web_agent_site/engine/goal.py`` from a WebShop checkout (with ``thefuzz`` installed)
and compares its reward with ``proas.envs.shop.reward.get_reward`` on many purchases of the
shipped catalog: the target with the goal's options, the target with random options, same-type
rivals and products of other types with random options. spaCy's model is replaced inside
WebShop's module by a stand-in that tags exactly the nouns proas uses, so the comparison covers
everything else: thefuzz matching, colour normalisation, attribute fallbacks, price, the formula.

Run: ``python benchmarks/shop_reward_parity.py --webshop path/to/WebShop [--goals 300] [--human]``

``--quick`` (what CI runs): 10 goals and 2,000 random string pairs; without ``--webshop`` only
proas's side runs (every purchase scored, the matching primitive on every pair, nothing
compared), so that the script keeps working where no WebShop checkout is at hand.
"""

from __future__ import annotations

import argparse
import importlib
import random
import sys
import types

from proas.envs.shop import make_shop_env


class _Token:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos_ = "NOUN"


def _fake_spacy(nouns):
    """A ``spacy`` module whose ``load`` returns a tagger yielding proas's nouns as NOUN tokens."""
    mod = types.ModuleType("spacy")
    mod.load = lambda name: (lambda title: [_Token(n) for n in nouns(title)])
    return mod


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--webshop", default=None, help="root of a WebShop checkout")
    parser.add_argument("--goals", type=int, default=300)
    parser.add_argument("--human", action="store_true", help="human-style goals (list options) instead of synthetic")
    parser.add_argument("--quick", action="store_true", help="10 goals, 2,000 string pairs; proas's side alone "
                        "without --webshop: a smoke run for CI")
    args = parser.parse_args()
    pairs = 20000
    if args.quick:
        args.goals, pairs = 10, 2000
    elif args.webshop is None:
        parser.error("--webshop is required (or --quick for proas's side alone)")
    env = make_shop_env(nouns="stored", human_goals=args.human)
    cat = env.catalog
    goal_mod = None
    if args.webshop is not None:
        sys.path.insert(0, args.webshop)
        sys.modules["spacy"] = _fake_spacy(cat.nouns)
        try:
            goal_mod = importlib.import_module("web_agent_site.engine.goal")
        except ImportError as exc:
            print(f"cannot import WebShop's goal.py ({exc}); needs thefuzz and rich", file=sys.stderr)
            return 2
    else:
        print("no --webshop: proas's side alone, nothing compared")
    rng = random.Random(0)
    by_query: dict[str, list] = {}
    for p in cat.products:
        by_query.setdefault(p["query"], []).append(p)
    n = mismatches = 0
    scores = []
    for tid in rng.sample(env.task_ids("all"), min(args.goals, len(cat.goals))):
        goal = env.goal(tid)
        target = cat.by_asin[goal["asin"]]
        buys = [(target, dict(goal["goal_options"]) if isinstance(goal["goal_options"], dict) else {})]
        for p in [target, *rng.sample(by_query[goal["query"]], 4), *rng.sample(cat.products, 3)]:
            buys.append(
                (p, {name: rng.choice(vals) for name, vals in p["options"].items() if vals and rng.random() < 0.7})
            )
        for product, options in buys:
            price = cat.prices[product["asin"]]
            ours, _ = cat.reward(product["asin"], goal, options)
            theirs = ours if goal_mod is None else goal_mod.get_reward(product, goal, price=price, options=options)
            n += 1
            scores.append(ours)
            if theirs != ours:
                mismatches += 1
                if mismatches <= 5:
                    print(f"goal {tid} asin {product['asin']} options {options}: webshop {theirs} proas {ours}")
    # the matching primitives on random strings: words of the catalog, punctuation, accents
    from proas.envs.shop.reward import token_set_ratio

    if goal_mod is not None:
        from thefuzz import fuzz
    else:  # nothing to compare with: proas's own figure on both sides
        fuzz = types.SimpleNamespace(token_set_ratio=token_set_ratio)

    words = sorted({w for p in cat.products for vals in p["options"].values() for v in vals for w in v.split()}
                   | {w for p in cat.products for a in p["Attributes"] for w in a.split()})
    words += ["x-large", "l'eau", "caf\u00e9", "na\u00efve", "\u00bd", "|", "&", "6.5", "(", ")", "\u2122", "\u4e2d"]
    fuzz_bad = 0
    for _ in range(pairs):
        a = " ".join(rng.choices(words, k=rng.randint(0, 4)))
        b = " ".join(rng.choices(words, k=rng.randint(0, 4)))
        pair = (a, ("size", b)) if rng.random() < 0.3 else (a, b)
        if token_set_ratio(*pair) != fuzz.token_set_ratio(*pair):
            fuzz_bad += 1
            if fuzz_bad <= 5:
                print(f"token_set_ratio{pair}: thefuzz {fuzz.token_set_ratio(*pair)} proas {token_set_ratio(*pair)}")
    compared = "nothing compared" if goal_mod is None else None
    print(f"token_set_ratio on {pairs} random pairs: {compared or f'{fuzz_bad} mismatches'}")
    mismatches += fuzz_bad
    distinct = len({round(s, 6) for s in scores})
    print(f"{n} purchases over {args.goals} goals ({distinct} distinct scores, "
          f"{sum(s == 1.0 for s in scores)} perfect): {compared or f'{mismatches} mismatches'}")
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Parity check: ShopEnv's pages against WebShop's own HTML templates.

WebShop renders every page from Jinja templates and turns the HTML into text with BeautifulSoup
(every visible text node, stripped, joined with `` [SEP] ``); its clickables are the ``btn``
elements' texts, the product links and the radio values. This script plays validation goals in
``ShopEnv`` (oracle walkthroughs plus paging, ``< Prev`` and the sub-pages), renders the same
states with the templates of a WebShop checkout, converts them the way WebShop does and counts
mismatches in page text, clickables and the search bar.

The templates are not shipped with proas (they belong to WebShop); point ``--templates`` at
``web_agent_site/templates`` of a WebShop checkout. Needs ``jinja2`` and ``beautifulsoup4``.

Run: ``python benchmarks/shop_webshop_parity.py --templates WebShop/web_agent_site/templates``

``--quick`` (what CI runs): 3 goals; without ``--templates`` only proas's side runs (the same
tour of every page, nothing rendered or compared), so that the script keeps working where no
WebShop checkout is at hand.
"""

from __future__ import annotations

import argparse
import sys

from proas.envs.shop import make_shop_env
from proas.envs.shop.env import ItemPage, ResultsPage, SearchPage, SubPage

SUB_TEMPLATES = {
    "description": "description_page.html",
    "features": "features_page.html",
    "reviews": "review_page.html",
}


def webshop_text_and_clickables(html: str) -> tuple[str, list[str], bool]:
    from bs4 import BeautifulSoup
    from bs4.element import Comment

    soup = BeautifulSoup(html, "html.parser")
    hidden_parents = {"style", "script", "head", "title", "meta", "[document]"}
    texts = [
        t for t in soup.find_all(string=True) if t.parent.name not in hidden_parents and not isinstance(t, Comment)
    ]
    text = " [SEP] ".join(t.strip() for t in texts if t != "\n")
    clickables: dict[str, None] = {}
    for el in soup.find_all(class_="btn") + soup.find_all(class_="product-link"):
        clickables[el.get_text().lower()] = None
    for radio in soup.select('input[type="radio"]'):
        clickables[radio.get("value")] = None
    return text, list(clickables), soup.find(id="search_input") is not None


def render(templates, env, instruction: str) -> str:
    common = {"session_id": "s", "instruction_text": instruction}
    page = env.page
    if isinstance(page, SearchPage):
        return templates.get_template("search_page.html").render(**common)
    if isinstance(page, ResultsPage):
        return templates.get_template("results_page.html").render(
            products=list(page.shown), keywords=list(page.keywords), page=page.number, total=len(page.top_n),
            **common)
    if isinstance(page, (ItemPage, SubPage)):
        item = page if isinstance(page, ItemPage) else page.item
        kw = {"product_info": env.catalog.by_asin[item.asin], "keywords": list(item.results.keywords),
              "page": item.results.number, "asin": item.asin, "options": dict(item.options), **common}
        if isinstance(page, ItemPage):
            return templates.get_template("item_page.html").render(show_attrs=False, **kw)
        return templates.get_template(SUB_TEMPLATES[page.name]).render(**kw)
    return templates.get_template("done_page.html").render(
        session_id="s", reward=page.score, asin=page.item.asin, options=dict(page.item.options), reward_info=None,
        goal_attrs=None, purchased_attrs=None, goal=None, mturk_code=None, query=None, category=None,
        product_category=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--templates", default=None, help="WebShop's web_agent_site/templates folder")
    parser.add_argument("--goals", type=int, default=25, help="validation goals to play")
    parser.add_argument("--quick", action="store_true", help="3 goals; proas's side alone without --templates: "
                        "a smoke run for CI")
    args = parser.parse_args()
    if args.quick:
        args.goals = 3
    elif args.templates is None:
        parser.error("--templates is required (or --quick for proas's side alone)")
    templates = None
    if args.templates is not None:
        try:
            from jinja2 import Environment, FileSystemLoader
        except ImportError:
            print("needs jinja2 and beautifulsoup4 (pip install jinja2 beautifulsoup4)", file=sys.stderr)
            return 2
        templates = Environment(loader=FileSystemLoader(args.templates), autoescape=True)
        templates.globals["url_for"] = lambda *a, **k: "/"
    else:
        print("no --templates: proas's side alone, nothing compared")
    env = make_shop_env(nouns="stored")
    states = mismatches = 0
    pages: set[str] = set()

    def check(instruction: str) -> None:
        nonlocal states, mismatches
        states += 1
        pages.add(env.page.name if isinstance(env.page, SubPage) else env.page.kind)
        if templates is None:
            return
        text, clickables, bar = webshop_text_and_clickables(render(templates, env, instruction))
        if (text, clickables, bar) != (env.obs, list(env.clickables), env.has_search_bar):
            mismatches += 1
            if mismatches <= 3:
                print(f"mismatch on {env.page.kind}:\n  webshop: {text}\n  proas:   {env.obs}")

    for tid in env.task_ids("valid")[: args.goals]:
        plan = env.oracle(tid)
        k = 1 + plan[1:].count("click[next >]")  # plan[k] opens the product
        tour = [
            "click[next >]",
            "click[next >]",
            "click[< prev]",
            "click[< prev]",
            *plan[1 : k + 1],
            "click[description]",
            "click[< prev]",
            "click[features]",
            "click[< prev]",
            "click[reviews]",
            "click[< prev]",
        ]
        _, info = env.reset(tid)
        check(info["task"])
        for action in [plan[0], *tour, *plan[k + 1:]]:
            env.step(action)
            check(info["task"])
    print(f"{states} states over {args.goals} goals, pages {sorted(pages)}: "
          + ("nothing compared" if templates is None else f"{mismatches} mismatches"))
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

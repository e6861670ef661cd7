"""Shop env speed: catalog/index build time and steps per second, search vs click steps.

Run: ``python benchmarks/shop_env.py [--episodes N] [--quick]``. Prints:

- cold build of the shipped catalog (read + derive + goals) and of its BM25 index, and the
  cached rebuild (a second env over the same files);
- search steps/s and click steps/s, measured on oracle walkthroughs of validation goals (each
  episode: one search, then clicks), plus WebShop-style paging clicks;
- the share of an oracle rollout's env time spent in search, and search/click cost ratio.
"""

from __future__ import annotations

import argparse
import random
import time

from proas.envs.shop import engine, search
from proas.envs.shop.engine import ShopCatalog
from proas.envs.shop.env import ShopEnv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=128, help="oracle episodes to time (validation goals)")
    parser.add_argument("--quick", action="store_true", help="8 episodes: a smoke run for CI")
    args = parser.parse_args()
    if args.quick:
        args.episodes = 8

    engine._CATALOGS.clear()
    search._CACHE.clear()
    t0 = time.perf_counter()
    cat = ShopCatalog.load(nouns="stored")
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    search.SearchIndex(cat.products)
    t_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    ShopCatalog.load(nouns="stored")
    t_cached = time.perf_counter() - t0
    print(f"catalog: {len(cat.products)} products, {len(cat.goals)} goals")
    print(f"cold build (files + goals + index): {t_build * 1000:8.1f} ms")
    print(f"  of which BM25 index build:        {t_index * 1000:8.1f} ms")
    print(f"cached build (second env):          {t_cached * 1000:8.3f} ms")

    env = ShopEnv(cat)
    tasks = env.task_ids("valid")[: args.episodes]
    t0 = time.perf_counter()
    plans = {t: env.oracle(t) for t in tasks}
    t_oracle = time.perf_counter() - t0
    cat._win_cache.clear()  # time the abstraction cold, as a fresh rollout would see it
    t_search = t_click = t_reset = 0.0
    n_search = n_click = 0
    for t in tasks:
        t0 = time.perf_counter()
        env.reset(t)
        t_reset += time.perf_counter() - t0
        for action in plans[t]:
            t0 = time.perf_counter()
            env.step(action)
            dt = time.perf_counter() - t0
            if action.startswith("search["):
                t_search += dt
                n_search += 1
            else:
                t_click += dt
                n_click += 1
    # paging clicks on a broad query (results pages re-render from the stored hits)
    n_page = 0
    t_page = 0.0
    for t in tasks[:32]:
        env.reset(t)
        env.step("search[women's t-shirt]")
        for _ in range(4):
            t0 = time.perf_counter()
            env.step("click[next >]")
            t_page += time.perf_counter() - t0
            n_page += 1
    queries = [a[len("search["):-1] for t in tasks for a in plans[t] if a.startswith("search[")]
    t0 = time.perf_counter()
    for q in queries:
        cat.search(q.split(" "), random.Random(0))  # ties broken as the env's oracle breaks them
    t_bm25 = time.perf_counter() - t0
    per_search = t_search / n_search
    per_click = t_click / n_click
    print(f"search steps: {n_search / t_search:9.0f} /s  ({per_search * 1e3:.3f} ms each, {n_search} steps)")
    print(f"  of which BM25 retrieval:  {len(queries) / t_bm25:9.0f} /s  ({t_bm25 / len(queries) * 1e3:.3f} ms each; "
          "the rest is rendering and the abstraction's reward checks)")
    print(f"click steps:  {n_click / t_click:9.0f} /s  ({per_click * 1e3:.3f} ms each, {n_click} steps)")
    print(f"paging clicks:{n_page / t_page:9.0f} /s  ({t_page / n_page * 1e3:.3f} ms each)")
    print(f"resets:       {len(tasks) / t_reset:9.0f} /s")
    print(f"oracle plans: {len(tasks) / t_oracle:9.0f} /s")
    total = t_search + t_click + t_reset
    print(f"search / click cost ratio: {per_search / per_click:.2f}")
    print(f"share of oracle-rollout env time in search: {t_search / total:.1%}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Placeholder parquet files for verl-agent's trainer, written with pandas: what verl-agent's
``examples/data_preprocess/prepare.py --mode text`` writes, without downloading the dataset it
only uses for the row count (verl-agent's prompts come from its env managers, not from these
rows), for the one-H200 run (docs/verl.md section 10).

    python recipes/verl_agent/device/prepare_data.py OUT_DIR --train 4 --val 8
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def rows(n: int, split: str) -> pd.DataFrame:
    return pd.DataFrame([{
        "data_source": "text",
        "prompt": [{"role": "user", "content": ""}],
        "ability": "agent",
        "extra_info": {"split": split, "index": i},
    } for i in range(n)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--train", type=int, required=True, help="rows of train.parquet (data.train_batch_size)")
    p.add_argument("--val", type=int, required=True, help="rows of test.parquet (data.val_batch_size)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows(args.train, "train").to_parquet(out / "train.parquet")
    rows(args.val, "test").to_parquet(out / "test.parquet")
    print(f"{args.train} train and {args.val} val placeholder rows -> {out}")


if __name__ == "__main__":
    main()

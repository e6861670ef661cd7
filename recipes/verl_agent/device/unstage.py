#!/usr/bin/env python3
"""On the device: the two halves of stage.sh's archive (read from stdin, in order) checked against
its sha256 and unpacked into DEST (wheels/, verl-agent/, model/); docs/verl.md section 10.

    cat /tmp/proas-stage/part1 .va_stage/part2 \\
        | python3 recipes/verl_agent/device/unstage.py /tmp/proas-stage --sha256 .va_stage/sha256
"""

from __future__ import annotations

import argparse
import hashlib
import io
import lzma
import sys
import tarfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("--sha256", type=Path, required=True, help="stage.sh's .va_stage/sha256")
    args = ap.parse_args(argv)
    try:
        want = args.sha256.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        print(f"unstage: cannot read {args.sha256}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
        return 2
    data = sys.stdin.buffer.read()
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        print(f"unstage: the archive's sha256 is {got[:12]}..., stage.sh wrote {want[:12]}...: a half is missing, "
              "stale or out of order", file=sys.stderr)
        return 2
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
            tar.extractall(args.dest, filter="data")
    except (tarfile.TarError, lzma.LZMAError, OSError) as e:  # OSError: DEST is a file, a full disk
        print(f"unstage: cannot unpack: {e}", file=sys.stderr)
        return 2
    print(f"unpacked {len(data) / 2**20:.1f} MiB into {args.dest}: "
          + ", ".join(sorted(p.name for p in args.dest.iterdir())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env bash
# Download the wheels of wheels.txt for the device (Python 3.12, manylinux x86_64) into
# .whl_va/batch1 and .whl_va/batch2, here, where pip reaches PyPI; ray's Java jars are dropped
# (67.8 -> 37.9 MiB). The folder is git-ignored and apart from .whl/, the held-out study's
# device wheels, so that carrying one never carries the other (docs/verl.md section 10).
#
#   bash recipes/verl_agent/device/fetch_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
# git's own exclude file: .git is a file in a worktree, so ask git where it is
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.whl_va/' "$exclude" 2>/dev/null || echo /.whl_va/ >> "$exclude"
list=recipes/verl_agent/device/wheels.txt
for batch in batch1 batch2; do
    dest=.whl_va/$batch
    mkdir -p "$dest"
    for pkg in $(awk -v b="[$batch]" '/^\[/{on=($0==b); next} on && NF && !/^#/' "$list"); do
        # --no-deps: the device image has the rest. antlr4-python3-runtime 4.9.3, jericho and
        # fast-downward-textworld are sdists on PyPI: pip builds them here into py3-none-any
        # wheels (or takes them from its cache); jericho's and fast-downward's ctypes libraries
        # need GLIBC 2.32 and GLIBCXX 3.4.29 when built on Debian 12
        python3 -m pip download -q --no-deps --dest "$dest" --python-version 3.12 --implementation cp \
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
            --platform any --only-binary=:all: "$pkg" 2>/dev/null \
            || python3 -m pip wheel -q --no-deps --wheel-dir "$dest" "$pkg"
    done
done
for w in .whl_va/batch1/ray-*.whl; do  # drop ray/jars (Java, unused), from the archive and its RECORD
    python3 - "$w" <<'PY'
import sys, zipfile
path = sys.argv[1]
with zipfile.ZipFile(path) as src:
    items = [(i, src.read(i)) for i in src.infolist() if not i.filename.startswith("ray/jars/")]
    if len(items) == len(src.infolist()):
        sys.exit(0)  # stripped already
with zipfile.ZipFile(path + ".new", "w", zipfile.ZIP_DEFLATED) as dst:
    for info, data in items:
        if info.filename.endswith(".dist-info/RECORD"):
            data = b"".join(l for l in data.splitlines(True) if not l.startswith(b"ray/jars/"))
        dst.writestr(info, data)
PY
    [[ -f "$w.new" ]] && mv "$w.new" "$w"
done
du -sh .whl_va/batch1 .whl_va/batch2

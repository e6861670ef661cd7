#!/usr/bin/env bash
# Download the wheels of wheels.txt for the device (Python 3.12, manylinux x86_64) into
# .whl/batch1 and .whl/batch2, here, where pip reaches PyPI; ray's Java jars are dropped
# (67.8 -> 37.9 MiB). Prepared, not yet run (docs/verl.md section 10).
#
#   bash recipes/verl_agent/device/fetch_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
list=recipes/verl_agent/device/wheels.txt
for batch in batch1 batch2; do
    dest=.whl/$batch
    mkdir -p "$dest"
    pkgs=$(awk -v b="[$batch]" '/^\[/{on=($0==b); next} on && NF && !/^#/' "$list")
    # --no-deps: the device image has the rest; fast-downward-textworld and jericho are sdists
    # on PyPI, so their wheels come from this machine's pip cache (built once here)
    python3 -m pip download --no-deps --dest "$dest" --python-version 3.12 --platform manylinux2014_x86_64 \
        --platform manylinux_2_17_x86_64 --platform any --only-binary=:all: $pkgs || \
        python3 -m pip download --no-deps --dest "$dest" $pkgs
done
for w in .whl/batch1/ray-*.whl; do  # drop ray/jars (Java, unused)
    [[ -f "$w" ]] || continue
    tmp=$(mktemp -d) && (cd "$tmp" && python3 -m zipfile -e "$OLDPWD/$w" . && rm -rf ray/jars \
        && python3 -m zipfile -c "$OLDPWD/$w.new" . ) && mv "$w.new" "$w" && rm -rf "$tmp"
done
du -sh .whl/batch1 .whl/batch2

#!/usr/bin/env bash
# Here, before the learning run's device session (docs/verl.md section 10, "The learning run"):
# the wheels of fetch_wheels.sh (.whl_va/batch1, batch2), the patched verl-agent copy
# (.verl-agent, copy_verl_agent.sh) and the start model, as one xz-compressed tar cut in two
# halves, .va_stage/part1 and .va_stage/part2 (git-ignored), each carried by one device call.
# The wheels go in uncompressed (stored zips), so that xz compresses their contents as one
# stream: 56 MiB for all three against 91 MiB as they lie, still more than one call carries
# beside the working tree, hence two halves.
#
#   bash recipes/verl_agent/device/stage.sh MODEL_DIR
# on the device, call 1:  mkdir -p /tmp/proas-stage && cp .va_stage/part1 /tmp/proas-stage/
# call 2 (within 30 s):   cat /tmp/proas-stage/part1 .va_stage/part2 | python3 recipes/verl_agent/device/unstage.py /tmp/proas-stage --sha256 .va_stage/sha256
#   -> /tmp/proas-stage/wheels, /tmp/proas-stage/verl-agent, /tmp/proas-stage/model
set -euo pipefail
MODEL_IN=${1:?the start model: a directory with the model and its tokenizer}
[[ -f "$MODEL_IN/config.json" ]] || { echo "stage.sh: $MODEL_IN has no config.json: not a model directory" >&2; exit 2; }
MODEL_IN=$(cd "$MODEL_IN" && pwd)
cd "$(dirname "$0")/../../.."
for need in .whl_va/batch1 .whl_va/batch2 .verl-agent; do
    [[ -d $need ]] || { echo "stage.sh: no $need here (fetch_wheels.sh, copy_verl_agent.sh)" >&2; exit 2; }
done
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.va_stage/' "$exclude" 2>/dev/null || echo /.va_stage/ >> "$exclude"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/stage/wheels"
python3 - "$tmp/stage/wheels" .whl_va/batch1/*.whl .whl_va/batch2/*.whl <<'PY'
import sys, zipfile
from pathlib import Path
out = Path(sys.argv[1])
for wheel in map(Path, sys.argv[2:]):
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out / wheel.name, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info), compress_type=zipfile.ZIP_STORED)
PY
cp -r .verl-agent "$tmp/stage/verl-agent"
cp -r "$MODEL_IN" "$tmp/stage/model"
tar -C "$tmp/stage" -cf - . | xz -9 -T0 > "$tmp/stage.tar.xz"
(cd "$tmp" && split -n 2 -d -a 1 stage.tar.xz part)
rm -rf .va_stage.tmp && mkdir .va_stage.tmp
mv "$tmp/part0" .va_stage.tmp/part1 && mv "$tmp/part1" .va_stage.tmp/part2
sha256sum "$tmp/stage.tar.xz" | cut -d' ' -f1 > .va_stage.tmp/sha256
rm -rf .va_stage && mv .va_stage.tmp .va_stage
du -sh .va_stage/part1 .va_stage/part2

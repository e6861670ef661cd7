#!/usr/bin/env bash
# Copy the pinned verl-agent's verl/, agent_system/ and gigpo/ into .verl-agent/ (git-ignored, no
# .git), with verl-agent.patch and device/sdpa.patch applied: the code the one-GPU run carries
# (docs/verl.md section 10). Reads the commit's blobs one by one from a git directory, so a
# mirror that lacks the large files it never needs (webshop's chromedriver binary, gym_cards'
# images, both left out) still serves; `git archive` stops at the first missing blob.
#
#   bash recipes/verl_agent/device/copy_verl_agent.sh GIT_DIR     # e.g. a verl-agent clone's .git
set -euo pipefail
GIT_DIR_IN=${1:?the git directory of a verl-agent clone or mirror}
COMMIT=796ed310287fa605c9292a0fce07a86d79fde05e
cd "$(dirname "$0")/../../.."
# git's own exclude file: .git is a file in a worktree, so ask git where it is
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.verl-agent/' "$exclude" 2>/dev/null || echo /.verl-agent/ >> "$exclude"
rm -rf .verl-agent.tmp && mkdir .verl-agent.tmp
git --git-dir="$GIT_DIR_IN" ls-tree -r "$COMMIT" verl agent_system gigpo \
  | grep -v -e 'envs/chromedriver$' -e 'env_package/gym_cards/' \
  | while read -r mode _ sha path; do
      mkdir -p ".verl-agent.tmp/$(dirname "$path")"
      git --git-dir="$GIT_DIR_IN" cat-file blob "$sha" > ".verl-agent.tmp/$path"
      if [ "$mode" = 100755 ]; then chmod +x ".verl-agent.tmp/$path"; fi
    done
(cd .verl-agent.tmp && patch -p1 -s < ../recipes/verl_agent/verl-agent.patch \
   && patch -p1 -s < ../recipes/verl_agent/device/sdpa.patch \
   && patch -p1 -s < ../recipes/verl_agent/device/resume_check.patch \
   && patch -p1 -s < ../recipes/verl_agent/device/transformers5.patch)
rm -rf .verl-agent && mv .verl-agent.tmp .verl-agent
echo "wrote .verl-agent ($(find .verl-agent -type f | wc -l) files, $(du -sh .verl-agent | cut -f1))"

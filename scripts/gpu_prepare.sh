#!/usr/bin/env bash
# Before a GPU sitting, on the CPU machine (it reaches the package index; the GPU machine does not), from the project
# root: what the GPU calls carry besides the working tree, within the 64 MiB a call may carry.
#   bash scripts/gpu_prepare.sh          # .whl/ (../shared/gpu/fetch-wheels.sh, plus the test suite's wheels) and
#                                        # .gpuwin.tar.xz (the committed runs' windows.csv, ~114 MB, as ~9 MB), then
#                                        # the windows.csv files leave the working tree
#   bash scripts/gpu_prepare.sh restore  # after the sitting: the windows.csv files back from git
# The GPU scripts (gpu_lib.sh: restore_windows) unpack .gpuwin.tar.xz on the GPU machine, so the suite reads the
# committed runs there as here. Carry: [".whl", ".gpuwin.tar.xz"] (and ".gpudata" for the WikiText-2 runs).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mapfile -t windows < <(git ls-files '*/windows.csv')
if [ "${1:-}" = restore ]; then
  git checkout -- "${windows[@]}"
  echo "restored ${#windows[@]} windows.csv files"
  exit 0
fi
for ignored in /.whl/ /.gpuwin.tar.xz; do
  grep -qx "$ignored" .git/info/exclude 2>/dev/null || echo "$ignored" >> .git/info/exclude
done
[ -d .whl ] || bash ../shared/gpu/fetch-wheels.sh
# The suite's test dependencies that the GPU image lacks and that fit (tensorboard and wandb, ~25 MB with theirs, do
# not: tests/test_tracking.py is left out there).
plat=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform any --only-binary=:all:)
# SymPy 1.14.0 (6 MB): data=sympy (the code regime, scripts/gpu_code_regime.sh) reads its source, pinned by digest,
# and refuses the version another torch brings.
for p in hypothesis sortedcontainers pytest-timeout import-linter grimp 'rich>=14.2' 'click>=8.2' pytest-xdist execnet \
         sympy==1.14.0; do
  python3 -m pip download -q --no-deps "${plat[@]}" -d .whl "$p"
done
git diff --quiet -- "${windows[@]}" 2>/dev/null || { echo "error: a committed windows.csv has changes; commit or restore them first"; exit 2; }
tar -cJf .gpuwin.tar.xz "${windows[@]}"
rm -f "${windows[@]}"
du -ch .whl .gpuwin.tar.xz | tail -n 1
echo "${#windows[@]} windows.csv files packed into .gpuwin.tar.xz and removed; carry [\".whl\", \".gpuwin.tar.xz\"]"

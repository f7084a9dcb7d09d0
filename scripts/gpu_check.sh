#!/usr/bin/env bash
# pe-bench's CUDA paths on a GPU machine, in one go: the environment, the cuda-marked tests (tests/test_cuda.py:
# every scheme × backend on the GPU, compiled bf16 steps), a smoke sweep of every registered scheme on CUDA with
# bf16 + torch.compile (several points at once on the one GPU), and the whole test suite with the GPU visible.
# Usage (from the project root, pe-bench importable): bash scripts/gpu_check.sh OUT_DIR [PARALLEL]
# (CUDA_TESTS=0, SMOKE_SWEEP=0, FULL_SUITE=0 skip a stage; SUITE_TIMEOUT, SUITE_ARGS: the whole suite's limit and extra args)
# Writes OUT_DIR/gpu_check.log (the summary) and OUT_DIR/gpu_check.tar.gz (every log, the smoke sweep's report).
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
out=$(realpath -m "${1:?usage: gpu_check.sh OUT_DIR [PARALLEL]}")
par=${2:-8}
work=$(mktemp -d)
mkdir -p "$out"
log="$out/gpu_check.log"
say() { echo "[$(date +%T)] $*" | tee -a "$log"; }

say "environment"
gpu_environment 2>&1 | tee -a "$log"

if [ "${CUDA_TESTS:-1}" = 1 ]; then  # 0: the whole suite below runs them anyway
  say "cuda-marked tests (tests/test_cuda.py)"
  python3 -m pytest -q -rf -p no:cacheprovider -n "$par" -m cuda tests/test_cuda.py >"$work/cuda_tests.log" 2>&1
  tail -n 25 "$work/cuda_tests.log" | tee -a "$log"
fi

if [ "${SMOKE_SWEEP:-1}" = 1 ]; then
  say "smoke sweep: every scheme on cuda, bf16 + compile, $par at once"
  python3 -m pe_bench sweep sweep=smoke seed=0 train.device=cuda "results_dir=$work/smoke" --parallel "$par" \
    --no-progress >"$work/smoke_sweep.log" 2>&1
  echo "exit $?" >>"$work/smoke_sweep.log"
  grep -E "failed|diverged|trained|exit|wrote|Error" "$work/smoke_sweep.log" | tail -n 40 | tee -a "$log"
  python3 - "$work/smoke" <<'EOF' 2>&1 | tee -a "$log"
import json, sys
from pathlib import Path
for meta in sorted(Path(sys.argv[1]).glob("runs/*/meta.json")):
    m = json.loads(meta.read_text())
    keys = ("status", "device", "numerics", "attention_backend", "train_tokens_per_s", "final_val_loss", "error")
    print(meta.parent.name, {k: m.get(k) for k in keys if k in m})
EOF
fi

if [ "${FULL_SUITE:-1}" = 1 ]; then  # the suite's CLI runs train on the GPU here (device=auto)
  say "the whole suite with the GPU visible"
  # SUITE_ARGS: more pytest arguments (the GPU image lacks import-linter and wandb: --ignore tests/test_layers.py
  # --deselect ... for the tests that need them)
  # -o addopts=: pyproject's -q would cancel -v (each test's outcome by name, also when the limit stops the run).
  # OMP_NUM_THREADS=1: each of the N workers would otherwise start a thread per core (N × cores threads; on
  # 2026-11-27, 16 workers ran 30 % of the suite in 180 s).
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} timeout "${SUITE_TIMEOUT:-300}" python3 -m pytest -o addopts= -v -rfE -p no:cacheprovider -n "$par" tests \
    --junitxml="$work/suite.xml" ${SUITE_ARGS:-} >"$work/suite.log" 2>&1
  echo "exit $?" >>"$work/suite.log"
  grep -E "FAILED|ERROR" "$work/suite.log" | sort -u | tail -n 40 | tee -a "$log"
  tail -n 3 "$work/suite.log" | tee -a "$log"
fi

tar -czf "$out/gpu_check.tar.gz" -C "$work" --exclude='*.pt' --exclude='*.npy' . 2>/dev/null
say "done"

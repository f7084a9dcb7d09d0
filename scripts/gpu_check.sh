#!/usr/bin/env bash
# pe-bench's CUDA paths on a GPU machine, in one go: the environment, the tests named in FIRST_TESTS (failures of an
# earlier sitting: their messages first), the cuda-marked tests (tests/test_cuda.py: every scheme × backend on the
# GPU, compiled bf16 steps), a smoke sweep of every registered scheme on CUDA with bf16 + torch.compile (several
# points at once on the one GPU), and the whole test suite with the GPU visible.
# Usage (from the project root, pe-bench importable): bash scripts/gpu_check.sh OUT_DIR [PARALLEL]
# (CUDA_TESTS=0, SMOKE_SWEEP=0, FULL_SUITE=0 skip a stage; FIRST_TESTS="tests/x.py::name[id] ..." and FIRST_S its
# limit; CUDA_S, SUITE_TIMEOUT: the cuda tests' and the whole suite's limits; SUITE_ARGS: extra pytest args)
# Writes OUT_DIR/gpu_check.log (the summary: every failure with its message) and OUT_DIR/gpu_check.tar.gz (every
# log, the suite's JUnit XML, the smoke sweep's report). The committed runs' windows.csv come from .gpuwin.tar.xz
# (scripts/gpu_prepare.sh).
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
out=$(realpath -m "${1:?usage: gpu_check.sh OUT_DIR [PARALLEL]}")
par=${2:-8}
work=$(mktemp -d)
mkdir -p "$out"
log="$out/gpu_check.log"
say() { echo "[$(date +%T)] $*" | tee -a "$log"; }
failures() {  # failures JUNIT_XML LOG: each failed or erroring test with the first lines of its message
  python3 - "$1" "$2" <<'PY' 2>&1 | tee -a "$log"
import re
import sys
import xml.etree.ElementTree as ET
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except (OSError, ET.ParseError) as e:  # killed before it wrote one: the names, from the log
    print(f"no JUnit XML ({e}); the failures named in the log:")
    for line in sorted(set(re.findall(r"(?:FAILED|ERROR) (tests/\S+)", open(sys.argv[2], errors="replace").read()))):
        print("FAILED", line)
    sys.exit(0)
for case in cases:
    for bad in [*case.findall("failure"), *case.findall("error")]:
        text = " ".join((bad.get("message") or bad.text or "").split())
        print(f"{bad.tag.upper()} {case.get('classname')}::{case.get('name')}: {text[:600]}")
PY
}

say "environment"
gpu_environment 2>&1 | tee -a "$log"

restore_windows 2>&1 | tee -a "$log"

if [ -n "${FIRST_TESTS:-}" ]; then
  say "the tests named in FIRST_TESTS, each with its message"
  # shellcheck disable=SC2086
  timeout -s INT -k 20 "${FIRST_S:-120}" python3 -m pytest -o addopts= -q -rfE --tb=short -p no:cacheprovider -n "$par" \
    --junitxml="$work/first.xml" $FIRST_TESTS >"$work/first.log" 2>&1
  echo "exit $?" >>"$work/first.log"
  failures "$work/first.xml" "$work/first.log"
  tail -n 2 "$work/first.log" | tee -a "$log"
fi

if [ "${CUDA_TESTS:-1}" = 1 ]; then  # 0: the whole suite below runs them anyway
  say "cuda-marked tests (tests/test_cuda.py)"
  timeout -s INT -k 20 "${CUDA_S:-300}" python3 -m pytest -o addopts= -q -rfE -p no:cacheprovider -n "$par" -m cuda \
    --junitxml="$work/cuda.xml" tests/test_cuda.py >"$work/cuda_tests.log" 2>&1
  echo "exit $?" >>"$work/cuda_tests.log"
  failures "$work/cuda.xml" "$work/cuda_tests.log"
  tail -n 2 "$work/cuda_tests.log" | tee -a "$log"
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
  # SUITE_ARGS: more pytest arguments. The GPU image lacks the loggers' packages (tensorboard, wandb: ~25 MB with
  # theirs, more than a call carries), so their tests are left out there, and said so:
  missing=$(python3 -c "import importlib.util as u; print(' '.join(m for m in ('tensorboard', 'wandb') if not u.find_spec(m)))")
  if [ -n "$missing" ]; then
    say "left out: tests/test_tracking.py (this machine lacks $missing)"
    SUITE_ARGS="${SUITE_ARGS:-} --ignore tests/test_tracking.py"
  fi
  # timeout -s INT: at the limit pytest stops as on Ctrl-C, and still writes its summary and the JUnit XML.
  # -o addopts=: pyproject's -q would cancel -v (each test's outcome by name, also when the limit stops the run).
  # OMP_NUM_THREADS=1: each of the N workers would otherwise start a thread per core (N × cores threads; on
  # 2026-11-27, 16 workers ran 30 % of the suite in 180 s).
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} timeout -s INT -k 20 "${SUITE_TIMEOUT:-300}" python3 -m pytest -o addopts= -v -rfE -p no:cacheprovider -n "$par" tests \
    --junitxml="$work/suite.xml" ${SUITE_ARGS:-} >"$work/suite.log" 2>&1
  echo "exit $?" >>"$work/suite.log"
  failures "$work/suite.xml" "$work/suite.log" | tail -n 60
  tail -n 3 "$work/suite.log" | tee -a "$log"
fi

tar -czf "$out/gpu_check.tar.gz" -C "$work" --exclude='*.pt' --exclude='*.npy' . 2>/dev/null
say "done"

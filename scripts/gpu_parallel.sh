#!/usr/bin/env bash
# Does one GPU take many tiny points at once? The tasks sweep's passkey point (NoPE, configs/model/tiny, L = 32) on
# CUDA, trained alone (`--parallel 1`), then N at once (N seeds, `--parallel N`), each `pe-bench sweep` with its own
# wall clock. Prints each run's training throughput (meta.json's train_tokens_per_s: the median logged window, the
# compile's window left out), their sum, and the tokens trained per second of the sweep's wall time (compiles and
# evaluation in).
# Usage (on the GPU machine, from the project root, pe-bench importable): bash scripts/gpu_parallel.sh OUT_DIR [N] [STEPS]
# Writes OUT_DIR/gpu-parallel.txt.
set -uo pipefail
out=$(realpath -m "${1:?usage: gpu_parallel.sh OUT_DIR [N] [STEPS]}")
n=${2:-8}
steps=${3:-1000}
work=$(mktemp -d)
mkdir -p "$out"
common=(sweep=tasks "sweep.grid.task=[passkey]" "sweep.schemes=[nope]" train.device=cuda "train.steps=$steps"
        "eval.ratios=[1]" --no-progress)
sweep() {  # NAME SEEDS PARALLEL
  local t0=$SECONDS
  python3 -m pe_bench sweep "${common[@]}" "sweep.seeds=[$2]" "results_dir=$work/$1" --parallel "$3" \
    >"$work/$1.log" 2>&1
  echo "$1 exit $? wall $((SECONDS - t0)) s"
}
{
  sweep alone 100 1
  sweep many "$(seq -s, 0 $((n - 1)))" "$n"
  python3 - "$work" "$steps" <<'PY'
import json, sys
from pathlib import Path
work, steps = Path(sys.argv[1]), int(sys.argv[2])
for name in ("alone", "many"):
    metas = [json.loads(p.read_text()) for p in sorted((work / name).glob("runs/*/meta.json"))]
    tps = [m.get("train_tokens_per_s") for m in metas]
    print(name, "runs", len(metas), "status", sorted({m.get("status") for m in metas}), "tokens/s each", tps,
          "sum", sum(t for t in tps if t), "train_seconds", [m.get("train_seconds") for m in metas])
PY
  tail -n 5 "$work/many.log"
} 2>&1 | tee "$out/gpu-parallel.txt"

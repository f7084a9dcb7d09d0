#!/usr/bin/env bash
# The code regime at GPU scale (configs/sweep/code_gpu.yaml) in one call of under 10 minutes: RoPE and ALiBi trained
# at L = 256 (model=small, data=sympy) and their trained-long references at 4L = 1024 with the same steps and tokens
# per step, all at once on the one GPU, then one report over both. Which budgets and seeds run is set by STEPS and
# SEEDS (Hydra lists; the first sitting runs the curve at seed 0, the defaults: four budgets, about 490M tokens).
# Usage, from the project root (pe-bench importable, SymPy 1.14.0 installed: data=sympy refuses another version):
#   STEPS=1000,2000,4000,8000 SEEDS=0 TOTAL_S=560 bash scripts/gpu_code_regime.sh OUT_DIR
# PARALLEL (default 16) processes per sweep; EXTRA: more overrides for both sweeps. Ends within TOTAL_S seconds
# (default 560); writes OUT_DIR/session.log and OUT_DIR/code-gpu.tar.gz (the runs without checkpoints, the report,
# the logs; split into parts of 15 MiB, code-gpu.tar.gz.part-aa …, when larger). A second call on the same machine
# resumes: finished points are skipped, stopped ones resume from their checkpoint.
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
deadline=$((SECONDS + ${TOTAL_S:-560}))
left() { echo $((deadline - SECONDS - $1)); }  # seconds left once $1 are kept for what follows
out=$(realpath -m "${1:?usage: gpu_code_regime.sh OUT_DIR}")
steps=${STEPS:-1000,2000,4000,8000}
seeds=${SEEDS:-0}
parallel=${PARALLEL:-16}
read -r -a extra <<<"${EXTRA:-}"  # more overrides for both sweeps (a CPU smoke test: EXTRA="model=tiny ...")
work=${WORK:-/tmp/pe-code-gpu}
mkdir -p "$out" "$work/logs"
log="$out/session.log"
say() { echo "[$(date +%T)] $*" | tee -a "$log"; }
export TORCHINDUCTOR_COMPILE_THREADS=1  # many processes compile at once: no pool of 16 compile workers each

say "environment"
gpu_environment 2>&1 | tee -a "$log"
say "the corpus (data=sympy: SymPy 1.14.0's source, pinned by digest)"
load_corpus 120 data=sympy | tee -a "$log" || exit 2

say "steps $steps, seeds $seeds: short (L = 256) and trained-long (1024) points at once ($(left 90) s)"
timeout -k 30 "$(left 90)" python3 -m pe_bench sweep sweep=code_gpu "results_dir=$work/short" "train.steps=$steps" \
  "seed=$seeds" "${extra[@]}" --parallel "$parallel" --no-progress >>"$work/logs/short.log" 2>&1 &
short=$!
timeout -k 30 "$(left 90)" python3 -m pe_bench sweep sweep=code_gpu "results_dir=$work/long" "train.steps=$steps" \
  "seed=$seeds" train.seq_len=1024 train.batch_size=8 "${extra[@]}" --parallel "$parallel" --no-progress \
  >>"$work/logs/long.log" 2>&1 &
long=$!
watch_sweeps "$work" "$short" "$long" "$log"

say "report"
timeout "$(left 10)" python3 -m pe_bench report "$work/short/runs" "$work/long/runs" --out "$work/report" \
  >"$work/logs/report.log" 2>&1
say "report exit $?"
head -n 40 "$work/logs/report.log" | tee -a "$log"
tar -czf "$work/pack.tar.gz" -C "$work" --exclude='*.pt' short/runs long/runs report logs 2>/dev/null
if [ "$(stat -c %s "$work/pack.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15M "$work/pack.tar.gz" "$out/code-gpu.tar.gz.part-"  # cat the parts back together on the CPU side
else
  mv "$work/pack.tar.gz" "$out/code-gpu.tar.gz"
fi
say "done"

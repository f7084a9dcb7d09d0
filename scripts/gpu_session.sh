#!/usr/bin/env bash
# One sitting on a lent GPU machine, in one command of under 10 minutes (each stage under its own time limit):
#   1. scripts/bench_gpu.py alone on the GPU: FlexAttention's kernel options searched, every bias scheme's training
#      step and 8L forward on flex and SDPA ÷ NoPE's flash step, MFU by batch, a profile;
#   2. the WikiText-2 comparison (sweep=gpu_wikitext2: nine points at once on the one GPU), with the cuda-marked tests
#      beside it; then the learned and RoPE runs' eval-time rows, and the report.
# Usage, from the project root (pe-bench importable): bash scripts/gpu_session.sh OUT_DIR WIKITEXT2_RAW_DIR
# (the directory holds wiki.train.raw, wiki.valid.raw, wiki.test.raw). Writes OUT_DIR/session.log, the benchmark's
# gpu-bench.{csv,md} and gpu-profile.txt, and OUT_DIR/gpu-wikitext2.tar.gz (the runs without checkpoints, the report,
# every log). The whole sitting ends within TOTAL_S seconds (default 570): each stage's limit (BENCH_S, SWEEP_S,
# TESTS_S, EXTRA_S) is cut to what is left once the later stages' minimum is kept for them; 0 skips a stage.
# TEST_WORKERS: pytest-xdist processes for the cuda-marked tests (default 8).
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
deadline=$((SECONDS + ${TOTAL_S:-570}))
limit() { local left=$((deadline - SECONDS - $2)); echo $((left < $1 ? left : $1)); }  # limit WANTED RESERVED
runs() { [ "$1" -gt 15 ]; }  # a stage with 15 s or less left (or 0: skipped) does not start: `timeout 0` never ends
out=$(realpath -m "${1:?usage: gpu_session.sh OUT_DIR WIKITEXT2_RAW_DIR}")
data=$(realpath -m "${2:?usage: gpu_session.sh OUT_DIR WIKITEXT2_RAW_DIR}")
for f in wiki.train.raw wiki.valid.raw wiki.test.raw; do
  [ -f "$data/$f" ] || { echo "error: $data/$f is missing; give the folder of WikiText-2 raw's three files"; exit 2; }
done
work=${WORK:-/tmp/pe-gpu}  # kept on the machine: a later call on the same one can resume from it
mkdir -p "$out" "$work/logs"  # a second sitting on the same machine: finished points are skipped
log="$out/session.log"
say() { echo "[$(date +%T)] $*" | tee -a "$log"; }
files=(data.files.train="$data/wiki.train.raw" data.files.validation="$data/wiki.valid.raw"
       data.files.test="$data/wiki.test.raw")

say "environment"
gpu_environment 2>&1 | tee -a "$log"

bench_s=$(limit "${BENCH_S:-220}" 320)
if runs "$bench_s"; then
  say "1. bench_gpu.py (alone on the GPU)"
  timeout "$bench_s" python3 scripts/bench_gpu.py --out "$out" >"$work/logs/bench_gpu.log" 2>&1
  say "bench exit $?"
  grep -E "^\[|^\| |targets missed|Error" "$work/logs/bench_gpu.log" | tail -n 60 | tee -a "$log"
fi

say "2. the corpus tokenized once (BPE trained on the train split)"
tokenize_wikitext2 "$(limit 120 60)" "${files[@]}" | tee -a "$log"

sweep_s=$(limit "${SWEEP_S:-300}" 45)
runs "$sweep_s" || sweep_s=0
say "2. sweep=gpu_wikitext2, nine points at once ($sweep_s s); the cuda-marked tests beside it"
sweep=""
if runs "$sweep_s"; then  # `timeout` leads a process group of its own: the sweep and its runs
  timeout "$sweep_s" python3 -m pe_bench sweep sweep=gpu_wikitext2 "${files[@]}" "results_dir=$work/wt2" \
    --parallel 9 --no-progress >>"$work/logs/sweep.log" 2>&1 &
  sweep=$!
fi
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n ${TEST_WORKERS:-8}")  # 4 ran 56 tests in 240 s
tests_s=$(limit "${TESTS_S:-240}" 45)
if runs "$tests_s"; then
  timeout "$tests_s" python3 -m pytest -q -rf -p no:cacheprovider $workers -m cuda \
    tests/test_cuda.py >"$work/logs/cuda_tests.log" 2>&1
  say "cuda tests exit $?"
  tail -n 15 "$work/logs/cuda_tests.log" | tee -a "$log"
fi
if [ -n "$sweep" ]; then
  wait "$sweep"
  say "sweep exit $?"
  # Past its limit `timeout` signalled its process group: the runs save a checkpoint at their next step and stop
  for _ in $(seq 60); do pgrep -g "$sweep" >/dev/null || break; sleep 0.5; done
  pkill -KILL -g "$sweep" 2>/dev/null  # one still compiling when stopped has no step to stop at
fi
grep -E "trained|failed|diverged|wrote|Error|skipped" "$work/logs/sweep.log" | tail -n 30 | tee -a "$log"

for meta in "$work"/wt2/runs/*/meta.json; do
  [ -f "$meta" ] || continue
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(m.get('status'), m.get('train_seconds'), \
m.get('train_tokens_per_s'), m.get('final_val_loss'), sys.argv[1].split('/')[-2])" "$meta" | tee -a "$log"
done
pack() {  # the runs without checkpoints, the report, every log; written whole or not at all
  python3 -m pe_bench report "$work/wt2" --out "$work/wt2/gpu-wikitext2" --mode nonoverlapping \
    >"$work/logs/report.log" 2>&1
  say "report exit $?"
  tar -czf "$work/pack.tar.gz" -C "$work" --exclude='*.pt' wt2 logs 2>/dev/null && mv "$work/pack.tar.gz" "$out/gpu-wikitext2.tar.gz"
}
pack
head -n 40 "$work/logs/report.log" | tee -a "$log"

say "2. eval-time rows of the learned and RoPE runs (eval.variants=true)"
for run in "$work"/wt2/runs/learned-* "$work"/wt2/runs/rope-*; do
  [ -d "$run" ] && runs "$(limit "${EXTRA_S:-40}" 25)" || continue
  timeout "$(limit "${EXTRA_S:-40}" 25)" python3 -m pe_bench eval "$run" eval.variants=true --no-progress \
    >>"$work/logs/variants.log" 2>&1
  rc=$?
  say "variants of ${run##*/} exit $rc"
done
pack
say "done"

#!/usr/bin/env bash
# The GPU WikiText-2 comparison at three seeds beside its trained-long reference, in one call of under 10 minutes:
#   - sweep=gpu_wikitext2: nine schemes × seeds 0, 1, 2 at L = 512 (27 points);
#   - the trained-long reference: NoPE, RoPE and ALiBi × seeds 0, 1, 2 trained at 4096 (8L) with the same token
#     budget (500 steps × 4 × 4096 tokens) and evaluated at 4096 with the short runs' sliding stride (S = 128);
#   all 36 at once on the one GPU; then seed 0's eval-time rows (learned, rope) and one report over both.
# Usage, from the project root (pe-bench importable): bash scripts/gpu_wikitext2_seeds.sh OUT_DIR WIKITEXT2_RAW_DIR
# (the folder holds wiki.train.raw, wiki.valid.raw, wiki.test.raw). Ends within TOTAL_S seconds (default 570);
# writes OUT_DIR/session.log and OUT_DIR/gpu-wikitext2.tar.gz (the runs without checkpoints, the report, the logs).
# A second call on the same machine resumes: finished points are skipped, stopped ones resume from their checkpoint.
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
deadline=$((SECONDS + ${TOTAL_S:-570}))
left() { echo $((deadline - SECONDS - $1)); }  # seconds left once $1 are kept for what follows
out=$(realpath -m "${1:?usage: gpu_wikitext2_seeds.sh OUT_DIR WIKITEXT2_RAW_DIR}")
data=$(realpath -m "${2:?usage: gpu_wikitext2_seeds.sh OUT_DIR WIKITEXT2_RAW_DIR}")
for f in wiki.train.raw wiki.valid.raw wiki.test.raw; do
  [ -f "$data/$f" ] || { echo "error: $data/$f is missing; give the folder of WikiText-2 raw's three files"; exit 2; }
done
work=${WORK:-/tmp/pe-gpu2}
mkdir -p "$out" "$work/logs"
log="$out/session.log"
say() { echo "[$(date +%T)] $*" | tee -a "$log"; }
files=(data.files.train="$data/wiki.train.raw" data.files.validation="$data/wiki.valid.raw"
       data.files.test="$data/wiki.test.raw")
export TORCHINDUCTOR_COMPILE_THREADS=1  # 36 processes compile at once: no pool of 16 compile workers each

say "environment"
gpu_environment 2>&1 | tee -a "$log"

say "the corpus tokenized once (BPE of 8192 trained on the train split)"
tokenize_wikitext2 120 "${files[@]}" | tee -a "$log"

say "27 short points and 9 trained-long references at once ($(left 100) s)"
timeout "$(left 100)" python3 -m pe_bench sweep sweep=gpu_wikitext2 "${files[@]}" "results_dir=$work/short" \
  --parallel 27 --no-progress >>"$work/logs/short.log" 2>&1 &
short=$!
timeout "$(left 100)" python3 -m pe_bench sweep sweep=gpu_wikitext2 "${files[@]}" "results_dir=$work/long" \
  scheme=nope,rope,alibi train.seq_len=4096 train.batch_size=4 "eval.lengths=[4096]" eval.stride=128 \
  --parallel 9 --no-progress >>"$work/logs/long.log" 2>&1 &
long=$!
watch_sweeps "$work" "$short" "$long" "$log"

if [ "$(left 60)" -gt 20 ]; then
  say "seed 0's eval-time rows: learned and rope (eval.variants=true, $(left 60) s)"
  for run in "$work"/short/runs/learned-*-s0-* "$work"/short/runs/rope-*-s0-*; do
    [ -f "$run/eval.csv" ] || continue
    timeout "$(left 60)" python3 -m pe_bench eval "$run" eval.variants=true --no-progress \
      >>"$work/logs/variants.log" 2>&1 &
  done
  wait
  say "variants done"; tail -n 5 "$work/logs/variants.log" | tee -a "$log"
fi

say "report"
timeout "$(left 8)" python3 -m pe_bench report "$work/short/runs" "$work/long/runs" --out "$work/report" \
  >"$work/logs/report.log" 2>&1
say "report exit $?"
head -n 30 "$work/logs/report.log" | tee -a "$log"
tar -czf "$work/pack.tar.gz" -C "$work" --exclude='*.pt' short/runs long/runs report logs 2>/dev/null \
  && mv "$work/pack.tar.gz" "$out/gpu-wikitext2.tar.gz"
say "done"

# Shared steps of the GPU scripts (gpu_check.sh, gpu_session.sh, gpu_wikitext2_seeds.sh, gpu_code_regime.sh);
# sourced, never run. They write to stdout and the caller tees them into its log, except watch_sweeps (see there).

gpu_environment() {  # the device, torch and CUDA, and which code (commit and changes, the runs' windows.csv left out)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  git rev-parse HEAD 2>/dev/null
  git status --short 2>/dev/null | grep -v windows.csv | head -n 20
}

load_corpus() {  # load_corpus LIMIT_S OVERRIDE...: the corpus those data overrides pick, loaded (and cached) once
  timeout "$1" python3 - "${@:2}" <<'PY' 2>&1 | tail -n 3
import sys
from pe_bench.config import compose
from pe_bench.data import load_tokens
cfg = compose(sys.argv[1:])
c = load_tokens(cfg.data, cfg.cache_dir)
print({k: len(v) for k, v in c.splits.items()}, "tokens; vocab", c.vocab_size)
PY
}

tokenize_wikitext2() {  # tokenize_wikitext2 LIMIT_S data.files.*=...: the BPE of 8192 trained once, the splits cached
  load_corpus "$1" data=local data.tokenizer=bpe data.vocab_size=8192 "${@:2}"
}

restore_windows() {  # the committed runs' windows.csv from .gpuwin.tar.xz (scripts/gpu_prepare.sh), where they are missing
  [ -f .gpuwin.tar.xz ] || { echo "no .gpuwin.tar.xz: tests that read the committed runs' windows.csv will fail"; return 0; }
  python3 -c "import tarfile; t = tarfile.open('.gpuwin.tar.xz'); t.extractall(filter='data'); print(len(t.getnames()), 'windows.csv files unpacked')"
}

watch_sweeps() {  # watch_sweeps WORK SHORT_PID LONG_PID LOG: the sweeps of WORK/short and WORK/long (started in the
  # background by the caller, each under `timeout`) watched until both end, then their exit codes, their process
  # groups stopped, what failed and every run's meta line, all appended to LOG. Not piped: `wait` needs the caller's
  # shell.
  local work=$1 short=$2 long=$3 log=$4 g meta
  while kill -0 "$short" 2>/dev/null || kill -0 "$long" 2>/dev/null; do
    sleep 20
    echo "[$(date +%T)] evaluated: $(ls "$work"/short/runs/*/eval.csv 2>/dev/null | wc -l) short, \
$(ls "$work"/long/runs/*/eval.csv 2>/dev/null | wc -l) long; GPU $(nvidia-smi --query-gpu=utilization.gpu,memory.used \
--format=csv,noheader 2>/dev/null)" | tee -a "$log"
  done
  wait "$short"; echo "[$(date +%T)] short sweep exit $?" | tee -a "$log"
  wait "$long"; echo "[$(date +%T)] long sweep exit $?" | tee -a "$log"
  for g in "$short" "$long"; do  # past its limit `timeout` signalled its group: runs checkpoint at their next step
    for _ in $(seq 40); do pgrep -g "$g" >/dev/null || break; sleep 0.5; done
    pkill -KILL -g "$g" 2>/dev/null
  done
  grep -hE "failed|diverged|Error|skipped" "$work"/logs/short.log "$work"/logs/long.log | tail -n 20 | tee -a "$log"
  for meta in "$work"/short/runs/*/meta.json "$work"/long/runs/*/meta.json; do
    [ -f "$meta" ] || continue
    python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(m.get('status'), m.get('train_seconds'), \
m.get('train_tokens_per_s'), m.get('eval_seconds'), m.get('final_val_loss'), sys.argv[1].split('/')[-2])" "$meta" \
      | tee -a "$log"
  done
}

# Shared steps of the GPU scripts (gpu_check.sh, gpu_session.sh, gpu_wikitext2_seeds.sh); sourced, never run.
# Both write to stdout; the caller tees them into its log.

gpu_environment() {  # the device, torch and CUDA, and which code (commit and changes, the runs' windows.csv left out)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  git rev-parse HEAD 2>/dev/null
  git status --short 2>/dev/null | grep -v windows.csv | head -n 20
}

tokenize_wikitext2() {  # tokenize_wikitext2 LIMIT_S data.files.*=...: the BPE of 8192 trained once, the splits cached
  timeout "$1" python3 - "${@:2}" <<'PY' 2>&1 | tail -n 3
import sys
from pe_bench.config import compose
from pe_bench.data import load_tokens
cfg = compose(["data=local", "data.tokenizer=bpe", "data.vocab_size=8192", *sys.argv[1:]])
c = load_tokens(cfg.data, cfg.cache_dir)
print({k: len(v) for k, v in c.splits.items()}, "tokens; vocab", c.vocab_size)
PY
}

restore_windows() {  # the committed runs' windows.csv from .gpuwin.tar.xz (scripts/gpu_prepare.sh), where they are missing
  [ -f .gpuwin.tar.xz ] || { echo "no .gpuwin.tar.xz: tests that read the committed runs' windows.csv will fail"; return 0; }
  python3 -c "import tarfile; t = tarfile.open('.gpuwin.tar.xz'); t.extractall(filter='data'); print(len(t.getnames()), 'windows.csv files unpacked')"
}

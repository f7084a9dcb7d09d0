"""How long every `train=smoke` command takes end to end (a new process, import to exit), against the 15 s it
should stay under on a quiet machine: `pe-bench train scheme=X train=smoke` for every registered scheme,
`pe-bench train task=T scheme=rope train=smoke` for every synthetic task, and a one-point smoke sweep.

    python scripts/bench_smoke.py results/benchmarks/smoke-<date>.md

Each command runs in a fresh results directory, after one warm-up command that fills the data cache. The table
names every command over the target; the exit status is 1 when any is (a benchmark, never a test).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 15.0


def commands() -> list[list[str]]:
    from pe_bench import schemes, tasks

    out = [["train", f"scheme={s}", "train=smoke"] for s in schemes.available()]
    out += [["train", f"task={t}", "scheme=rope", "train=smoke"] for t in tasks.names() if t != tasks.DEFAULT]
    out.append(["sweep", "scheme=nope", "train=smoke", "seed=0"])
    return out


def timed(args: list[str], results: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pe_bench", *args, f"results_dir={results}", "--no-progress"],
                       capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
    return time.perf_counter() - t0, p.returncode


def main(out: Path) -> int:
    import torch

    rows, missed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        timed(["train", "scheme=nope", "train=smoke"], Path(tmp) / "warm")  # the data cache, filled once
        for i, args in enumerate(commands()):
            seconds, rc = timed(args, Path(tmp) / f"r{i}")
            over = seconds > TARGET_S or rc != 0
            missed += over
            rows.append(f"| `pe-bench {' '.join(args)}` | {seconds:.1f} | {'exit ' + str(rc) if rc else ''}"
                        f"{'**over**' if over and not rc else ''} |")
            print(rows[-1], flush=True)
    head = [f"# `train=smoke` end to end, {time.strftime('%Y-%m-%d')}", "",
            f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
            f" (the CPU); command: `python scripts/bench_smoke.py {out}`. Wall seconds of a new process, import to "
            f"exit, each in a fresh results directory with the data cache warm. Target: under {TARGET_S:g} s each.",
            "", f"{len(rows) - missed} of {len(rows)} commands within the target.", "",
            "| command | seconds | |", "|---|---:|---|"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(head + rows) + "\n", encoding="utf-8")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("results/benchmarks/smoke.md")))

"""How fast the CLI answers when it needs no model: help, `schemes`, `--version`, `--cfg` and a configuration
error, each timed side by side with `python -c pass` (the interpreter's own start-up) and with `import torch`, in
interleaved rounds so that machine noise hits all alike. Target: every command well under a second, i.e. without
importing torch (tests/test_daily_use.py asserts the no-torch part; this script measures the time).

    python scripts/bench_cli_startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "python -c 'import torch'": ["-c", "import torch"],
    "pe-bench --help": ["-m", "pe_bench", "--help"],
    "pe-bench --version": ["-m", "pe_bench", "--version"],
    "pe-bench schemes": ["-m", "pe_bench", "schemes"],
    "pe-bench train --cfg scheme=rope": ["-m", "pe_bench", "train", "--cfg", "scheme=rope"],
    "pe-bench train model.n_layer=2 (error)": ["-m", "pe_bench", "train", "model.n_layer=2"],
    "pe-bench train scheme rope (hint)": ["-m", "pe_bench", "train", "scheme", "rope"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for _ in range(args.rounds):
        for name, argv in COMMANDS.items():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, *argv], capture_output=True, check=False)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["python -c pass"])
    print(f"median of {args.rounds} interleaved rounds ({sys.executable}, {sys.version.split()[0]})")
    print(f"{'command':<42} {'seconds':>8} {'minus python start-up':>22}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<42} {m:8.3f} {m - base:22.3f}")


if __name__ == "__main__":
    main()

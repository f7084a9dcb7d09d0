"""Does a change of the code change a number? Trains the same runs with two versions of pe-bench on this machine and
compares what they wrote, file by file: eval.csv, positions.csv and windows.csv byte for byte, train.csv without its
timing columns (tokens_per_s, elapsed_s: wall-clock measurements), and the run names.

    .venv/bin/python scripts/same_numbers.py --base 074aa87                    # alibi and t5 of the main job
    .venv/bin/python scripts/same_numbers.py --base main scheme=rope train=smoke   # any one run

The base version is checked out with `git worktree` into a temporary directory; each version trains in its own
process (PYTHONPATH pointing at its sources), one thread, in its own results directory. Exit status 1 if any file
differs.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("tokens_per_s", "elapsed_s")
COMPARED = ("eval.csv", "positions.csv", "windows.csv", "accuracy.csv")
MAIN_JOB = (["scheme=alibi"], ["scheme=t5"])  # configs/sweep/paper.yaml's points: the defaults, seed 0


def train(source: Path, results: Path, overrides: list[str]) -> Path:
    """Train one run with the pe-bench at ``source``; its run directory."""
    env = {**os.environ, "PYTHONPATH": str(source), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pe_bench", "train", *overrides, f"results_dir={results}", "train.threads=1",
           "--no-progress"]
    r = subprocess.run(cmd, cwd=source, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"training failed with {source}: {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    [run] = (results / "runs").iterdir()
    return run


def train_rows(path: Path) -> str:
    """train.csv without its timing columns, as CSV text."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    columns = [c for c in rows[0] if c not in TIMING]
    out = io.StringIO()
    w = csv.DictWriter(out, columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def differences(a: Path, b: Path) -> list[str]:
    out = [] if a.name == b.name else [f"run names differ: {a.name} vs {b.name}"]
    if train_rows(a / "train.csv") != train_rows(b / "train.csv"):
        out.append("train.csv (losses, learning rates) differs")
    for name in COMPARED:
        if (a / name).exists() != (b / name).exists():
            out.append(f"{name} exists in one run only")
        elif (a / name).exists() and (a / name).read_bytes() != (b / name).read_bytes():
            out.append(f"{name} differs")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the git ref to compare this checkout with, e.g. main or a hash")
    p.add_argument("overrides", nargs="*", help="one run's overrides (default: alibi and t5 of the main job)")
    args = p.parse_args()
    points = [args.overrides] if args.overrides else [list(o) for o in MAIN_JOB]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    failed = False
    with tempfile.TemporaryDirectory(prefix="same-numbers-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base], check=True,
                       capture_output=True)
        try:
            for i, overrides in enumerate(points):
                a = train(base, Path(tmp) / f"a{i}", overrides)
                b = train(ROOT, Path(tmp) / f"b{i}", overrides)
                diff = differences(a, b)
                failed |= bool(diff)
                verdict = "; ".join(diff) if diff else "identical (eval, positions, windows; train.csv losses)"
                print(f"{' '.join(overrides)}: {a.name}: {args.base} vs {head} (working tree): {verdict}")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""pe-bench command line: train, finetune, eval, analyze, sweep, report, runs, schemes — one module per command, each
thin: parse, compose, call, print. ``app`` is the typer application, ``main`` the console script."""

from __future__ import annotations

import os
import sys


def _search_path_from_argv(argv: list[str]) -> None:
    """``pe-bench --path DIR [--path DIR2] COMMAND ...``: the directories join PE_BENCH_PATH before anything reads the
    scheme and task registries or the task options (pe_bench.plugins), and so reach every process the command
    starts (a sweep's runs, a Slurm array's tasks)."""
    dirs, i = [], 1
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "--path" and i + 1 < len(argv):
            dirs.append(argv[i + 1])
            i += 1
        elif argv[i].startswith("--path="):
            dirs.append(argv[i].split("=", 1)[1])
        i += 1
    if dirs:
        before = os.environ.get("PE_BENCH_PATH", "")
        os.environ["PE_BENCH_PATH"] = os.pathsep.join([str(os.path.abspath(d)) for d in dirs] + [before] * bool(before))


READS_RUNS = ("runs", "report", "eval", "analyze")  # the commands whose arguments are run or results directories


def _recorded_plugins(argv: list[str]) -> None:
    """A command that reads runs made with a search-path plugin loads the plugin from the directory the run
    recorded (meta.json), when it still exists and is not on the search path: one line says so."""
    import glob
    from pathlib import Path

    from pe_bench.plugins import ENV, recorded_dirs

    words = [w for w in argv[1:] if not w.startswith("-")]
    command = next((w for w in words if w in READS_RUNS), None)
    if command is None:
        return
    run_dirs: list[Path] = []
    for w in words[words.index(command) + 1:]:
        for p in map(Path, sorted(glob.glob(w)) or [w]):
            run_dirs += [p] if (p / "meta.json").is_file() else [d.parent for d in sorted(
                (p / "runs" if (p / "runs").is_dir() else p).glob("*/meta.json"))] if p.is_dir() else []
    found = recorded_dirs(run_dirs)
    for where, run in found.items():
        print(f"loading plugins from {where}, where {run} recorded its plugin (pass --path to choose)",
              file=sys.stderr)
    if found:
        before = os.environ.get(ENV, "")
        os.environ[ENV] = os.pathsep.join([str(d) for d in found] + [before] * bool(before))


_search_path_from_argv(sys.argv)
_recorded_plugins(sys.argv)

# The command modules register their commands on the app when imported, in the order `pe-bench --help` lists them.
from pe_bench.cli import train, evaluate, analyze, sweep, report, runs, schemes  # noqa: F401, I001
from pe_bench.cli.app import app, error, say, warn

__all__ = ["app", "error", "main", "say", "warn"]


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())

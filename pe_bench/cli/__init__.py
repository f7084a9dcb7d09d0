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


_search_path_from_argv(sys.argv)

# The command modules register their commands on the app when imported, in the order `pe-bench --help` lists them.
from pe_bench.cli import train, evaluate, analyze, sweep, report, runs, schemes, export  # noqa: F401, I001
from pe_bench.cli.app import app, error, say, warn

__all__ = ["app", "error", "main", "say", "warn"]


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())

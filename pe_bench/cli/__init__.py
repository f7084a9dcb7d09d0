"""pe-bench command line: train, finetune, eval, analyze, sweep, report, runs, schemes — one module per command, each
thin: parse, compose, call, print. ``app`` is the typer application, ``main`` the console script."""

from __future__ import annotations

import sys

# The command modules register their commands on the app when imported, in the order `pe-bench --help` lists them.
from pe_bench.cli import train, evaluate, analyze, sweep, report, runs, schemes  # noqa: F401, I001
from pe_bench.cli.app import app, error, say, warn

__all__ = ["app", "error", "main", "say", "warn"]


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())

"""`pe-bench schemes`: the registered positional schemes."""

from __future__ import annotations

import typer

from pe_bench import schemes
from pe_bench.cli.app import app


@app.command("schemes")
def list_schemes() -> None:
    """List the registered positional schemes, one line each: name, where it acts, what it is, citation
    (scheme=NAME picks one; configs/scheme/NAME.yaml holds its options)."""
    width = max(len(n) for n in schemes.catalog())
    for entry in schemes.catalog().values():
        where = "+".join(entry.acts_on) or "-"
        typer.echo(f"{entry.name:<{width}} {where:<14} {entry.description}  [{entry.citation}]")

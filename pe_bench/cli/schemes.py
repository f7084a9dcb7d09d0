"""`pe-bench schemes`: the registered positional schemes (and, with --variants, their eval-time rows)."""

from __future__ import annotations

from typing import Any

import typer

from pe_bench import plugins, schemes
from pe_bench.cli.app import app, warn
from pe_bench.config import preset_path


@app.command("schemes")
def list_schemes(variants: bool = typer.Option(
        False, "--variants", help="Under each scheme, the eval-time rows every run of it is also evaluated with "
                                  "(its YAML's eval_variants), as the overrides that give one: "
                                  "`pe-bench eval RUN <overrides>`.")) -> None:
    """List the registered positional schemes, one line each: name, where it acts, what it is, citation
    (scheme=NAME picks one; configs/scheme/NAME.yaml holds its options)."""
    width = max(len(n) for n in schemes.catalog())
    for entry in schemes.catalog().values():
        where = "+".join(entry.acts_on) or "-"
        typer.echo(f"{entry.name:<{width}} {where:<14} {entry.description}  [{entry.citation}]")
        if variants:
            for variant in _eval_variants(entry.name):
                typer.echo(f"{'':<{width}}   + " + " ".join(f"scheme.{k}={_word(v)}" for k, v in _flat(variant)))
    for problem in plugins.PROBLEMS:
        warn(f"left out: {problem}")


def _eval_variants(name: str) -> list[dict[str, Any]]:
    """The eval_variants of configs/scheme/<name>.yaml (plugins without a preset: none); read without torch."""
    import yaml

    path = preset_path("scheme", name)
    if not path.is_file():  # a plugin scheme may ship no preset: it declares no variants then
        return []
    return list((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("eval_variants") or [])


def _flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        out.extend(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else [(f"{prefix}{k}", v)])
    return out


def _word(v: Any) -> str:
    """A value as an override writes it (true, not True)."""
    return str(v).lower() if isinstance(v, bool) else str(v)

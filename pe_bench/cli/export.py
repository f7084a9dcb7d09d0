"""`pe-bench export`: a trained run as a Hugging Face checkpoint (pe_bench.pretrained.export)."""

from __future__ import annotations

from pathlib import Path

import typer

from pe_bench.cli.app import app, friendly, say
from pe_bench.config import ConfigError


@app.command()
@friendly
def export(run_dir: Path = typer.Argument(..., help="A finished run directory (results/runs/<name>)."),
           out: Path = typer.Argument(..., help="The checkpoint directory to write (new, empty, or an earlier export)."),
           positions: int | None = typer.Option(None, "--positions", min=1, help="gpt2 exports: rows of the position "
                                                "table (default: a learned table's own, 8L for sinusoidal).")) -> None:
    """Write a trained run as a transformers checkpoint with its byte tokenizer, where an architecture computes the
    same function: RoPE and NoPE as gpt_neox, learned and sinusoidal positions as gpt2 (docs/pretrained.md). The
    exported logits are checked against pe-bench's on a probe before anything is written."""
    from pe_bench.pretrained.export import check_destination, export_run
    from pe_bench.runs import Run, Status

    run = Run(run_dir)
    if not run.config.exists() or not run.checkpoint.exists():
        raise ConfigError(f"{run_dir} is not a trained run directory (needs config.yaml and checkpoint.pt); train "
                          "one with `pe-bench train`")
    if run.meta().status != Status.DONE:
        raise ConfigError(f"{run_dir} is not finished (status {run.meta().status}); finish it with its `pe-bench "
                          "train` command first")
    check_destination(out)
    got = export_run(run, out, positions)
    where = f", {got['positions']} positions" if got["positions"] else ""
    say(f"wrote {out}: {got['architecture']}{where}; max |logit difference| from pe-bench on the probe "
        f"{got['gap']:.1e}")

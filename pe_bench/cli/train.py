"""`pe-bench train` and `pe-bench finetune`: one run, trained and evaluated."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from pe_bench.cli.app import OVERRIDES_HELP, app, friendly, presets_help, say, set_verbose, verbose_option, warn
from pe_bench.cli.output import print_run_table
from pe_bench.config import to_yaml
from pe_bench.finetune import compose_run


@app.command(epilog=presets_help())
@friendly
def train(overrides: list[str] | None = typer.Argument(None, metavar="KEY=VALUE", help=OVERRIDES_HELP),
          progress: bool = typer.Option(True, help="Show the progress bar (off: plain log lines)."),
          cfg_only: bool = typer.Option(False, "--cfg", help="Print the resolved config (YAML) and the run "
                                        "directory, then exit; runs nothing."),
          verbose: bool = verbose_option()) -> None:
    """Train one run and evaluate it at every eval length (resumes from its checkpoint if interrupted)."""
    set_verbose(verbose)
    _train(overrides or [], progress, cfg_only)


@app.command()
@friendly
def finetune(run_dir: Path = typer.Argument(..., help="The parent: a finished run directory (results/runs/<name>)."),
             overrides: list[str] | None = typer.Argument(None, metavar="KEY=VALUE",
                                                         help="train.*, eval.*, the scheme's eval-time options "
                                                         "(scheme.scaling.*), finetune.new_positions."),
             progress: bool = typer.Option(True, help="Show the progress bar (off: plain log lines)."),
             cfg_only: bool = typer.Option(False, "--cfg", help="Print the resolved config (YAML) and the run "
                                           "directory, then exit; runs nothing."),
             verbose: bool = verbose_option()) -> None:
    """Fine-tune a finished run from its final weights, e.g. at 8L with YaRN: `pe-bench finetune RUN_DIR
    train.seq_len=512 train.steps=200 scheme.scaling.type=yarn scheme.scaling.factor=8`, or with PoSE at the
    parent's L: `train.seq_len=64 train.batch_size=32 train.pose_target=512`. The recipe is train=finetune (4 × 512
    tokens per step, 100 steps, lr 5e-4) unless overridden; the new run lies beside its parent, named after it, and is
    evaluated at its parent's eval lengths and its own L unless eval.* says otherwise (`pe-bench train
    finetune.from_run=RUN_DIR ...` is the same)."""
    from pe_bench.config import hydra_quoted

    set_verbose(verbose)
    _train([f"finetune.from_run={hydra_quoted(str(run_dir))}", *(overrides or [])], progress, cfg_only)


def _train(overrides: list[str], progress: bool, cfg_only: bool) -> None:
    cfg = compose_run(overrides, scheme=False)  # configuration errors first, before torch is imported
    if cfg.finetune.from_run:
        from pe_bench.finetune import warmup_warning

        if line := warmup_warning(cfg):
            warn(line)
    from pe_bench.config import check_scheme

    if cfg_only:
        from pe_bench.device import check_compile

        check_scheme(cfg)  # --cfg refuses what training refuses
        check_compile(cfg.train)
        _print_cfg(cfg)
        return
    from pe_bench.distributed import stop_on_signals
    from pe_bench.experiment import run_one

    check_scheme(cfg)  # the scheme's options, built once for the model's shape
    stop_on_signals()  # SIGTERM/SIGUSR1 (kill, Slurm near its time limit): checkpoint at the next step, exit 3
    run = run_one(cfg, progress=progress)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 reports for the run
        return
    print_run_table(run.path, cfg.eval.split)
    meta = run.meta()
    say(f"run: {run.path}  ({meta.train_tokens_per_s or 0:,.0f} tok/s train)")


def _print_cfg(cfg) -> None:
    """The resolved config as YAML (valid YAML: the run directory is a comment)."""
    from pe_bench.runs import run_dir_for

    typer.echo(to_yaml(cfg).rstrip())
    typer.echo(f"# run directory: {run_dir_for(cfg)}")

"""`pe-bench eval`: a trained run evaluated again, at other lengths or with eval-time scheme options."""

from __future__ import annotations

from pathlib import Path

import typer

from pe_bench import tasks
from pe_bench.cli.app import app, friendly, say, set_verbose, verbose_option
from pe_bench.cli.output import print_run_table
from pe_bench.config import ConfigError, apply_overrides, to_yaml


def trained_run(run_dir: Path, overrides: list[str] | None):
    """(run, the config it was trained with, that config with eval.* and eval-time scheme overrides) of a trained
    run directory; anything else is one ConfigError line."""
    from pe_bench.runs import Run, RunBusy

    run = Run(run_dir)
    if run.config.exists() and not run.checkpoint.exists() and run.is_locked():  # training, before its first one
        raise RunBusy(f"{run_dir} is being trained by another process and has no checkpoint yet")
    if not run.config.exists() or not run.checkpoint.exists():
        raise ConfigError(f"{run_dir} is not a trained run directory (needs config.yaml and checkpoint.pt); "
                          "train one with `pe-bench train`")
    saved = run.load_config()
    return run, saved, apply_overrides(saved, overrides or [], allowed=("eval", "scheme", "attention"))


def is_checkpoint(run_dir: Path) -> bool:
    """A Hugging Face checkpoint directory (config.json, no config.yaml), or a hub id (refused downstream)."""
    if (run_dir / "config.yaml").exists():
        return False
    return (run_dir / "config.json").exists() or (not run_dir.exists() and str(run_dir).count("/") == 1)


@app.command("eval")
@friendly
def eval_cmd(run_dir: Path = typer.Argument(..., help="A run directory (results/runs/<name>), or a local Hugging "
                                            "Face checkpoint directory (docs/pretrained.md)."),
             overrides: list[str] | None = typer.Argument(
                 None, metavar="KEY=VALUE",
                 help="eval.* overrides and the scheme's eval-time options, e.g. eval.lengths=[64,1024] "
                      "scheme.scaling.type=yarn scheme.scaling.factor=8"),
             partial: bool = typer.Option(False, "--partial", help="Evaluate an unfinished run's last checkpoint; "
                                          "every row records the step its weights come from."),
             progress: bool = typer.Option(True, help="Show the progress bars (off: plain log lines)."),
             cfg_only: bool = typer.Option(False, "--cfg", help="Print the config the evaluation would use (the "
                                           "run's, with these overrides) and exit."),
             context: int | None = typer.Option(None, "--context", min=1, help="A checkpoint's training length L "
                                                "(default: its config's max_position_embeddings)."),
             verbose: bool = verbose_option()) -> None:
    """Re-evaluate a saved run at other lengths or with eval-time scheme options (RoPE context extension, the
    learned table's policy), without retraining. Rows are added to the run's eval.csv under the variant's label,
    beside rows of other evaluation settings. Given a Hugging Face checkpoint directory instead, evaluate it at its
    context L × eval.ratios on a pe-bench corpus with its own tokenizer, writing a run directory under
    <results_dir>/pretrained/."""
    set_verbose(verbose)
    if is_checkpoint(run_dir):
        _eval_checkpoint(run_dir, overrides or [], context, progress, cfg_only)
        return
    if context is not None:
        raise ConfigError(f"--context is for a Hugging Face checkpoint; {run_dir} is a run directory, whose L is "
                          "its train.seq_len")
    run, saved, cfg = trained_run(run_dir, overrides)
    if cfg_only:
        typer.echo(to_yaml(cfg).rstrip())
        return
    from pe_bench.distributed import stop_on_signals
    from pe_bench.experiment import check_eval_overrides, check_same_run, evaluate_run, pin_threads
    from pe_bench.runs import Status

    check_eval_overrides(saved, cfg)
    pin_threads(saved)
    if any(o.lstrip("+~").startswith("scheme") and not o.lstrip("+~").startswith("scheme.eval_variants")
           for o in overrides or []):
        cfg.eval.variants = False  # the user asked for one variant (e.g. rope+yarn×8): evaluate just that one
    stop_on_signals()  # SIGTERM/SIGUSR1: stop before the next length, exit 3, as during train
    with run.lock():  # a run being trained (or evaluated) by another process is left alone: exit 4
        meta = run.meta()
        if meta.status != Status.DONE and not partial:
            at = meta.checkpoint_step
            where = f", checkpoint at step {at} of {saved.train.steps}" if at is not None else ""
            raise ConfigError(f"{run_dir} is not finished (status {meta.status}{where}): finish it "
                              "with its `pe-bench train` command, or pass --partial to evaluate the checkpoint as "
                              "it is (each row records its step)")
        check_same_run(run, saved)
        evaluate_run(run, cfg, trained=saved, progress=progress)
    print_run_table(run.path, cfg.eval.split)
    say(f"updated {run.eval_csv if tasks.get(saved.task.name).metric == 'perplexity' else run.accuracy_csv}")


def _eval_checkpoint(path: Path, overrides: list[str], context: int | None, progress: bool, cfg_only: bool) -> None:
    """`pe-bench eval` of a local Hugging Face checkpoint directory: its config (--cfg), or its evaluation."""
    from pe_bench.distributed import stop_on_signals
    from pe_bench.pretrained.checkpoint import open_checkpoint
    from pe_bench.pretrained.evaluate import checkpoint_config, evaluate_checkpoint

    if cfg_only:
        typer.echo(to_yaml(checkpoint_config(open_checkpoint(path, context), overrides)).rstrip())
        return
    stop_on_signals()
    run = evaluate_checkpoint(path, overrides, context, progress)
    done = run.load_config()
    print_run_table(run.path, done.eval.split)
    say(f"updated {run.eval_csv if tasks.get(done.task.name).metric == 'perplexity' else run.accuracy_csv}")

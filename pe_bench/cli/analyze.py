"""`pe-bench analyze`: attention statistics of a trained run by query position, at every eval length."""

from __future__ import annotations

from pathlib import Path

import typer

from pe_bench.cli.app import app, friendly, say, warn
from pe_bench.cli.evaluate import trained_run


@app.command()
@friendly
def analyze(run_dir: Path = typer.Argument(..., help="A run directory (results/runs/<name>), any task."),
            overrides: list[str] | None = typer.Argument(
                None, metavar="KEY=VALUE", help="eval.* overrides (e.g. eval.lengths=[64,512]) and the scheme's "
                "eval-time options (e.g. scheme.scaling.type=yarn scheme.scaling.factor=8)"),
            examples: int = typer.Option(16, min=1, help="Inputs per length: text windows or held-out examples."),
            buckets: int = typer.Option(32, min=1, help="Query-position buckets per length."),
            out: Path | None = typer.Option(None, help="Where attention.csv/.png go (default: RUN_DIR/analysis).")
            ) -> None:
    """Attention diagnostics at every eval length: per layer and head, attention entropy, mean attended distance
    and the mass on the first token, by query position — e.g. whether a scheme's heads go diffuse past L. Writes
    attention.csv and attention.png."""
    run, saved, cfg = trained_run(run_dir, overrides)
    from pe_bench.evaluate.attention_stats import analyze as attention_stats
    from pe_bench.evaluate.attention_stats import default_title, summary_lines
    from pe_bench.publish import write_analysis
    from pe_bench.build import build_scheme
    from pe_bench.config import scheme_spec
    from pe_bench.device import resolve_device
    from pe_bench.config import reference_length, run_lengths
    from pe_bench.data import load_data
    from pe_bench.experiment import check_eval_overrides, check_same_run
    from pe_bench.runs import Status
    from pe_bench.train import load_trained

    check_eval_overrides(saved, cfg)
    check_same_run(run, saved)
    if run.meta().status != Status.DONE:
        warn(f"{run_dir} is not finished: analysing its last checkpoint")
    device = resolve_device(cfg.train.device)
    data = load_data(cfg)
    spec = scheme_spec(cfg.scheme)
    model, step = load_trained(run, cfg, device, spec, data, saved)
    rows = attention_stats(model, cfg, data, device, examples, buckets, step)
    label = build_scheme(cfg, spec).label()
    suffix = "" if label == saved.scheme["name"] else "-" + "".join(c if c.isalnum() else "_" for c in label)
    made_at = {"step": step, "steps": saved.train.steps, "run_status": run.meta().status.value}
    written = write_analysis(rows, out or run.path / f"analysis{suffix}",
                             default_title(cfg, label, max(run_lengths(cfg))) + (
                                 f" (step {step}/{saved.train.steps})" if step != saved.train.steps else ""), made_at)
    for line in summary_lines(rows, reference_length(cfg)):
        say(line)
    for p in written:
        say(f"wrote {p}")

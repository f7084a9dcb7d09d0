"""A report directory written whole: the tables (pe_bench.report, pe_bench.evaluate.attention_stats) and, with matplotlib, the figures (pe_bench.plots). Tables and figures are written in a staging folder inside the output
directory and moved into place once all of them are written: a report that fails (disk full, a crash) leaves the
previous one whole."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from pe_bench import markdown
from pe_bench import plots as figures
from pe_bench.evaluate.attention_stats import write_analysis_files
from pe_bench.report.accuracy import write_accuracy_files
from pe_bench.report.collect import Accuracy, Collected
from pe_bench.report.extension import extension_table, write_extension
from pe_bench.report.files import replace_together
from pe_bench.report.perplexity import MODES, write_table_files
from pe_bench.progress import duration
from pe_bench.runs import atomic_write_text


def write_report(df: pd.DataFrame | Collected, pos: pd.DataFrame, out: Path, title: str, split: str = "validation",
                 modes: tuple[str, ...] | list[str] = MODES, plots: bool = True) -> list[Path]:
    """Everything `pe-bench report` writes: eval_long.csv, comparison.csv/.md, the fine-tunes by method and budget
    (extension.csv/.md, if any) and (with matplotlib) the plots. Raises ImportError if plots were asked for and
    matplotlib is missing (nothing is moved then)."""
    return replace_together(out, lambda staging: _report_files(df, pos, staging, title, split, modes, plots))


def _report_files(df: pd.DataFrame | Collected, pos: pd.DataFrame, out: Path, title: str, split: str,
                  modes: tuple[str, ...] | list[str], draw: bool) -> list[Path]:
    col, written = write_table_files(df, out, title, split)
    fine_tunes = extension_table(col, "nonoverlapping", split)
    written += write_extension(fine_tunes, out, title, split)
    if draw:
        if not fine_tunes.empty:
            written.append(figures.plot_extension(fine_tunes, out / "ppl_vs_finetune_steps.png", title))
        for m in modes:
            written.append(figures.plot_lengths(col.df, out / f"ppl_vs_length_{m}.png", m, split, title))
        written.append(figures.plot_positions(pos, out / "loss_vs_position.png", split, col.df, title))
    return [p for p in written if p is not None]


def write_accuracy_report(acc: Accuracy, out: Path, title: str, plots: bool = True) -> list[Path]:
    """accuracy_long.csv (every row), accuracy.csv (wide: task × metric × row) and accuracy.md, and with matplotlib
    accuracy_vs_length.png and passkey_heatmap.png (when a task was evaluated by depth); all or nothing replaced."""
    return replace_together(out, lambda staging: _accuracy_files(acc, staging, title, plots))


def _accuracy_files(acc: Accuracy, out: Path, title: str, draw: bool) -> list[Path]:
    df, written = write_accuracy_files(acc, out, title)
    if draw:
        written.append(figures.plot_accuracy(df, out / "accuracy_vs_length.png", title))
        if (df["depth"] != "").any():  # a task evaluated by depth (passkey)
            written.append(figures.plot_passkey_heatmap(df, out / "passkey_heatmap.png", title))
    return [p for p in written if p is not None]


def write_analysis(rows: list[dict], out: Path, title: str, made_at: dict | None = None) -> list[Path]:
    """attention.csv, analysis.json (``made_at``: the step of the weights, of how many, the run's status) and (with
    matplotlib) attention.png under ``out``."""
    written = write_analysis_files(rows, out, made_at)
    try:
        return written + [figures.plot_attention(rows, out / "attention.png", title)]
    except ImportError:
        return written


def write_readme(out: Path, title: str, command: str, written: list[Path], meta: dict[str, dict[str, Any]],
                 left_out: list[str]) -> Path:
    """README.md of a report directory: the command that wrote it, the runs (status, time, environment, as their
    meta.json records them), the tables of the markdown files written and the figures, and the runs left out. Made
    of nothing but these, so the same runs and command give the same bytes."""
    parts = [f"# {title}\n\nWritten by `pe-bench report` with the files beside it; this command writes them again "
             f"from the same runs, byte for byte (`--out` naming this directory):\n\n```bash\n{command}\n```\n",
             _runs_section(meta)]
    for p in written:
        if p.suffix == ".md" and p.name != "README.md":
            body = p.read_text(encoding="utf-8").split("\n", 1)[1].lstrip("\n")  # without its title line
            parts.append(f"## {p.name}\n\n" + re.sub(r"^#(#+) ", r"##\1 ", body, flags=re.M))
    figures_written = [p.name for p in written if p.suffix == ".png"]
    if figures_written:
        parts.append("## Figures\n\n" + "\n\n".join(f"![{name}]({name})" for name in figures_written) + "\n")
    if left_out:
        parts.append("## Left out\n\n" + "".join(f"- {markdown.cell(line)}\n" for line in left_out))
    path = out / "README.md"
    atomic_write_text(path, "\n".join(p.rstrip("\n") + "\n" for p in parts))
    return path


def _runs_section(meta: dict[str, dict[str, Any]]) -> str:
    """The runs of a report: how many, their status, time, and the environments they were made in."""
    statuses = Counter(str(m.get("status")) for m in meta.values())
    lines = [f"## Runs\n\n- {len(meta)} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))]
    timed = {k: [float(m[k]) for m in meta.values() if isinstance(m.get(k), (int, float))]
             for k in ("train_seconds", "eval_seconds")}
    if timed["train_seconds"]:
        untimed = len(meta) - len(timed["train_seconds"])
        lines.append(f"- training {duration(sum(timed['train_seconds']))} in all (the longest run "
                     f"{duration(max(timed['train_seconds']))}), evaluation {duration(sum(timed['eval_seconds']))}, "
                     "as the runs' meta.json record them" + (f"; {untimed} runs record no time" if untimed else ""))
    envs = Counter(tuple(str(m.get(k, "?"))[:12 if k == "git_sha" else None] for k in ENVIRONMENT)
                   for m in meta.values())
    rows = [[n, *env] for env, n in sorted(envs.items(), key=lambda e: (-e[1], e[0]))]
    lines.append("- made on:\n\n" + markdown.table(["runs", *ENVIRONMENT], rows))
    return "\n".join(lines) + "\n"


ENVIRONMENT = ("device", "torch", "python", "pe_bench", "git_sha")  # the keys of a run's meta.json shown per run

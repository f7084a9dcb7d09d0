"""A report directory written whole: the tables (pe_bench.report, pe_bench.evaluate.attention_stats) and, with
matplotlib, the figures (pe_bench.plots). Tables and figures are written in a staging folder inside the output
directory and moved into place once all of them are written: a report that fails (disk full, a crash) leaves the
previous one whole."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pe_bench import plots as figures
from pe_bench.evaluate.attention_stats import write_analysis_files
from pe_bench.report.accuracy import write_accuracy_files
from pe_bench.report.collect import Accuracy, Collected
from pe_bench.report.extension import extension_table, write_extension
from pe_bench.report.files import replace_together
from pe_bench.report.headroom import headroom_table, precondition, write_headroom
from pe_bench.report.leaderboard import leaderboard, write_leaderboard_files
from pe_bench.report.perplexity import MODES, write_table_files
from pe_bench.report.repetition import write_repetition


def write_report(df: pd.DataFrame | Collected, pos: pd.DataFrame, out: Path, title: str, split: str = "validation",
                 modes: tuple[str, ...] | list[str] = MODES, plots: bool = True) -> list[Path]:
    """Everything `pe-bench report` writes: eval_long.csv, comparison.csv/.md, the fine-tunes by method and budget
    (extension.csv/.md, if any) and (with matplotlib) the plots. Raises ImportError if plots were asked for and
    matplotlib is missing (nothing is moved then)."""
    return replace_together(out, lambda staging: report_files(df, pos, staging, title, split, modes, plots))


def report_files(df: pd.DataFrame | Collected, pos: pd.DataFrame, out: Path, title: str, split: str,
                 modes: tuple[str, ...] | list[str], draw: bool) -> list[Path]:
    """The perplexity tables and figures written into ``out`` as they are (a staging folder: see write_report)."""
    col = df if isinstance(df, Collected) else Collected(df)
    bounds = headroom_table(col, split) if not col.df.empty else None
    col, written = write_table_files(col, out, title, split, precondition(bounds) if bounds is not None else "")
    fine_tunes = extension_table(col, "nonoverlapping", split)
    written += write_extension(fine_tunes, out, title, split)
    written += write_headroom(col, out, title, split, bounds)
    written += write_repetition(col, out, title, split)
    if draw:
        if not fine_tunes.empty:
            written.append(figures.plot_extension(fine_tunes, out / "ppl_vs_finetune_steps.png", title))
        if bounds is not None and not bounds.empty:
            written.append(figures.plot_headroom(bounds, out / "headroom_vs_tokens.png", title))
        for m in modes:
            written.append(figures.plot_lengths(col.df, out / f"ppl_vs_length_{m}.png", m, split, title))
        written.append(figures.plot_positions(pos, out / "loss_vs_position.png", split, col.df, title))
    return [p for p in written if p is not None]


def write_accuracy_report(acc: Accuracy, out: Path, title: str, plots: bool = True,
                          beside: pd.DataFrame | None = None) -> list[Path]:
    """accuracy_long.csv (every row), accuracy.csv (wide: task × metric × row), accuracy.md, leaderboard.csv/.md
    (``beside``: columns by scheme next to its effective lengths, e.g. perplexity), and with matplotlib
    leaderboard.png, accuracy_vs_length.png (the rows as trained; _<scheme>.png: a scheme and its variants) and
    passkey_heatmap.png (when a task was evaluated by depth); all or nothing replaced."""
    return replace_together(out, lambda staging: accuracy_files(acc, staging, title, plots, beside))


def accuracy_files(acc: Accuracy, out: Path, title: str, draw: bool, beside: pd.DataFrame | None) -> list[Path]:
    """The accuracy tables, leaderboard and figures written into ``out`` as they are (see write_accuracy_report)."""
    df, written = write_accuracy_files(acc, out, title)
    board = leaderboard(df)
    written += write_leaderboard_files(df, board, out, title, beside)
    if draw:
        written.append(figures.plot_leaderboard(board, out / "leaderboard.png", beside, title))
        written += figures.plot_accuracy(df, out / "accuracy_vs_length.png", title)
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


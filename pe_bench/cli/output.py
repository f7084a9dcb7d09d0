"""What commands print and write: a run's table, a report's perplexity and accuracy tables, the report files."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pe_bench.cli.app import console, say, warn
from pe_bench.config import ConfigError

if TYPE_CHECKING:
    from pe_bench.runs import RunMeta


def print_tables(df, split: str, wide: bool = False) -> None:
    """df: a DataFrame of eval rows or a report.Collected (with per-window losses: intervals and marks). Compact
    (mean ± std; within 120 columns for four lengths) unless ``wide`` (every column, the intervals)."""
    from pe_bench.report import comparison, rich_table

    for mode in ("nonoverlapping", "sliding"):
        t = comparison(df, mode, split)
        if not t.empty:
            title = escape(f"perplexity on {split} — {mode} (columns: eval length; "
                           + ("95% intervals in [ ])" if wide else "mean±std; intervals: --wide or comparison.md)"))
            out = Console(highlight=False, width=None if console.is_terminal else 250) if wide else console
            out.print(rich_table(t, title, wide, styled=console.is_terminal))


def print_accuracy_tables(acc) -> None:
    """acc: a task_report.Accuracy — exact-match tables, one per task."""
    from pe_bench.report.accuracy import accuracy_table

    for task in sorted(acc.df["task"].unique()):
        t = accuracy_table(acc.df, task)
        table = Table(title=escape(f"{task}: exact match in % on held-out examples, 95% interval in [ ] (columns: "
                                   "eval length)"), header_style="bold")
        for c in ("scheme", "L", *t.columns):
            table.add_column(escape(str(c)), justify="left" if c == "scheme" else "right")
        for (label, L), row in t.iterrows():
            table.add_row(escape(str(label)), str(L), *[escape(str(v)) for v in row.tolist()])
        console.print(table)


def _print_leaderboard(df) -> None:
    """The effective length of every row and task (multiples of L, 95% range in [ ]); leaderboard.md explains."""
    from pe_bench.report.leaderboard import EFFECTIVE_FRACTION, leaderboard, summary_table

    t = summary_table(leaderboard(df))
    table = Table(title=f"effective length: exact match stays ≥ {100 * EFFECTIVE_FRACTION:g}% of its value at L and "
                  "above chance (95% range in [ ]; leaderboard.md)", header_style="bold")
    for c in ("scheme", "L", *t.columns):
        table.add_column(escape(str(c)), justify="left" if c == "scheme" else "right")
    for (label, L), row in t.iterrows():
        table.add_row(escape(str(label)), str(L), *[escape(str(v)) for v in row.tolist()])
    console.print(table)


def print_run_table(run_path: Path, split: str) -> None:
    """A finished run's table: perplexity by length (eval.csv), or a task's accuracy by length (accuracy.csv)."""
    from pe_bench.report import collect_runs
    from pe_bench.runs import Run

    got = collect_runs([Run(run_path)])
    for line in got.left_out:
        warn(f"left out: {line}")
    if not got.accuracy.df.empty:
        print_accuracy_tables(got.accuracy)
    if not got.perplexity.df.empty:
        print_tables(got.perplexity, split)


def report_tasks(acc, runs: int, out: Path, plots: bool, title: str | None = None, beside=None) -> Reported:
    """The accuracy tables, leaderboard and plots of ``runs`` task runs collected in ``acc`` (left-out runs named):
    printed and written into ``out`` (a report's staging folder: staged_report); ``beside``: columns by scheme next
    to the effective lengths."""
    from pe_bench.publish import accuracy_files

    for line in acc.left_out:
        warn(f"left out: {line}")
    if acc.df.empty:
        raise ConfigError(f"no usable accuracy rows in {runs} task run directories ({len(acc.left_out)} left "
                          "out, above)")
    print_accuracy_tables(acc)
    _print_leaderboard(acc.df)
    kept = runs - len(acc.left_out)
    title = title or f"pe-bench report: {kept} task run{'s' * (kept != 1)}"
    try:
        written = accuracy_files(acc, out, title, plots, beside)
    except ImportError:
        written = accuracy_files(acc, out, title, False, beside)
        warn("plots skipped: matplotlib is not installed (pip install 'pe-bench[plots]')")
    return Reported(written, _in_table(acc.meta, acc.df), acc.left_out)


def write_report(df, pos, out: Path, title: str, split: str, modes, plots: bool) -> Reported:
    """The perplexity tables and plots of ``df`` (a Collected), written into ``out`` (a staging folder)."""
    from pe_bench.publish import report_files

    try:
        written = report_files(df, pos, out, title, split, modes, plots)
    except ImportError:
        written = report_files(df, pos, out, title, split, modes, False)
        warn("plots skipped: matplotlib is not installed (pip install 'pe-bench[plots]')")
    return Reported(written, _in_table(df.meta, df.df), df.left_out)


@dataclass
class Reported:
    """What one part of a report wrote, the meta.json of the runs in its tables (by run name), and its left-out
    lines."""

    written: list[Path] = field(default_factory=list)
    meta: dict[str, RunMeta] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    stage: Path = Path()  # the staging folder every part writes into (report_into)

    def __iadd__(self, other: Reported) -> Reported:
        self.written += other.written
        self.meta = {**self.meta, **other.meta}
        self.left_out += other.left_out
        return self


def _in_table(meta: dict[str, RunMeta], df) -> dict[str, RunMeta]:
    shown = set(df["run"]) if not df.empty else set()
    return {name: m for name, m in meta.items() if name in shown}


def write_pages(out: Path, title: str, command: str, reported: Reported) -> None:
    """README.md, results.json and index.html into ``out`` (a staging folder; pe_bench.report.pages)."""
    from pe_bench.report.pages import write_pages

    reported.written += write_pages(out, title, command, reported.written, reported.meta, reported.left_out)


@contextmanager
def report_into(out: Path) -> Iterator[Reported]:
    """One report's files, all written into one staging folder and moved into ``out`` together once every part is
    written (pe_bench.report.files.staged_report); then one line per file written."""
    from pe_bench.report.files import staged_report

    reported = Reported()
    with staged_report(out) as stage:
        reported.stage = stage
        yield reported
    for p in reported.written:
        say(f"wrote {out / p.name}")


def find_runs(paths: list[str]) -> list[Path]:
    """Run directories from run dirs, results dirs (holding runs/), directories of runs, or glob patterns."""
    import glob

    def is_run(d: Path) -> bool:
        return d.is_dir() and any((d / f).exists() for f in ("eval.csv", "meta.json"))

    found: list[Path] = []
    for p in paths:
        matches = [Path(m) for m in sorted(glob.glob(p))] or [Path(p)]
        for m in matches:
            if is_run(m):
                found.append(m)
            elif m.is_dir():
                base = m / "runs" if (m / "runs").is_dir() else m
                found += sorted(d for d in base.iterdir() if is_run(d))
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if not unique:
        raise ConfigError(f"no evaluated run directories under {' '.join(paths)}; pass run directories, a results "
                          "directory (with runs/), or a glob like 'results/runs/rope-*'")
    return unique

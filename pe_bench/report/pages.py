"""The pages of a report directory, made of nothing but the files written, the runs' meta.json and the command, so
that the same runs give the same bytes: README.md (the command, the runs, every markdown table, the figures),
results.json (every table as data, with the versions, command and git SHA that made them) and index.html (the
tables and figures on one page)."""

from __future__ import annotations

import csv
import html
import importlib.metadata
import json
import math
import platform
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pe_bench import __version__, markdown
from pe_bench.progress import duration
from pe_bench.runs import RunMeta, atomic_write_text, git_modified, git_sha
from pe_bench.runs.meta import ENVIRONMENT
PAGES = ("README.md", "results.json", "index.html")


def write_pages(out: Path, title: str, command: str, written: list[Path], meta: dict[str, RunMeta],
                left_out: list[str]) -> list[Path]:
    """README.md, results.json and index.html of the report directory ``out``."""
    return [write_readme(out, title, command, written, meta, left_out),
            write_results_json(out, title, command, written, meta, left_out),
            write_index(out, title, command, written, meta, left_out)]


def write_readme(out: Path, title: str, command: str, written: list[Path], meta: dict[str, RunMeta],
                 left_out: list[str]) -> Path:
    """README.md of a report directory: the command that wrote it, the runs (status, time, environment, as their
    meta.json records them), the tables of the markdown files written and the figures, and the runs left out. Made
    of nothing but these, so the same runs and command give the same bytes."""
    parts = [f"# {markdown.inline(title)}\n\nWritten by `pe-bench report` with the files beside it; this command writes them again "
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


def _statuses(meta: dict[str, RunMeta]) -> str:
    """``46 runs: 2 diverged, 44 done``."""
    counts = Counter(str(m.status) for m in meta.values())
    return f"{len(meta)} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def _environments(meta: dict[str, RunMeta]) -> list[list[Any]]:
    """[runs, *ENVIRONMENT] rows: how many runs were made in each environment, the most first."""
    envs = Counter(tuple(_shown(m, k) for k in ENVIRONMENT) for m in meta.values())
    return [[n, *env] for env, n in sorted(envs.items(), key=lambda e: (-e[1], e[0]))]


def _shown(m: RunMeta, key: str) -> str:
    """A run's environment value as the runs table shows it: the commit short, marked when the code was modified."""
    if key != "git_sha":
        return m.shown(key)
    return m.shown(key)[:12] + (" (modified)" if m.git_modified else "")


def _runs_section(meta: dict[str, RunMeta]) -> str:
    """The runs of a report: how many, their status, time, and the environments they were made in."""
    lines = [f"## Runs\n\n- {_statuses(meta)}"]
    timed = {"train_seconds": [m.train_seconds for m in meta.values() if m.train_seconds is not None],
             "eval_seconds": [m.eval_seconds for m in meta.values() if m.eval_seconds is not None]}
    if timed["train_seconds"]:
        untimed = len(meta) - len(timed["train_seconds"])
        lines.append(f"- training {duration(sum(timed['train_seconds']))} in all (the longest run "
                     f"{duration(max(timed['train_seconds']))}), evaluation {duration(sum(timed['eval_seconds']))}, "
                     "as the runs' meta.json record them" + (f"; {untimed} runs record no time" if untimed else ""))
    lines.append("- made on:\n\n" + markdown.table(["runs", *ENVIRONMENT], _environments(meta)))
    return "\n".join(lines) + "\n"


def _tables(written: list[Path]) -> dict[str, list[dict[str, str]]]:
    """file name → rows (as written, every cell a string) of each wide table written: the long CSVs stay files."""
    out = {}
    for p in written:
        if p.suffix == ".csv" and not p.name.endswith("_long.csv"):
            with p.open(newline="", encoding="utf-8") as f:
                out[p.name] = list(csv.DictReader(f))
    return out


def _data(tables: dict[str, list[dict[str, str]]]) -> dict[str, list[dict[str, Any]]]:
    """The tables as data (cell_value): numbers as numbers, intervals as their parts."""
    return {name: [{k: cell_value(v) for k, v in row.items()} for row in rows] for name, rows in tables.items()}


_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_CELL = re.compile(rf"^(?P<mean>{_NUMBER})%?(?: ± (?P<std>{_NUMBER})%?)?(?: \[(?P<low>{_NUMBER})%?, (?P<high>{_NUMBER})%?\])?$")


def cell_value(cell: str) -> Any:
    """A table cell as data: a number as a number; "6.736 ± 0.022 [6.682, 6.791]" as {"mean", "std", "low", "high"}
    (the parts it has); an empty cell as null; anything else (a label, a status such as "n/a" or "diverged") as the
    string it is."""
    m = _CELL.match(cell.strip())
    if not cell.strip():
        return None
    if m is None:
        return cell
    parts = {k: _number(v) for k, v in m.groupdict().items() if v is not None}
    return parts["mean"] if list(parts) == ["mean"] else parts


def _number(text: str) -> int | float:
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)


def write_results_json(out: Path, title: str, command: str, written: list[Path], meta: dict[str, RunMeta],
                       left_out: list[str]) -> Path:
    """results.json: every wide table as data, the runs (their status, times, environment, plugins), the files, the
    runs left out, and what made the report (pe-bench version and git SHA, torch, python, the command)."""
    try:
        torch_version: str | None = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    doc = {"title": title, "command": command,
           "made_by": {"pe_bench": __version__, "git_sha": git_sha(), "git_modified": git_modified(),
                       "torch": torch_version, "python": platform.python_version()},
           "runs": {name: m.summary() for name, m in sorted(meta.items())},
           "tables": _data(_tables(written)), "files": [p.name for p in written], "left_out": list(left_out)}
    path = out / "results.json"
    atomic_write_text(path, json.dumps(strict(doc), indent=1, sort_keys=True, ensure_ascii=False,
                                       allow_nan=False) + "\n")
    return path


def strict(value: Any) -> Any:
    """``value`` as strict JSON holds it: a NaN or infinite number (which JSON has no word for, and a meta.json may
    hold) becomes the string Python writes for it ("nan", "inf", "-inf"), never a bare NaN token."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


STYLE = ("body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}"
         "th,td{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap}"
         "th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}"
         "img{max-width:100%;border:1px solid #eee;margin:0.5em 0}pre{background:#f6f6f6;padding:0.6em}"
         ".wide{overflow-x:auto}")


def _html_table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>\n" for row in rows)
    return f"<div class=\"wide\"><table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table></div>\n"


def write_index(out: Path, title: str, command: str, written: list[Path], meta: dict[str, RunMeta],
                left_out: list[str]) -> Path:
    """index.html: the command, the runs, every wide table, every figure and a link to every file, on one page."""
    t = html.escape(title)
    parts = [f"<!doctype html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>{t}</title>"
             f"<style>{STYLE}</style></head>\n<body>\n<h1>{t}</h1>\n<p>Written by <code>pe-bench report</code>; this "
             f"command writes this directory again from the same runs:</p>\n<pre>{html.escape(command)}</pre>\n"]
    parts.append(f"<h2>Runs</h2>\n<p>{html.escape(_statuses(meta))}</p>\n"
                 + _html_table(["runs", *ENVIRONMENT], _environments(meta)))
    for name, rows in _tables(written).items():
        header = list(rows[0]) if rows else []
        parts.append(f"<h2 id=\"{html.escape(name)}\">{html.escape(name)}</h2>\n"
                     + _html_table(header, [[r[c] for c in header] for r in rows]))
    for p in written:
        if p.suffix == ".png":
            parts.append(f"<h2>{html.escape(p.name)}</h2>\n<img src=\"{html.escape(p.name)}\" "
                         f"alt=\"{html.escape(p.name)}\">\n")
    files = [p.name for p in written] + ["README.md", "results.json"]
    parts.append("<h2>Files</h2>\n<ul>\n" + "".join(f"<li><a href=\"{html.escape(n)}\">{html.escape(n)}</a></li>\n"
                                                       for n in files) + "</ul>\n")
    if left_out:
        parts.append("<h2>Left out</h2>\n<ul>\n" + "".join(f"<li>{html.escape(line)}</li>\n" for line in left_out)
                     + "</ul>\n")
    path = out / "index.html"
    atomic_write_text(path, "".join(parts) + "</body>\n</html>\n")
    return path

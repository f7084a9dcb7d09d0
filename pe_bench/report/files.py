"""The files pe-bench writes into a run directory, read back whole: eval.csv, accuracy.csv, windows.csv,
positions.csv and context.csv with their required columns, statuses and checksums (a file that cannot be read whole is a
RunFileError naming it, never used in part), and a report directory replaced all at once."""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import math
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pe_bench import markdown
from pe_bench.errors import ConfigError
from pe_bench.runs import Run, RunFileError, RunMeta, atomic_write_text

NUMERIC = ("L_train", "L_eval", "stride", "tokens_scored", "seed")
REQUIRED = ("scheme", "split", "L_train", "L_eval", "mode", "stride", "ppl", "tokens_scored", "seed", "status")
STATUSES = ("ok", "not_applicable", "nonfinite", "diverged")
STATUS_CELL = {"diverged": "diverged", "nonfinite": "nan", "not_applicable": "n/a"}  # worst first
ACCURACY_REQUIRED = ("task", "scheme", "L_train", "L_eval", "depth", "exact_match", "token_accuracy", "examples",
                     "seed", "status")
WINDOW_REQUIRED = ("scheme", "split", "L_eval", "mode", "stride", "budget", "step", "tokens_scored", "window", "nll",
                   "tokens")
# A window's row is keyed like its eval.csv row (EVAL_KEY): the span scored is part of the key, so two evaluations of
# one length with other length sets (other spans) never pool their windows.
WINDOW_KEY = ("scheme", "split", "L_eval", "mode", "stride", "S", "budget", "step", "precision", "warmup",
              "tokens_scored")
NOT_A_NUMBER = {"nan", "inf", "-inf", "+inf"}  # what a non-finite loss is written as
POSITION_NUMERIC = ("L_train", "L_eval", "pos_start", "pos_end", "tokens", "seed")
CONTEXT_REQUIRED = ("scheme", "split", "L_train", "L_eval", "pos_start", "pos_end", "loss", "ref_loss", "gain", "lo",
                    "hi", "blocks", "tokens", "seed", "budget", "step", "precision", "tokens_scored")
CONTEXT_NUMERIC = ("L_train", "L_eval", "pos_start", "pos_end", "loss", "ref_loss", "gain", "lo", "hi", "blocks",
                   "tokens", "seed", "tokens_scored")
POSITION_REQUIRED = ("scheme", "split", "L_train", "L_eval", "pos_start", "pos_end", "loss", "tokens", "seed")


def read_whole_csv(path: Path, checksum: str | None, required: tuple[str, ...],
                   allow_empty: bool = False) -> tuple[list[dict[str, str]], list[str]]:
    """(rows, columns) of a run's CSV, checked whole: unreadable, binary, header-only, missing a required column, or
    altered (its sha256 differs from ``checksum``, recorded in meta.json) → a RunFileError naming the file."""
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RunFileError(f"{path} is unreadable or not text ({type(e).__name__})") from None
    if "\x00" in text:
        raise RunFileError(f"{path} is binary, not a CSV")
    if checksum and hashlib.sha256(raw).hexdigest() != checksum:
        raise RunFileError(f"{path} does not match the checksum pe-bench recorded in meta.json (truncated or "
                           "edited); re-evaluate the run with `pe-bench eval`")
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise RunFileError(f"{path} lacks the columns {', '.join(missing)} (not a pe-bench {path.name}, or cut "
                           "short)")
    rows = list(reader)
    if not rows and not allow_empty:
        raise RunFileError(f"{path} has a header and no rows")
    return rows, list(reader.fieldnames or [])


def legacy_labels(run: Run) -> Callable[[str], str]:
    """label → label: the scheme labels a run wrote before one of its scheme's options existed (an option whose
    default changes the model, ``Scheme.legacy_options``) with that option's value added, as a run made now with
    the value is labelled (``stickbreaking`` → ``stickbreaking[remainder=False]``)."""
    filled = run.legacy_options()
    if not filled:
        return lambda label: label
    name = run.load_config().scheme["name"]
    tag = ",".join(f"{k}={v}" for k, v in filled.items())

    def relabel(label: str) -> str:
        if label.startswith(f"{name}["):
            head, _, rest = label.partition("]")
            return f"{head},{tag}]{rest}"
        return f"{name}[{tag}]{label[len(name):]}" if label.startswith(name) else label

    return relabel


def read_eval_rows(run: Run, meta: RunMeta) -> list[dict[str, str]]:
    """A run's eval.csv, checked whole: an unreadable, binary, header-only, truncated or altered file (its
    checksum in meta.json differs) is a RunFileError naming it — its rows are never used in part. Scheme labels
    written before a legacy option existed get it (:func:`legacy_labels`)."""
    path = run.eval_csv
    rows, columns = read_whole_csv(path, meta.eval_csv_sha256, REQUIRED)
    relabel = legacy_labels(run)
    for i, r in enumerate(rows, 2):
        if None in r or any(r.get(c) is None for c in columns):
            raise RunFileError(f"{path} line {i} has the wrong number of fields (truncated or edited)")
        if r["status"] not in STATUSES:
            raise RunFileError(f"{path} line {i} has status {r['status']!r}, not one of {', '.join(STATUSES)}")
        try:
            [int(float(r[c])) for c in NUMERIC]
            float(r["ppl"] or "nan")
            if r.get("step") not in (None, "", "None"):
                int(r["step"])
        except (ValueError, OverflowError):
            raise RunFileError(f"{path} line {i} holds a value that is not a number") from None
        r["scheme"] = relabel(r["scheme"])
    return rows


def read_accuracy_rows(run: Run, meta: RunMeta) -> list[dict[str, str]]:
    """A run's accuracy.csv, checked whole (as :func:`read_eval_rows`): never used in part."""
    path = run.accuracy_csv
    rows, _ = read_whole_csv(path, meta.accuracy_csv_sha256, ACCURACY_REQUIRED)
    relabel = legacy_labels(run)
    for i, r in enumerate(rows, 2):
        if None in r or r["status"] not in STATUSES:
            raise RunFileError(f"{path} line {i} is malformed (truncated or edited)")
        outcomes = r.get("outcomes") or ""
        if outcomes and (len(outcomes) != _int(r["examples"]) or set(outcomes) - {"x", "."}
                         or outcomes.count("x") != _int(r.get("solved"))):
            raise RunFileError(f"{path} line {i}: its outcomes do not match its {r['examples']} examples and "
                               f"{r.get('solved')} solved (edited or mixed up); re-evaluate the run with `pe-bench eval`")
        r["scheme"] = relabel(r["scheme"])
    return rows


def _int(text: str | None) -> int:
    try:
        return int(text or "")
    except ValueError:
        return -1


def read_windows(run: Run) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """Per-window losses of a run: (run name, *WINDOW_KEY values) → (nll, tokens) in window order, for every key
    whose windows are finite (a variant that overflowed has none; the other keys keep theirs). A file that cannot
    be read whole — unparseable, cut short, windows that do not add up to the tokens they say they scored — is a
    RunFileError naming it."""
    path = run.path / "windows.csv"
    if not path.exists():
        return {}
    rows, columns = read_whole_csv(path, None, WINDOW_REQUIRED)
    for i, r in enumerate(rows, 2):  # a field too many or too few: csv gives it the key None or the value None
        if None in r or None in r.values():
            raise RunFileError(f"{path} line {i} has the wrong number of fields (truncated or edited)")
    w = pd.DataFrame(rows, columns=columns, dtype=str)
    for c, old in (("S", ""), ("precision", ""), ("warmup", "0")):  # columns older files lack: their value then
        if c not in w:
            w[c] = old
    numbers = {c: pd.to_numeric(w[c], errors="coerce") for c in ("nll", "tokens", "window")}
    for c, v in numbers.items():
        bad = v.isna() & ~w[c].str.strip().str.lower().isin(NOT_A_NUMBER)
        if bad.any():
            line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            raise RunFileError(f"{path} line {line} holds a {c} that is not a number: {w[c][bad].iloc[0]!r}")
    w = w.assign(**numbers)
    w["scheme"] = w["scheme"].map(legacy_labels(run))
    out = {}
    for key, g in w.groupby(list(WINDOW_KEY), sort=False):
        g = g.sort_values("window")
        nll, tokens = g["nll"].to_numpy(float), g["tokens"].to_numpy(float)
        if not (np.isfinite(nll).all() and np.isfinite(tokens).all()):
            continue  # that variant's rows are 'nan' already: no interval to give
        if str(int(tokens.sum())) != key[-1]:
            raise RunFileError(f"{path}: the windows of {key[0]} at {key[2]} tokens ({key[3]}) add up to "
                               f"{int(tokens.sum())} tokens, not the {key[-1]} they say they scored (edited or "
                               "mixed up); re-evaluate the run with `pe-bench eval`")
        out[(run.path.name, *key)] = (nll, tokens)
    return out


def read_context(run: Run) -> pd.DataFrame:
    """A run's context.csv (context use past L, pe_bench.evaluate.perplexity.context_rows) with a ``run`` column,
    checked whole: a line with the wrong number of fields or a value that is not a number is a RunFileError naming
    the file. No file: an empty frame."""
    if not run.context_csv.exists():
        return pd.DataFrame()
    rows, columns = read_whole_csv(run.context_csv, None, CONTEXT_REQUIRED, allow_empty=True)
    d = pd.DataFrame(rows, columns=columns, dtype=str)
    if d.isna().any().any():
        raise RunFileError(f"{run.context_csv} has a line with the wrong number of fields (truncated or edited)")
    for c in CONTEXT_NUMERIC:
        v = pd.to_numeric(d[c], errors="coerce")
        if v.isna().any():
            line = int(np.flatnonzero(v.isna().to_numpy())[0]) + 2
            raise RunFileError(f"{run.context_csv} line {line} holds a {c} that is not a number: "
                               f"{d[c][v.isna()].iloc[0]!r}; re-evaluate the run with `pe-bench eval`")
        d[c] = v
    d["scheme"] = d["scheme"].map(legacy_labels(run))
    return d.assign(run=run.path.name)


REPETITION_REQUIRED = ("scheme", "split", "L_train", "distance", "passage_tokens", "passages", "first_loss",
                       "second_loss", "control_loss", "gain", "lo", "hi", "seed", "step", "status")
REPETITION_NUMERIC = ("L_train", "distance", "passage_tokens", "passages", "first_loss", "second_loss", "control_loss",
                      "gain", "lo", "hi", "seed", "step")
REPETITION_STATUSES = ("ok", "not_applicable", "nonfinite")


def write_csv_md(out: Path, stem: str, t: pd.DataFrame, title: str, heading: str, body: str) -> list[Path]:
    """<stem>.csv (the table, rounded to 6 digits) and <stem>.md (``# title``, ``## heading``, ``body``) under
    ``out``."""
    csv_path, md_path = out / f"{stem}.csv", out / f"{stem}.md"
    atomic_write_text(csv_path, t.round(6).to_csv(index=False))
    head = f"# {markdown.inline(title)}\n\n" if title else ""
    atomic_write_text(md_path, f"{head}## {heading}\n\n{body}\n")
    return [csv_path, md_path]


def read_repetition(run: Run) -> pd.DataFrame:
    """A run's repetition.csv (the repetition probe, pe_bench.evaluate.repetition) with a ``run`` column, checked
    whole: a short line, an unknown status or a row of status ok with a value that is not a finite number is a
    RunFileError naming the file and line (rows of other statuses hold no numbers). No file: an empty frame."""
    if not run.repetition_csv.exists():
        return pd.DataFrame()
    rows, columns = read_whole_csv(run.repetition_csv, None, REPETITION_REQUIRED, allow_empty=True)
    d = pd.DataFrame(rows, columns=columns, dtype=str)
    if d.isna().any().any():
        raise RunFileError(f"{run.repetition_csv} has a line with the wrong number of fields (truncated or edited)")
    bad = ~d["status"].isin(REPETITION_STATUSES)
    if bad.any():
        raise RunFileError(f"{run.repetition_csv} line {int(np.flatnonzero(bad)[0]) + 2} has status "
                           f"{d['status'][bad].iloc[0]!r}; re-evaluate the run with `pe-bench eval`")
    ok = (d["status"] == "ok").to_numpy()
    for c in REPETITION_NUMERIC:
        v = pd.to_numeric(d[c], errors="coerce")
        wrong = ok & ~np.isfinite(v.to_numpy(float))
        if wrong.any():
            line = int(np.flatnonzero(wrong)[0]) + 2
            raise RunFileError(f"{run.repetition_csv} line {line} holds a {c} that is not a finite number: "
                               f"{d[c][wrong].iloc[0]!r}; re-evaluate the run with `pe-bench eval`")
        d[c] = v
    d["scheme"] = d["scheme"].map(legacy_labels(run))
    return d.assign(run=run.path.name)


def window_key(run: str, r: Any) -> tuple:
    """The :func:`read_windows` key of an eval row (a dict or a namedtuple of the collected table)."""
    get = r.get if isinstance(r, dict) else lambda c: getattr(r, c, None)

    def value(c: str) -> str:
        v = get(c)
        if c == "warmup" and (v is None or v == "" or (isinstance(v, float) and math.isnan(v))):
            return "0"  # rows of a file older than the column: no warm-up then
        return str(int(float(v))) if c in ("L_eval", "stride", "tokens_scored", "warmup") else str(v)

    return (run, *(value(c) for c in WINDOW_KEY))


def recomputed_ppl(w: tuple[np.ndarray, np.ndarray]) -> float:
    return float(np.exp(w[0].sum() / w[1].sum()))


def agrees(w: tuple[np.ndarray, np.ndarray], ppl: float) -> bool:
    """Whether per-window losses recompute a row's perplexity (as written: 4 decimals; window nll: 6)."""
    return abs(recomputed_ppl(w) - ppl) <= 1e-4 + 1e-5 * ppl


def check_against_windows(run: Run, rows: pd.DataFrame, windows: dict[tuple, tuple[np.ndarray, np.ndarray]]) -> None:
    """Refuse a run whose eval.csv says another number than its own windows.csv recomputes (edited by hand)."""
    for r in rows[rows["status"] == "ok"].itertuples():
        w = windows.get(window_key(run.path.name, r))
        if w is not None and not agrees(w, float(r.ppl)):
            raise RunFileError(f"{run.eval_csv}: {r.scheme} at {r.L_eval} tokens ({r.mode}) says perplexity "
                               f"{float(r.ppl):g}, its windows.csv recomputes {recomputed_ppl(w):.4f} (edited or "
                               "stale); re-evaluate the run with `pe-bench eval`")


def read_positions(run: Run) -> pd.DataFrame:
    """A run's positions.csv (loss by position bucket) as a frame with its numeric columns parsed and a non-finite
    loss as NaN; empty when the run has none. A file that cannot be read whole is a RunFileError naming it."""
    if not run.positions_csv.exists():
        return pd.DataFrame()
    rows, columns = read_whole_csv(run.positions_csv, None, POSITION_REQUIRED, allow_empty=True)
    d = pd.DataFrame(rows, columns=columns, dtype=str)
    if d.isna().any().any():
        raise RunFileError(f"{run.positions_csv} has a line with the wrong number of fields")
    try:
        for c in POSITION_NUMERIC:
            d[c] = pd.to_numeric(d[c])
        d["loss"] = pd.to_numeric(d["loss"].where(~d["loss"].str.lower().isin(NOT_A_NUMBER), float("nan")))
    except ValueError:
        raise RunFileError(f"{run.positions_csv} holds a value that is not a number") from None
    return d


PLAN = ".complete"  # in the staging folder once every file is written: what to move and what to remove
PAGES = ("README.md", "results.json", "index.html")  # written by every report beside its tables and figures
RESULTS_JSON = "results.json"


@contextmanager
def staged_report(out: Path) -> Iterator[Path]:
    """A staging folder on ``out``'s file system for every file of one report — tables, figures and pages. On success
    the new files are moved in, then the files of the report that was there (results.json lists them) that this one
    does not write are removed; what pe-bench did not write (a COMMAND.txt, runs/) stays. A failure while writing
    leaves ``out`` as it was; a process killed while moving leaves the plan on disk, and the next report into
    ``out`` finishes it first, so ``out`` is the whole old report or the whole new one. Reports into one directory
    take turns (a lock on the directory that holds it). ``out`` that is a file, or a run directory, is refused
    before anything is written."""
    check_report_out(out)
    with _turn(out.parent):
        finish_staged(out)
        stage = staging_of(out)
        stage.mkdir(parents=True)
        try:
            yield stage
            new = sorted(p.name for p in stage.iterdir() if p.is_file())
            if not new:  # nothing written: the report there stays
                return
            stale = [n for n in earlier_report_files(out) if n not in new]
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(stage / PLAN, json.dumps({"move": new, "remove": stale}))
        finally:
            if not (stage / PLAN).exists():
                shutil.rmtree(stage, ignore_errors=True)
        finish_staged(out)


def check_report_out(out: Path) -> None:
    """A ConfigError where ``out`` cannot hold a report: an existing file, or a run directory (or a folder inside one:
    a report there would replace the run's own files)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a directory; give a directory for the report")
    for d in [out, *out.resolve().parents]:
        if (d / "meta.json").is_file() and (d / "config.yaml").is_file():
            raise ConfigError(f"--out {out} is {'inside ' * (d != out)}the run directory {d}: a report there would "
                              "replace the run's own files; give --out another directory")


@contextmanager
def _turn(parent: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``parent`` (the directory that holds a report directory) while a report is staged
    and moved: a second report into it waits, then replaces the first whole."""
    parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def finish_staged(out: Path) -> None:
    """Carry out a staged report's plan (what a killed report left: moves still to do, then removals), or discard a
    staging folder that has none (a report that never finished writing)."""
    stage = staging_of(out)
    if not stage.is_dir():
        return
    if not (stage / PLAN).exists():
        shutil.rmtree(stage)
        return
    plan = json.loads((stage / PLAN).read_text(encoding="utf-8"))
    for name in plan["move"]:
        if (stage / name).exists():
            os.replace(stage / name, out / name)
    for name in plan["remove"]:
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(stage)


def staging_of(out: Path) -> Path:
    """The staging folder of the report directory ``out``: beside it on the same file system (so that ``out`` exists
    only once a report is complete, and every move is a rename), or inside it where ``out`` is a mount point or a
    link to another file system."""
    real = out.resolve()
    if real.is_dir() and os.stat(real).st_dev != os.stat(real.parent).st_dev:
        return real / ".pe-bench-staging"
    return real.parent / f".{real.name}.staging"


def earlier_report_files(out: Path) -> list[str]:
    """The files the report now in ``out`` wrote (its results.json's list and the pages); [] where there is none. A
    results.json that cannot be read is a RunFileError: what to remove is unknown, so nothing is replaced."""
    path = out / RESULTS_JSON
    if not path.exists():
        return []
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RunFileError(f"{path} is unreadable ({type(e).__name__}): the report there cannot be replaced safely; "
                           "move the directory away or give --out another one") from None
    return [n for n in [*files, *PAGES] if isinstance(n, str) and "/" not in n and (out / n).is_file()]


def report_runs(out: Path) -> set[str]:
    """The names of the runs the report in ``out`` was made from (its results.json); a RunFileError where there is no
    readable results.json (what the report holds is unknown)."""
    path = out / RESULTS_JSON
    try:
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        if not isinstance(runs, dict):
            raise TypeError("runs is not an object")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RunFileError(f"{path} is missing or unreadable ({type(e).__name__}): which runs the report in {out} "
                           "holds is unknown; give the report another place with --out DIR") from None
    return {str(name) for name in runs}


def replace_together(out: Path, write: Callable[[Path], list[Path]]) -> list[Path]:
    """``write(staging)`` writes a report's files into a staging folder; once all are written they replace the report
    in ``out`` (staged_report). Any failure while writing leaves ``out`` as it was."""
    with staged_report(out) as stage:
        written = write(stage)
    return [out / p.name for p in written]

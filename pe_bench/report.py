"""Run directories → comparison tables (rows: scheme variant; columns: eval length), as CSV, markdown and rich, and
plots (perplexity vs eval length; loss vs position)."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from rich.markup import escape
from rich.table import Table

from pe_bench import markdown, stats
from pe_bench.build import build_scheme
from pe_bench.config import Config, ConfigError, reference_length, run_lengths, scheme_spec, with_options
from pe_bench.finetune import finetune_tag, method_tag
from pe_bench.markdown import label_value
from pe_bench.runs import Run, RunFileError, atomic_write_text, digest, identity, numerics_of

MODES = ("nonoverlapping", "sliding")


STATUS_CELL = {"diverged": "diverged", "nonfinite": "nan", "not_applicable": "n/a"}  # worst first
NUMERIC = ("L_train", "L_eval", "stride", "tokens_scored", "seed")
REQUIRED = ("scheme", "split", "L_train", "L_eval", "mode", "stride", "ppl", "tokens_scored", "seed", "status")
STATUSES = ("ok", "not_applicable", "nonfinite", "diverged")
# Keys of a run's identity that never go into a row label: the seed is what replicas differ in; the scheme is the
# row name already (its label lists the options that differ from the defaults).
UNLABELLED = ("seed", "scheme")
FINETUNE_COLUMNS = ("ft_parent", "ft_steps", "ft_method", "bare")  # collect_all's columns for the extension table
# A fine-tune's identity keys that its label's tag (finetune_tag) already says, or that follow from its parent.
TAGGED = ("train.steps", "train.seq_len", "train.pose_target", "train.pose_chunks", "finetune.original_seq_len",
          "finetune.data_offset", "finetune.new_positions")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested configuration keys → dotted keys with their values as labels show them (:func:`label_value`)."""
    out: dict[str, str] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = label_value(v)
    return out


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


def read_eval_rows(run: Run, meta: dict[str, Any]) -> list[dict[str, str]]:
    """A run's eval.csv, checked whole: an unreadable, binary, header-only, truncated or altered file (its
    checksum in meta.json differs) is a RunFileError naming it — its rows are never used in part."""
    path = run.eval_csv
    rows, columns = read_whole_csv(path, meta.get("eval_csv_sha256"), REQUIRED)
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
    return rows


def _diverged_rows(cfg: Config, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows that say 'diverged' at every length and mode the run would have been evaluated at."""
    L, ecfg = reference_length(cfg), cfg.eval
    spec = scheme_spec(cfg.scheme)
    labels = dict.fromkeys(build_scheme(cfg, sp).label() for sp in
                           [spec] + ([with_options(spec, v) for v in spec.eval_variants] if ecfg.variants else []))
    base = {
            "base_scheme": cfg.scheme["name"], "model": cfg.model.name, "data": cfg.data.name, "split": ecfg.split,
            "L_train": L, "seed": cfg.seed, "loss": "nan", "ppl": "nan", "bpb": "nan", "tokens_scored": 0,
            "status": "diverged", "note": f"training diverged at step {meta.get('diverged_step')}", "step": ""}
    rows = []
    for label in labels:  # the base scheme and every eval-time variant: each of their rows says 'diverged'
        for n in run_lengths(cfg):
            common = {**base, "scheme": label, "L_eval": n, "ratio": round(n / L, 4)}
            rows.append({**common, "mode": "nonoverlapping", "stride": n, "S": "", "budget": ecfg.max_tokens})
            rows.append({**common, "mode": "sliding", "stride": min(ecfg.stride or L, n), "S": ecfg.stride or L,
                         "budget": ecfg.sliding_max_tokens})
    return rows


@dataclass
class Collected:
    """Evaluation rows of many runs, each with the identity of its configuration, what was left out, and the meta.json
    of each run read (by run name)."""

    df: pd.DataFrame
    windows: dict[tuple, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Rows made elsewhere (tests, older files) without identity columns: one configuration per scheme label."""
        if not self.df.empty:
            defaults = {"label": self.df["scheme"], "config": "", "group": "", "budget": "", "S": "", "step": 0,
                        "steps": 0, "run": "", "precision": "", "ft_parent": "", "ft_steps": 0,
                        "ft_method": self.df["scheme"], "bare": ""}
            missing = {k: v for k, v in defaults.items() if k not in self.df}
            if missing:
                self.df = self.df.assign(**missing)


def _numerics(run: Run) -> str | None:
    try:
        return numerics_of(run.meta())
    except RunFileError:
        return None


def config_identity(cfg: Config, meta: dict[str, Any], mixed: bool) -> tuple[dict[str, Any], str]:
    """A run's configuration — its identity without the seed, plus its numerics when the runs being reported
    disagree on them (docs/trust.md, "Determinism") — and that configuration's hash: runs with the same hash are seed
    replicas of one table row."""
    ident = identity(cfg, seed=False)
    if mixed:
        ident["numerics"] = numerics_of(meta)
    return ident, digest(ident)


def mixed_numerics(runs: list[Run]) -> bool:
    """Whether the runs were made with different numerics (torch, device, CPU threads)."""
    return len({_numerics(run) for run in runs} - {None}) > 1


def _read_run(run: Run) -> tuple[Config, dict[str, Any], list[dict[str, str]]]:
    """(config, meta, eval rows) of a run the report can use: a diverged run gives 'diverged' rows (beside the rows
    of a --partial evaluation, labelled); an unfinished one only its --partial rows. RunFileError otherwise."""
    meta = run.meta()
    cfg = run.load_config()
    status = meta.get("status")
    if status == "diverged":
        return cfg, meta, _diverged_rows(cfg, meta) + (read_eval_rows(run, meta) if run.eval_csv.exists() else [])
    if not run.eval_csv.exists():
        raise RunFileError(f"{run.path} has no eval.csv (status {status or 'unknown'})")
    rows = read_eval_rows(run, meta)
    if status != "done" and {str(r.get("step")) for r in rows} & {"None", "", str(cfg.train.steps)}:
        raise RunFileError(f"{run.path} is not finished (status {status or 'unknown'}); its rows are left out until "
                           "it is (or evaluate it with `pe-bench eval --partial`)")
    return cfg, meta, rows


def _run_frame(run: Run, cfg: Config, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A run's eval rows as a frame, with the columns older files lack and the step of un-stepped rows filled in."""
    d = pd.DataFrame(rows, dtype=object)  # a column some rows lack must not turn the others' integers into floats
    for c in ("budget", "step", "note", "S", "precision"):
        if c not in d:
            d[c] = ""
    d["step"] = d["step"].replace({None: "", "None": ""}).astype(str).replace("", str(cfg.train.steps))
    for c in ("budget", "S", "precision"):
        d[c] = [("" if pd.isna(v) else str(v)) for v in d[c]]
    d.insert(0, "run", run.path.name)
    return d


def collect_all(runs: list[Run], keep: Callable[[pd.DataFrame], Any] | None = None) -> Collected:
    """Every trustworthy eval row of the given runs, in run order, with columns 'run', 'config' (the hash of the
    configuration without the seed: rows of one config are seed replicas), 'group' (also without the scheme: the
    rows that compete in one table) and 'label' (the scheme label plus the configuration keys that differ between
    the runs, e.g. ``nope · model.n_layers=2``). Unreadable files and unfinished runs are left out, each with one
    line in ``left_out``; diverged runs give 'diverged' rows. ``keep(df)``: a row mask applied before the labels are
    made (e.g. a sweep's own lengths and settings), so that rows left out never shape the labels of the others."""
    read = _read_runs(runs)
    if not read.frames:
        return Collected(pd.DataFrame(), read.windows, read.left, read.meta)
    df = pd.concat(read.frames, ignore_index=True)
    for c in NUMERIC:
        df[c] = pd.to_numeric(df[c])
    for c in ("loss", "ppl", "bpb"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    df["step"] = pd.to_numeric(df["step"]).astype(int)
    if keep is not None:
        df = df[keep(df)].reset_index(drop=True)
    # A diverged run was never evaluated: its rows take the precision its configuration's other seeds were
    # evaluated in, so that they sit in the same table row (and make it say 'diverged').
    diverged = df["status"] == "diverged"
    if diverged.any():
        usual = df[~diverged].groupby("config")["precision"].agg(lambda p: p.mode().iloc[0]).to_dict()
        df.loc[diverged, "precision"] = [usual.get(c, "fp32") for c in df.loc[diverged, "config"]]
    dup = df.duplicated(["config", "seed", "scheme", "split", "L_eval", "mode", "stride", "S", "budget", "step",
                         "precision", "tokens_scored"])
    if dup.any():  # the same run in two places (a copied results folder): one copy counts
        for name in sorted(set(df.loc[dup, "run"])):
            read.left.append(f"{name}: a second copy of a run already read; the first is used")
        df = df[~dup].reset_index(drop=True)
    return Collected(_labelled(df, read), read.windows, read.left, read.meta)


@dataclass
class _Read:
    """What collect_all reads of its runs: a frame of rows per run, their per-window losses, the runs left out
    (one line each), and per configuration its flattened identity (all keys; the scheme's options) and fine-tune
    tag."""

    frames: list[pd.DataFrame] = field(default_factory=list)
    windows: dict[tuple, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)
    flat: dict[str, dict[str, str]] = field(default_factory=dict)
    flat_scheme: dict[str, dict[str, str]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)


def _read_runs(runs: list[Run]) -> _Read:
    read = _Read()
    # Runs made with another torch, device or CPU thread count do not give the same numbers (docs/trust.md,
    # "Determinism"): when the runs disagree on it, it is part of each configuration's identity (and of its label).
    mixed = mixed_numerics(runs)
    for run in runs:
        try:
            cfg, meta, rows = _read_run(run)
            run_windows = read_windows(run)
            d = _run_frame(run, cfg, rows)
            check_against_windows(run, d, run_windows)
        except RunFileError as e:
            read.left.append(str(e))
            continue
        read.windows.update(run_windows)
        read.meta[run.path.name] = meta
        ident, config_id = config_identity(cfg, meta, mixed)
        group = digest({k: v for k, v in ident.items() if k not in ("scheme", "numerics")})
        read.tags[config_id] = finetune_tag(cfg)
        read.flat[config_id] = flatten({k: v for k, v in ident.items() if k not in UNLABELLED})
        if read.tags[config_id]:  # a fine-tune: what its tag says is not repeated, and it is compared with fine-tunes
            read.flat[config_id] = {k: v for k, v in read.flat[config_id].items() if k not in TAGGED}
        read.flat_scheme[config_id] = flatten({"scheme": {k: v for k, v in ident["scheme"].items() if k != "name"}})
        d["config"], d["group"], d["steps"] = config_id, group, cfg.train.steps
        # fine-tuning: the parent's configuration, the budget, the method (scheme label + PoSE, fine-tune length)
        d["ft_parent"] = cfg.finetune.parent_config or ""
        d["ft_steps"] = cfg.train.steps if cfg.finetune.from_run else 0
        d["ft_method"] = d["scheme"] + method_tag(cfg)
        d["bare"] = digest(identity(cfg, seed=False))
        read.frames.append(d)
    return read


def _labelled(df: pd.DataFrame, read: _Read) -> pd.DataFrame:
    """The rows with their 'label': the scheme label, a fine-tune's tag, the configuration keys that differ between
    the runs, the scheme options that tell two configurations of one label apart, an unfinished step, and a scored
    span other than the configuration's own."""
    flat, tags = read.flat, read.tags
    suffix = {}
    for pool in (False, True):  # trained from scratch, fine-tuned: the keys that differ within each kind
        members = {c: f for c, f in flat.items() if bool(tags[c]) == pool}
        varying = sorted(k for k in set().union(*members.values()) if len({f.get(k) for f in members.values()}) > 1)
        suffix.update({c: " · ".join(f"{k}={members[c].get(k)}" for k in varying) for c in members})
    df["label"] = [s + tags[c] + (f" · {suffix[c]}" if suffix[c] else "") for s, c in zip(df["scheme"], df["config"])]
    df["ft_method"] = [m + (f" · {suffix[c]}" if suffix[c] and tags[c] else "") for m, c in zip(df["ft_method"],
                                                                                              df["config"])]
    # Two configurations can still share a label: rope trained with YaRN and plain rope evaluated as rope+yarn×8.
    # Their scheme options that differ go into the label too; a row is never two configurations.
    for label, configs in df.groupby("label")["config"].unique().items():
        if len(configs) > 1:
            keys = sorted(k for k in set().union(*(read.flat_scheme[c] for c in configs))
                          if len({read.flat_scheme[c].get(k) for c in configs}) > 1)
            for c in configs:
                extra = "trained with " + ", ".join(f"{k}={read.flat_scheme[c].get(k)}" for k in keys)
                df.loc[(df["label"] == label) & (df["config"] == c), "label"] = f"{label} · {extra}"
    df["label"] = [lab + (f" · step {a}/{b}" if a != b else "") for lab, a, b in zip(df["label"], df["step"],
                                                                                     df["steps"])]
    # One evaluation scores the same span at every length (a multiple of its longest length); evaluations with
    # other length sets score other spans: their rows are labelled apart (· scored=N), never averaged with these.
    # The span evaluated at the most lengths (then the longest span) keeps the configuration's own label.
    span_key = ["config", "split", "mode", "budget", "S", "precision", "step"]
    scored = df[df["tokens_scored"] > 0]
    for key, g in scored.groupby(span_key):
        if g["tokens_scored"].nunique() > 1:
            main = max(g.groupby("tokens_scored")["L_eval"].nunique().items(), key=lambda x: (x[1], x[0]))[0]
            apart = df.index.isin(g.index[g["tokens_scored"] != main])
            df.loc[apart, "label"] = [f"{lab} · scored={n}" for lab, n in zip(df.loc[apart, "label"],
                                                                             df.loc[apart, "tokens_scored"])]
    return df


def collect(runs: list[Run]) -> pd.DataFrame:
    """The rows of :func:`collect_all` (without the windows and what was left out)."""
    return collect_all(runs).df


WINDOW_REQUIRED = ("scheme", "split", "L_eval", "mode", "stride", "budget", "step", "tokens_scored", "window", "nll",
                   "tokens")
# A window's row is keyed like its eval.csv row (EVAL_KEY): the span scored is part of the key, so two evaluations of
# one length with other length sets (other spans) never pool their windows.
WINDOW_KEY = ("scheme", "split", "L_eval", "mode", "stride", "S", "budget", "step", "precision", "tokens_scored")
NOT_A_NUMBER = {"nan", "inf", "-inf", "+inf"}  # what a non-finite loss is written as


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
        if None in r or any(v is None for v in r.values()):
            raise RunFileError(f"{path} line {i} has the wrong number of fields (truncated or edited)")
    w = pd.DataFrame(rows, columns=columns, dtype=str)
    for c in ("S", "precision"):
        if c not in w:
            w[c] = ""
    numbers = {c: pd.to_numeric(w[c], errors="coerce") for c in ("nll", "tokens", "window")}
    for c, v in numbers.items():
        bad = v.isna() & ~w[c].str.strip().str.lower().isin(NOT_A_NUMBER)
        if bad.any():
            line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            raise RunFileError(f"{path} line {line} holds a {c} that is not a number: {w[c][bad].iloc[0]!r}")
    w = w.assign(**numbers)
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


def window_key(run: str, r: Any) -> tuple:
    """The :func:`read_windows` key of an eval row (a dict or a namedtuple of the collected table)."""
    get = r.get if isinstance(r, dict) else lambda c: getattr(r, c)
    return (run, *(str(int(float(get(c)))) if c in ("L_eval", "stride", "tokens_scored") else str(get(c))
                   for c in WINDOW_KEY))


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


def _cell_windows(col: Collected, rows: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]] | None:
    """seed → per-window (nll, tokens) for the rows of one table cell; None if any seed lacks them (rows whose
    windows disagree never get here: :func:`collect_all` leaves their run out)."""
    out = {}
    for r in rows.itertuples():
        w = col.windows.get(window_key(r.run, r))
        if w is None:
            return None
        out[int(r.seed)] = w
    return out


def comparison(df: pd.DataFrame | Collected, mode: str, split: str = "validation") -> pd.DataFrame:
    """Perplexity table for one mode: index (row label, L_train), one column per eval length.

    A row is one configuration (its label names the keys that differ between rows); its cells are the mean over
    seed replicas, '± std' with several seeds, and a 95% interval: over seeds (t) with ≥ 2, else a bootstrap over the
    evaluation windows (column 'interval' says which). 'diverged' or 'nan' where a replica did not give a finite
    number (never averaged in), 'n/a' where the scheme cannot run at that length, '—' where not evaluated.
    'longest/L' is the ratio of the mean perplexity at the longest length to the one at L; 'seeds' counts replicas.
    Cells not distinguishable from the best of their length (paired test, :func:`best_marks`) are in ``.attrs``."""
    col = df if isinstance(df, Collected) else Collected(df)
    d = col.df
    if d.empty:
        return pd.DataFrame()
    d = d[(d["mode"] == mode) & (d["split"] == split)]
    if d.empty:
        return pd.DataFrame()
    lengths = sorted(int(x) for x in d["L_eval"].unique())
    d = d.assign(row=row_names(d))
    rows, index, stats = [], [], {}
    for name, L in dict.fromkeys(zip(d["row"], d["L_train"])):
        r = d[(d["row"] == name) & (d["L_train"] == L)]
        cells, means, kinds = {}, {}, set()
        for n in lengths:
            c = r[r["L_eval"] == n]
            text, mean, kind = _cell_stats(col, c)
            cells[str(n)] = text
            means[n] = mean
            if kind:
                kinds.add(kind)
            stats[(name, int(L), n)] = (mean, c)
        base, last = means.get(int(L), float("nan")), means[lengths[-1]]
        broken = [cells[k] for k in (str(L), str(lengths[-1])) if cells.get(k) in ("diverged", "nan")]
        cells["longest/L"] = (broken[0] if broken else "n/a" if pd.isna(base) or pd.isna(last)
                              else round(float(last / base), 3))
        cells["seeds"] = int(r["seed"].nunique())
        cells["interval"] = " / ".join(sorted(kinds)) or "—"
        rows.append(cells)
        index.append((name, int(L)))
    t = pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["scheme", "L_train"]), dtype=object)
    t.attrs["best"] = best_marks(col, stats, lengths)
    return t


def row_names(d: pd.DataFrame) -> list[str]:
    """The table row of each eval row: its label, plus the evaluation settings (sliding stride S, token budget,
    precision) that differ within its configuration — rows of other settings are never averaged together."""
    varies = {c: d.groupby("config")[c].nunique().max() > 1 for c in ("budget", "S", "precision")}
    return [label + (f" · S={S}" if varies["S"] else "") + (f" · tokens={budget}" if varies["budget"] else "")
            + (f" · {prec or 'precision ?'}" if varies["precision"] else "")
            for label, budget, S, prec in zip(d["label"], d["budget"], d["S"], d["precision"])]


def _cell_stats(col: Collected, c: pd.DataFrame) -> tuple[str | float, float, str]:
    """(cell text, mean perplexity or NaN, interval method) for the rows of one cell (one row per seed)."""
    if c.empty:
        return "—", float("nan"), ""
    for status, word in STATUS_CELL.items():
        if (c["status"] == status).any():
            return word, float("nan"), ""
    values = c["ppl"].to_numpy(float)
    mean = float(values.mean())
    text = f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ± {float(values.std(ddof=1)):.3f}"
    try:
        if len(values) >= 2:
            iv = stats.seed_interval(values)
        else:
            w = _cell_windows(col, c)
            if w is None:
                return (round(mean, 3) if len(values) == 1 else text), mean, ""
            iv = stats.ppl_interval(list(w.values()), n_boot=BOOTSTRAP)
    except ValueError:
        return text, mean, ""
    kind = f"t, {len(values)} seeds" if len(values) >= 2 else "bootstrap, windows"
    return f"{text} [{iv.lo:.3f}, {iv.hi:.3f}]", mean, kind


BOOTSTRAP = 1000  # resamples per interval: the 2.5/97.5 percentiles move by < 0.1% of the perplexity beyond this


def best_marks(col: Collected, stats_by_cell: dict, lengths: list[int]) -> set[tuple[str, int, int]]:
    """Cells (row, L, length) not distinguishable from the best of their table group at that length: the lowest mean,
    and every row whose paired 95% interval of the difference to it contains zero (same windows, same seeds)."""
    marks: set[tuple[str, int, int]] = set()
    for n in lengths:
        by_group: dict[tuple, list] = {}
        for (name, L, m), (mean, c) in stats_by_cell.items():
            if m == n and not pd.isna(mean):
                key = (c["group"].iloc[0], L, c["budget"].iloc[0], c["S"].iloc[0], c["precision"].iloc[0],
                       c["tokens_scored"].iloc[0])  # rows compete only on the same windows
                by_group.setdefault(key, []).append((mean, name, L, c))
        for members in by_group.values():
            members.sort(key=lambda x: x[0])
            best_mean, best_name, best_L, best_rows = members[0]
            tests = [(name, L, _paired(col, c, best_rows)) for mean, name, L, c in members[1:]]
            if any(p is None for _, _, p in tests):
                continue  # a row without per-window losses cannot be tested: no claim about this group
            marks.add((best_name, best_L, n))
            marks |= {(name, L, n) for name, L, p in tests if not p.excludes_zero}
    return marks


def _paired(col: Collected, ra: pd.DataFrame, rb: pd.DataFrame) -> stats.Paired | None:
    """The paired difference of two cells' perplexities (rows: one per seed), or None without per-window losses
    for every seed or on different windows."""
    wa, wb = _cell_windows(col, ra), _cell_windows(col, rb)
    if wa is None or wb is None:
        return None
    try:
        return stats.paired_difference(wa, wb, n_boot=BOOTSTRAP)
    except ValueError:
        return None


def compare(col: Collected, a: str, b: str, split: str = "validation",
            modes: tuple[str, ...] | list[str] = MODES, partial: bool = False) -> pd.DataFrame:
    """Paired difference ppl(a) − ppl(b) at each mode and eval length, for every configuration group that has both
    schemes (rows matched by their scheme label): the same windows and seeds on both sides, a 95% interval over
    seeds (≥ 2 paired seeds) or a paired bootstrap over windows, and whether it excludes zero. Rows of a --partial
    evaluation (an unfinished run's step) are compared only with ``partial``. What was not compared, and why, is
    in ``.attrs["left_out"]`` (one line per configuration and reason)."""
    for missing in (x for x in (a, b) if x not in set(col.df["scheme"])):
        raise ConfigError(f"--compare: no rows for scheme {missing!r}; rows here: "
                          f"{', '.join(sorted(set(col.df['scheme'])))}")
    d = col.df[(col.df["split"] == split) & col.df["mode"].isin(modes) & col.df["scheme"].isin([a, b])]
    out, why = [], {}
    settings = ["mode", "group", "L_train", "L_eval", "budget", "S", "precision", "step", "tokens_scored"]
    for (mode, *_), g in d.groupby(settings, sort=True):
        row, reason = _compared(col, g, a, b, partial)
        if row is None:
            label = g["label"].iloc[0].replace(g["scheme"].iloc[0], "", 1).lstrip(" ·") or "-"
            why.setdefault((label, reason), []).append(f"{mode} {int(g['L_eval'].iloc[0])}")
        else:
            out.append({"mode": mode, **row})
    left = [f"{a} vs {b} ({label}) at {', '.join(cells)}: {reason}" for (label, reason), cells in why.items()]
    if not out:
        raise ConfigError(f"--compare {a} {b}: nothing to compare; " + ("; ".join(left) or "no rows"))
    t = pd.DataFrame(out)
    t.attrs["left_out"] = left
    return t


def _compared(col: Collected, g: pd.DataFrame, a: str, b: str, partial: bool) -> tuple[dict | None, str]:
    """One row of :func:`compare` for the rows ``g`` of one setting (both schemes), or (None, why not)."""
    ra, rb = g[g["scheme"] == a], g[g["scheme"] == b]
    step, steps = int(g["step"].iloc[0]), int(g["steps"].iloc[0])
    if step != steps and not partial:
        return None, f"a partial evaluation (step {step}/{steps}); compared only with --partial"
    if ra.empty or rb.empty:
        return None, f"only {a if rb.empty else b} was evaluated with these settings"
    # Pair the seeds both have with a finite number; say which were dropped and why.
    bad = {int(x) for x in pd.concat([ra, rb]).query("status != 'ok'")["seed"]}
    common = (set(ra["seed"]) & set(rb["seed"])) - bad
    dropped = sorted((set(ra["seed"]) | set(rb["seed"])) - common)
    if not common:
        return None, "no seed has a finite perplexity on both sides"
    ra, rb = ra[ra["seed"].isin(common)], rb[rb["seed"].isin(common)]
    p = _paired(col, ra, rb)
    if p is None:
        return None, ("no per-window losses for every seed on both sides (windows.csv missing, or not scoring the "
                      "same windows); re-evaluate the runs with `pe-bench eval RUN_DIR`")
    label = ra["label"].iloc[0].replace(a, "", 1).lstrip(" ·")
    verdict = {"lower": f"{a} lower", "higher": f"{b} lower"}.get(p.verdict, "not distinguishable")
    return {"config": label or "-", "L": int(g["L_train"].iloc[0]), "L_eval": int(g["L_eval"].iloc[0]),
            f"ppl {a}": round(float(ra["ppl"].mean()), 3), f"ppl {b}": round(float(rb["ppl"].mean()), 3),
            "difference": round(p.diff, 3), "95% interval": f"[{p.interval.lo:.3f}, {p.interval.hi:.3f}]",
            "method": f"t, {p.interval.n} seeds" if p.interval.method == stats.T_METHOD
            else f"paired bootstrap, {p.interval.n} windows",
            "excludes 0": "yes" if p.excludes_zero else "no", "verdict": verdict,
            "seeds left out": ", ".join(map(str, dropped)) or "-"}, ""


def _mark(value: Any, marked: bool, bold: tuple[str, str]) -> str:
    return f"{bold[0]}{value}{bold[1]}" if marked else str(value)


def write_tables(df: pd.DataFrame | Collected, out_dir: Path, title: str = "", split: str = "validation") -> list[Path]:
    """comparison.csv (every mode, wide) and comparison.md (one table per mode), for one split."""
    col = df if isinstance(df, Collected) else Collected(df)
    df = col.df
    out_dir.mkdir(parents=True, exist_ok=True)
    parts, md = [], [f"# {title}\n" if title else ""]
    for mode in MODES:
        t = comparison(col, mode, split)
        if t.empty:
            continue
        flat = t.reset_index()
        flat.insert(0, "mode", mode)
        parts.append(flat)
        d = df[(df["mode"] == mode) & (df["split"] == split)]
        stride = sorted(d["stride"].unique())
        what = "non-overlapping blocks" if mode == "nonoverlapping" else f"sliding window, stride S={_fmt(stride)}"
        scored = sorted(int(x) for x in d[d["tokens_scored"] > 0]["tokens_scored"].unique())
        md.append(f"\n## Perplexity on the {split} split, {what} (columns: eval length in tokens; "
                  f"{_fmt(scored) if scored else 0} tokens scored per length)\n\n{_markdown(t)}\n\n{LEGEND}\n")
    paths = []
    if parts:
        csv_path = out_dir / "comparison.csv"
        atomic_write_text(csv_path, pd.concat(parts, ignore_index=True).to_csv(index=False))
        md_path = out_dir / "comparison.md"
        atomic_write_text(md_path, "".join(md).lstrip())
        paths = [csv_path, md_path]
    return paths


LEGEND = ("Cells: mean perplexity (± std over seeds) [95% interval: over seeds (t) with ≥ 2 seeds, else a bootstrap "
          "over the evaluation windows — column `interval`]. **Bold**: the best of its column and every row not "
          "distinguishable from it (paired 95% interval of the difference contains 0). `diverged`/`nan`: a replica "
          "gave no finite number (never averaged in); `n/a`: the scheme cannot run at that length; `—`: not "
          "evaluated.")


def _fmt(strides) -> str:
    return ", ".join(str(int(s)) for s in strides) if len(strides) > 1 else str(int(strides[0]))


def _markdown(t: pd.DataFrame) -> str:
    best = t.attrs.get("best", set())
    rows = [[scheme, L] + [_mark(v, c.isdigit() and (scheme, L, int(c)) in best, ("**", "**")) for c, v in row.items()]
            for (scheme, L), row in t.iterrows()]
    return markdown.table(["scheme", "L", *t.columns], rows)


def rich_table(t: pd.DataFrame, title: str) -> Table:
    table = Table(title=title, header_style="bold", caption="bold: not distinguishable from the best (paired 95%)")
    table.add_column("scheme", no_wrap=True)
    table.add_column("L", justify="right")
    for c in t.columns:
        table.add_column(c, justify="right")
    best = t.attrs.get("best", set())
    for (scheme, L), row in t.iterrows():
        cells = [_mark(escape(str(v)), c.isdigit() and (scheme, L, int(c)) in best, ("[bold]", "[/bold]"))
                 for c, v in row.items()]
        table.add_row(escape(str(scheme)), str(L), *cells)
    return table


POSITION_NUMERIC = ("L_train", "L_eval", "pos_start", "pos_end", "tokens", "seed")
POSITION_REQUIRED = ("scheme", "split", "L_train", "L_eval", "pos_start", "pos_end", "loss", "tokens", "seed")


def collect_positions(runs: list[Run], left: list[str] | None = None) -> pd.DataFrame:
    """Loss-by-position rows of the runs that have them. A positions.csv that cannot be read whole costs its run's
    lines in the plot, named in one line appended to ``left``."""
    frames = []
    for run in runs:
        if not run.positions_csv.exists():
            continue
        try:
            rows, columns = read_whole_csv(run.positions_csv, None, POSITION_REQUIRED, allow_empty=True)
            d = pd.DataFrame(rows, columns=columns, dtype=str)
            if d.isna().any().any():
                raise RunFileError(f"{run.positions_csv} has a line with the wrong number of fields")
            for c in POSITION_NUMERIC:
                d[c] = pd.to_numeric(d[c])
            d["loss"] = pd.to_numeric(d["loss"].where(~d["loss"].str.lower().isin(NOT_A_NUMBER), "nan"))
        except (RunFileError, ValueError) as e:
            text = str(e) if isinstance(e, RunFileError) else f"{run.positions_csv} holds a value that is not a number"
            if left is not None:
                left.append(f"{text}: its loss-by-position lines are left out")
            continue
        frames.append(d.assign(run=run.path.name)[["run", *columns]])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def replace_together(out: Path, write: Callable[[Path], list[Path]]) -> list[Path]:
    """``write(staging)`` writes a report's files into a staging folder inside ``out``; once all are written they
    are moved into ``out`` (a rename each: no space needed). Any failure leaves ``out`` as it was."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".report-", dir=out))
    try:
        written = write(staging)
        for p in written:
            os.replace(p, out / p.name)
        return [out / p.name for p in written]
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_table_files(df: pd.DataFrame | Collected, out: Path, title: str, split: str) -> tuple[Collected, list[Path]]:
    """eval_long.csv (every row, sorted) and the comparison tables under ``out``; returns the sorted rows and the
    files written."""
    col = df if isinstance(df, Collected) else Collected(df)
    df = col.df.sort_values(["data", "model", "L_train", "scheme", "seed", "split", "mode", "L_eval"], kind="stable")
    col = Collected(df, col.windows, col.left_out, col.meta)
    # the fine-tuning columns only where there are fine-tunes (the long CSV of other reports stays as it was)
    fine_tunes = (df.get("ft_parent", pd.Series([], dtype=str)) != "").any()
    plain = df if fine_tunes else df.drop(columns=list(FINETUNE_COLUMNS), errors="ignore")
    atomic_write_text(out / "eval_long.csv", plain.to_csv(index=False))
    return col, [out / "eval_long.csv", *write_tables(col, out, title, split)]

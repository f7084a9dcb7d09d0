"""One collector for every table: the rows of many run directories, each file read whole and checked, each row with
the identity of its configuration. A run's task says which rows it has (its ``metric``): eval.csv for a task scored
by perplexity (with windows.csv, the per-window losses of the intervals), accuracy.csv for one scored by accuracy.
Unreadable files and unfinished runs are left out with one line each; diverged runs give 'diverged' rows; a run
found twice (a copied results folder) counts once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pe_bench import tasks
from pe_bench.build import build_scheme
from pe_bench.config import Config, reference_length, run_lengths, scheme_spec, with_options
from pe_bench.evaluate.accuracy import ACCURACY_COLUMNS
from pe_bench.evaluate.perplexity import budget_label, context_ranges, sliding_stride
from pe_bench.finetune import finetune_tag, method_tag
from pe_bench.report.files import (
    NUMERIC,
    check_against_windows,
    legacy_labels,
    read_accuracy_rows,
    read_context,
    read_eval_rows,
    read_positions,
    read_repetition,
    read_windows,
)
from pe_bench.report.labels import TAGGED, UNLABELLED, config_identity, flatten, labelled, mixed_numerics
from pe_bench.runs import Run, RunFileError, RunMeta, Status, digest, identity
from pe_bench.tasks import build_task

FINETUNE_COLUMNS = ("ft_parent", "ft_steps", "ft_method", "bare")  # collect_all's columns for the extension table
# what pairs a trained-long reference (report.headroom), and whether a row is the scheme as trained (not an
# eval-time variant: those get no headroom row)
REFERENCE_COLUMNS = ("setup", "scheme_id", "tokens_trained", "as_trained")
PERPLEXITY_KEY = ["config", "seed", "scheme", "split", "L_eval", "mode", "stride", "S", "budget", "step", "precision",
                  "warmup", "tokens_scored"]  # a row of one run: a second row with the same key is a second copy of the run
ACCURACY_KEY = ["config", "seed", "task", "scheme", "L_eval", "depth", "examples", "step", "precision"]


@dataclass
class Collected:
    """Evaluation rows of many runs, each with the identity of its configuration, what was left out, and the meta.json
    of each run read (by run name)."""

    df: pd.DataFrame
    windows: dict[tuple, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    meta: dict[str, RunMeta] = field(default_factory=dict)
    # context use past L (context.csv) of the runs whose rows are in df, with their 'label' and 'config'
    context: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the repetition probe (repetition.csv) of the same runs, labelled the same way
    repetition: pd.DataFrame = field(default_factory=pd.DataFrame)

    def __post_init__(self) -> None:
        """Rows made elsewhere (tests, older files) without identity columns: one configuration per scheme label."""
        if not self.df.empty:
            defaults = {"label": self.df["scheme"], "config": "", "group": "", "budget": "", "S": "", "warmup": "0", "step": 0,
                        "steps": 0, "run": "", "precision": "", "ft_parent": "", "ft_steps": 0,
                        "ft_method": self.df["scheme"], "bare": ""}
            missing = {k: v for k, v in defaults.items() if k not in self.df}
            if missing:
                self.df = self.df.assign(**missing)


@dataclass
class Accuracy:
    """Accuracy rows of many task runs (columns of accuracy.csv plus run, config, label), what was left out, and the
    meta.json of each run read (by run name)."""

    df: pd.DataFrame
    left_out: list[str] = field(default_factory=list)
    meta: dict[str, RunMeta] = field(default_factory=dict)


@dataclass
class Collection:
    """Every table's rows of a set of runs: the perplexity rows, the accuracy rows, and the runs of each."""

    perplexity: Collected
    accuracy: Accuracy
    runs: dict[str, list[Run]] = field(default_factory=dict)  # metric → the runs read for it

    @property
    def left_out(self) -> list[str]:
        return self.perplexity.left_out + self.accuracy.left_out


def collect_runs(runs: list[Run], keep: Callable[[pd.DataFrame], Any] | None = None,
                 split: str | None = None) -> Collection:
    """The rows of every run, by the metric of its task (a run whose config cannot be read goes with the perplexity
    runs, whose collector names it). ``keep``, ``split``: as :func:`collect_all`'s."""
    by_metric: dict[str, list[Run]] = {"perplexity": [], "accuracy": []}
    for run in runs:
        by_metric[_metric(run)].append(run)
    return Collection(collect_all(by_metric["perplexity"], keep, split), collect_accuracy(by_metric["accuracy"]),
                      by_metric)


def _metric(run: Run) -> str:
    try:
        name = run.load_config().task.name
    except RunFileError:
        return "perplexity"
    return tasks.get(name).metric if name in tasks.names() else "perplexity"


def _readable(runs: list[Run], rows_of: Callable[[Run, Config, dict[str, Any]], Any],
              left: list[str]) -> Iterator[tuple[Run, Config, dict[str, Any], Any, dict[str, Any], str]]:
    """(run, config, meta, ``rows_of(run, config, meta)``, the configuration's identity, its hash) of every run whose
    files read whole; one line in ``left`` for each other run (``rows_of`` raises RunFileError for a file it
    refuses). Runs made with another torch, device or CPU thread count do not give the same numbers
    (docs/trust.md, "Determinism"): when the runs disagree on it, it is part of each configuration's identity."""
    mixed = mixed_numerics(runs)
    for run in runs:
        try:
            meta = run.meta()
            cfg = run.load_config()
            if cfg.task.name not in tasks.names():
                raise RunFileError(f"{run.path}: task={cfg.task.name} is not a task this pe-bench has; install the "
                                   "pe-bench it was made with")
            got = rows_of(run, cfg, meta)
        except RunFileError as e:
            left.append(str(e))
            continue
        ident, config_id = config_identity(cfg, meta, mixed)
        yield run, cfg, meta, got, ident, config_id


def _without_copies(df: pd.DataFrame, key: list[str], left: list[str]) -> pd.DataFrame:
    """The rows with the first copy of a run found twice (a copied results folder); one line in ``left`` each."""
    dup = df.duplicated(key)
    if dup.any():
        for name in sorted(set(df.loc[dup, "run"])):
            left.append(f"{name}: a second copy of a run already read; the first is used")
        df = df[~dup].reset_index(drop=True)
    return df


def collect_all(runs: list[Run], keep: Callable[[pd.DataFrame], Any] | None = None,
                split: str | None = None) -> Collected:
    """Every trustworthy eval row of the given runs, in run order, with columns 'run', 'config' (the hash of the
    configuration without the seed: rows of one config are seed replicas), 'group' (also without the scheme: the
    rows that compete in one table) and 'label' (the scheme label plus the configuration keys that differ between
    the runs, e.g. ``nope · model.n_layers=2``). Unreadable files and unfinished runs are left out, each with one
    line in ``left_out``; diverged runs give 'diverged' rows. ``keep(df)``: a row mask applied before the labels are
    made (e.g. a sweep's own lengths and settings), so that rows left out never shape the labels of the others.
    ``split``: only the rows (and context, repetition rows) of that evaluation split; a run with none there is left
    out, named, rather than shown with another split's numbers."""
    read = _read_runs(runs)
    if not read.frames:
        return Collected(pd.DataFrame(), read.windows, read.left, read.meta)
    df = pd.concat(read.frames, ignore_index=True)
    for c in NUMERIC:
        df[c] = pd.to_numeric(df[c])
    for c in ("loss", "ppl", "bpb"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    df["step"] = pd.to_numeric(df["step"]).astype(int)
    if split is not None:
        df = _on_split(df, split, read)
        if df.empty:
            return Collected(pd.DataFrame(), read.windows, read.left, read.meta)
    if keep is not None:
        df = df[keep(df)].reset_index(drop=True)
    # A diverged run was never evaluated: its rows take the precision its configuration's other seeds were
    # evaluated in, so that they sit in the same table row (and make it say 'diverged').
    diverged = df["status"] == "diverged"
    if diverged.any():
        usual = df[~diverged].groupby("config")["precision"].agg(lambda p: p.mode().iloc[0]).to_dict()
        df.loc[diverged, "precision"] = [usual.get(c, "fp32") for c in df.loc[diverged, "config"]]
    df = _without_copies(df, PERPLEXITY_KEY, read.left)
    df = labelled(df, read.flat, read.tags, read.flat_scheme)
    return Collected(df, read.windows, read.left, read.meta, _labelled_context(read.context, df),
                     _labelled_context(read.repetition, df))


def _on_split(df: pd.DataFrame, split: str, read: _Read) -> pd.DataFrame:
    """The rows on ``split`` (the runs' context and repetition rows in ``read`` likewise); one line in ``read.left``
    for each run that has none there. A diverged run was evaluated on no split: its 'diverged' rows stand on every
    one, so that no report averages its configuration over the other seeds alone."""
    df = df.assign(split=df["split"].where(df["status"] != "diverged", split))  # a diverged run is on no split
    on = df["split"] == split
    for name in dict.fromkeys(df.loc[~df["run"].isin(set(df.loc[on, "run"])), "run"]):
        read.left.append(f"{name}: no evaluation rows on the {split} split (`pe-bench eval` it with "
                         f"eval.split={split} to add them)")
    read.context = [f[f["split"] == split] for f in read.context if not f.empty]
    read.repetition = [f[f["split"] == split] for f in read.repetition if not f.empty]
    return df[on].reset_index(drop=True)


def _labelled_context(frames: list[pd.DataFrame], df: pd.DataFrame) -> pd.DataFrame:
    """The context-use (or repetition) rows of the runs kept in ``df``, each with the 'label', 'config' and 'group'
    of its run's eval rows of the same scheme label."""
    frames = [f for f in frames if not f.empty]
    if not frames or df.empty:
        return pd.DataFrame()
    names = df[["run", "scheme", "label", "config", "group"]].drop_duplicates(["run", "scheme"])
    return pd.concat(frames, ignore_index=True).merge(names, on=["run", "scheme"], how="inner")


@dataclass
class _Read:
    """What collect_all reads of its runs: a frame of rows per run, their per-window losses, the runs left out
    (one line each), per configuration its flattened identity (all keys; the scheme's options) and fine-tune tag,
    and each run's meta.json."""

    frames: list[pd.DataFrame] = field(default_factory=list)
    windows: dict[tuple, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)
    flat: dict[str, dict[str, str]] = field(default_factory=dict)
    flat_scheme: dict[str, dict[str, str]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    meta: dict[str, RunMeta] = field(default_factory=dict)
    context: list[pd.DataFrame] = field(default_factory=list)
    repetition: list[pd.DataFrame] = field(default_factory=list)


def _read_runs(runs: list[Run]) -> _Read:
    read = _Read()
    for run, cfg, meta, (d, run_windows, context), ident, config_id in _readable(runs, _eval_frame, read.left):
        read.windows.update(run_windows)
        read.context.append(context)
        read.repetition.append(read_repetition(run))
        read.meta[run.path.name] = meta
        group = digest({k: v for k, v in ident.items() if k not in ("scheme", "numerics")})
        read.tags[config_id] = finetune_tag(cfg)
        read.flat[config_id] = flatten({k: v for k, v in ident.items() if k not in UNLABELLED})
        if read.tags[config_id]:  # a fine-tune: what its tag says is not repeated, and it is compared with fine-tunes
            read.flat[config_id] = {k: v for k, v in read.flat[config_id].items() if k not in TAGGED}
        read.flat_scheme[config_id] = flatten({"scheme": {k: v for k, v in ident["scheme"].items() if k != "name"}})
        d["config"], d["group"], d["steps"] = config_id, group, cfg.train.steps
        # what a trained-long reference must share with the run it bounds (pe_bench.report.headroom)
        d["setup"] = digest({k: v for k, v in ident.items() if k in ("model", "data", "task")})
        d["scheme_id"] = digest(ident["scheme"])
        d["tokens_trained"] = cfg.train.steps * cfg.train.batch_size * cfg.train.grad_accum * cfg.train.seq_len
        d["as_trained"] = _as_trained(cfg, d["scheme"])
        # fine-tuning: the parent's configuration, the budget, the method (scheme label + PoSE, fine-tune length)
        d["ft_parent"] = cfg.finetune.parent_config or ""
        d["ft_steps"] = cfg.train.steps if cfg.finetune.from_run else 0
        d["ft_method"] = d["scheme"] + method_tag(cfg)
        d["bare"] = digest(identity(cfg, seed=False))
        read.frames.append(d)
    return read


def _eval_frame(run: Run, cfg: Config, meta: RunMeta) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """A run's eval rows as a frame, checked against its per-window losses, those losses, and its context use."""
    rows = _eval_rows(run, cfg, meta)
    run_windows = read_windows(run)
    d = _run_frame(run, cfg, rows)
    check_against_windows(run, d, run_windows)
    context = read_context(run)
    return d, run_windows, context if not context.empty else _context_from_positions(run, d)


def _context_from_positions(run: Run, d: pd.DataFrame) -> pd.DataFrame:
    """Context use of a run evaluated before context.csv existed, from its per-position curves (positions.csv) where
    their buckets fall on the range edges: the same differences, with no interval (``lo``/``hi`` NaN) since the
    per-window losses of each range were not kept. Empty when the buckets do not fit or there is no positions.csv."""
    try:
        pos = read_positions(run)
        if pos.empty:
            return pd.DataFrame()
        pos["scheme"] = pos["scheme"].map(legacy_labels(run))
    except RunFileError:
        return pd.DataFrame()  # an unreadable curve costs its '—' cells and plot lines (collect_positions names it)
    out = []
    for (scheme, split, L, step, precision), g in pos.groupby(["scheme", "split", "L_train", "step", "precision"]):
        ref = _range_loss(g[g["L_eval"] == L], L // 2, L)
        spans = d[(d["scheme"] == scheme) & (d["split"] == split) & (d["mode"] == "nonoverlapping")
                  & (d["status"] == "ok")]
        for n in sorted(set(g["L_eval"])):
            at = spans[pd.to_numeric(spans["L_eval"]) == n]
            if n <= L or ref is None or at.empty:
                continue
            for a, b in context_ranges(int(L), int(n)):
                loss = _range_loss(g[g["L_eval"] == n], a, b)
                if loss is not None:
                    out.append({"scheme": scheme, "split": split, "L_train": int(L), "L_eval": int(n),
                                "pos_start": a, "pos_end": b, "loss": loss[0], "ref_loss": ref[0],
                                "gain": loss[0] - ref[0], "lo": float("nan"), "hi": float("nan"), "blocks": 0,
                                "tokens": loss[1], "seed": int(g["seed"].iloc[0]), "budget": at["budget"].iloc[0],
                                "step": str(int(step)), "precision": precision,
                                "tokens_scored": int(float(at["tokens_scored"].iloc[0]))})
    return pd.DataFrame(out).assign(run=run.path.name) if out else pd.DataFrame()


def _range_loss(g: pd.DataFrame, a: int, b: int) -> tuple[float, int] | None:
    """(token-weighted mean loss, tokens) of the position buckets exactly covering [a, b), or None if they do not."""
    inside = g[(g["pos_start"] >= a) & (g["pos_end"] <= b)]
    if inside.empty or inside["pos_start"].min() != a or inside["pos_end"].max() != b \
            or int(inside["pos_end"].sub(inside["pos_start"]).sum()) != b - a or inside["loss"].isna().any():
        return None
    return float((inside["loss"] * inside["tokens"]).sum() / inside["tokens"].sum()), int(inside["tokens"].sum())


def _eval_rows(run: Run, cfg: Config, meta: RunMeta) -> list[dict[str, Any]]:
    """The eval rows of a run the report can use: a diverged run gives 'diverged' rows (beside the rows of a
    --partial evaluation, labelled); an unfinished one only its --partial rows. RunFileError otherwise."""
    status = meta.status
    if status == Status.DIVERGED:
        return _diverged_rows(cfg, meta) + (read_eval_rows(run, meta) if run.eval_csv.exists() else [])
    if not run.eval_csv.exists():
        raise RunFileError(f"{run.path} has no eval.csv (status {status})")
    rows = read_eval_rows(run, meta)
    if status != Status.DONE and {str(r.get("step")) for r in rows} & {"None", "", str(cfg.train.steps)}:
        raise RunFileError(f"{run.path} is not finished (status {status}); its rows are left out until "
                           "it is (or evaluate it with `pe-bench eval --partial`)")
    return rows


def _run_frame(run: Run, cfg: Config, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A run's eval rows as a frame, with the columns older files lack and the step of un-stepped rows filled in."""
    d = pd.DataFrame(rows, dtype=object)  # a column some rows lack must not turn the others' integers into floats
    for c in ("budget", "step", "note", "S", "precision", "warmup"):
        if c not in d:
            d[c] = ""
    d["step"] = d["step"].replace({None: "", "None": ""}).astype(str).replace("", str(cfg.train.steps))
    for c in ("budget", "S", "precision"):
        d[c] = [("" if pd.isna(v) else str(v)) for v in d[c]]
    d["warmup"] = [("0" if pd.isna(v) or v in ("", "None") else str(v)) for v in d["warmup"]]  # older files: none
    d.insert(0, "run", run.path.name)
    return d


def _diverged_rows(cfg: Config, meta: RunMeta) -> list[dict[str, Any]]:
    """Rows that say 'diverged' at every length and mode the run would have been evaluated at."""
    L, ecfg = reference_length(cfg), cfg.eval
    spec = scheme_spec(cfg.scheme)
    labels = dict.fromkeys(build_scheme(cfg, sp).label() for sp in
                           [spec] + ([with_options(spec, v) for v in spec.eval_variants] if ecfg.variants else []))
    base = {
            "base_scheme": cfg.scheme["name"], "model": cfg.model.name, "data": cfg.data.name, "split": ecfg.split,
            "L_train": L, "seed": cfg.seed, "loss": "nan", "ppl": "nan", "bpb": "nan", "tokens_scored": 0,
            "status": "diverged", "note": f"training diverged at step {meta.diverged_step}", "step": ""}
    rows, S, longest = [], sliding_stride(cfg), max(run_lengths(cfg))
    for label in labels:  # the base scheme and every eval-time variant: each of their rows says 'diverged'
        for n in run_lengths(cfg):
            common = {**base, "scheme": label, "L_eval": n, "ratio": round(n / L, 4)}
            rows.append({**common, "mode": "nonoverlapping", "stride": n, "S": "", "warmup": "0",
                         "budget": budget_label(ecfg.max_tokens)})
            rows.append({**common, "mode": "sliding", "stride": min(S, n), "S": S, "warmup": longest,
                         "budget": budget_label(ecfg.sliding_max_tokens)})
    return rows


def collect(runs: list[Run]) -> pd.DataFrame:
    """The rows of :func:`collect_all` (without the windows and what was left out)."""
    return collect_all(runs).df


def _as_trained(cfg: Config, labels: pd.Series) -> pd.Series:
    """Which rows' scheme labels are the run's model as trained (the others: its eval-time variants)."""
    return labels == build_scheme(cfg, scheme_spec(cfg.scheme)).label()


def collect_accuracy(runs: list[Run]) -> Accuracy:
    """Every trustworthy accuracy row of the given task runs, with 'run', 'config' and 'label' (the scheme label plus
    the keys that differ between the configurations of one task); the rules of :func:`collect_all`."""
    frames, flat, left, metas = [], {}, [], {}
    for run, cfg, meta, rows, ident, config_id in _readable(runs, _accuracy_rows, left):
        metas[run.path.name] = meta
        flat[config_id] = flatten({k: v for k, v in ident.items() if k not in UNLABELLED})
        d = pd.DataFrame(rows).reindex(columns=ACCURACY_COLUMNS)
        d.insert(0, "run", run.path.name)
        d["config"] = config_id
        d["chance"] = _chance(cfg, d)
        d["baseline"] = _baseline(cfg, d)
        d["as_trained"] = _as_trained(cfg, d["scheme"])
        frames.append(d)
    if not frames:
        return Accuracy(pd.DataFrame(), left, metas)
    df = pd.concat(frames, ignore_index=True)
    for c in ("L_train", "L_eval", "seed", "examples"):
        df[c] = pd.to_numeric(df[c])
    for c in ("exact_match", "token_accuracy", "solved"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    for c in ("outcomes", "heldout"):
        df[c] = df[c].fillna("").astype(str)
    df["depth"] = df["depth"].fillna("").astype(str)
    df = _without_copies(df, ACCURACY_KEY, left)
    # Keys that differ between the configurations of one task (other than the scheme and seed) go into the label.
    labels = {}
    for task, g in df.groupby("task"):
        configs = list(dict.fromkeys(g["config"]))
        varying = sorted(k for k in set().union(*(flat[c] for c in configs))
                         if k not in ("task.name",) and len({flat[c].get(k) for c in configs}) > 1)
        for c in configs:
            labels[(task, c)] = " · ".join(f"{k}={flat[c].get(k)}" for k in varying)
    df["label"] = [s + (f" · {labels[(t, c)]}" if labels[(t, c)] else "")
                   for s, t, c in zip(df["scheme"], df["task"], df["config"])]
    return Accuracy(df, left, metas)


def _scored_tasks(cfg: Config) -> dict[str, tasks.SyntheticTask]:
    """The task of a run and its evaluation variants, by the label of their rows."""
    task = build_task(cfg.task, {"train": np.zeros(1), "validation": np.zeros(1)})
    return {cfg.task.name: task, **dict(task.eval_variants())}


def _chance(cfg: Config, d: pd.DataFrame) -> list[float]:
    """Exact match by guessing for each row (NaN where the task does not say, or cannot build that length)."""
    scored = _scored_tasks(cfg)
    out = []
    for label, n in zip(d["task"], pd.to_numeric(d["L_eval"])):
        try:
            out.append(float(scored[label].chance(int(n))))
        except (KeyError, NotImplementedError, tasks.TaskLengthError):
            out.append(float("nan"))
    return out


def _baseline(cfg: Config, d: pd.DataFrame) -> list[float]:
    """The trivial baseline's exact match for each row (SyntheticTask.trivial_baseline on the row's length, depth
    and number of examples), computed once per task options, length, depth and count; NaN where the task cannot
    build that length."""
    scored = _scored_tasks(cfg)
    out = []
    for label, n, depth, count in zip(d["task"], pd.to_numeric(d["L_eval"]), d["depth"], d["examples"]):
        task = scored.get(label)
        key = (label, repr(task.cfg) if task else "", int(n), str(depth), int(count))
        if key not in _BASELINES:
            try:
                at = None if str(depth) in ("", "nan", "None") else float(depth)
                _BASELINES[key] = float(task.trivial_baseline(int(n), int(count), at)) if task else float("nan")
            except tasks.TaskLengthError:
                _BASELINES[key] = float("nan")
        out.append(_BASELINES[key])
    return out


_BASELINES: dict[tuple, float] = {}  # one per (task, options, length, depth, examples): the examples are fixed


def _accuracy_rows(run: Run, cfg: Config, meta: RunMeta) -> list[dict[str, Any]]:
    """A task run's accuracy rows: 'diverged' rows for a diverged run; an unfinished run is a RunFileError."""
    status = meta.status
    if status == Status.DIVERGED:
        return _diverged_accuracy_rows(cfg, meta)
    if status != Status.DONE or not run.accuracy_csv.exists():
        raise RunFileError(f"{run.path} is not finished (status {status}); its rows are left out until it "
                           "is")
    return read_accuracy_rows(run, meta)


def _diverged_accuracy_rows(cfg: Config, meta: RunMeta) -> list[dict[str, Any]]:
    """Accuracy rows that say 'diverged' at every length and depth the run would have been evaluated at."""
    L = reference_length(cfg)
    return [{"task": label, "scheme": cfg.scheme["name"], "base_scheme": cfg.scheme["name"],
             "model": cfg.model.name, "L_train": L, "L_eval": n, "ratio": round(n / L, 4),
             "depth": "" if d is None else d, "exact_match": "nan", "token_accuracy": "nan", "solved": "",
             "examples": cfg.task.eval_examples, "answer_tokens": 0, "seed": cfg.seed, "step": "",
             "precision": "", "status": "diverged", "note": f"training diverged at step {meta.diverged_step}",
             "outcomes": "", "heldout": ""}
            for label, task in _scored_tasks(cfg).items() for n in run_lengths(cfg) for d in task.eval_depths()]


def collect_positions(runs: list[Run], left: list[str] | None = None) -> pd.DataFrame:
    """Loss-by-position rows of the runs that have them. A positions.csv that cannot be read whole costs its run's
    lines in the plot, named in one line appended to ``left``."""
    frames = []
    for run in runs:
        try:
            d = read_positions(run)
            if d.empty and not len(d.columns):
                continue
            d["scheme"] = d["scheme"].map(legacy_labels(run))
        except RunFileError as e:
            if left is not None:
                left.append(f"{e}: its loss-by-position lines are left out")
            continue
        frames.append(d.assign(run=run.path.name)[["run", *d.columns]])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

"""Task runs → accuracy tables (rows: scheme variant; columns: eval length; one table per task and training length)
and plots (accuracy vs eval length; the passkey heatmap of accuracy by length × depth).

The row rules are the perplexity tables' (pe_bench.report): a row is one configuration (the identity without the
seed; runs that disagree on numerics are never one row), its seeds are averaged (mean ± std), a diverged replica makes
the cell say ``diverged`` (never averaged in), an unfinished run or an unreadable or altered accuracy.csv is left out
with one line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pe_bench import markdown, tasks
from pe_bench.evaluate.accuracy import ACCURACY_COLUMNS
from pe_bench.config import Config, reference_length, run_lengths
from pe_bench.report import STATUSES, UNLABELLED, config_identity, flatten, mixed_numerics, read_whole_csv
from pe_bench.runs import Run, RunFileError, atomic_write_text
from pe_bench.tasks import build_task

REQUIRED = ("task", "scheme", "L_train", "L_eval", "depth", "exact_match", "token_accuracy", "examples", "seed",
            "status")
METRICS = {"exact_match": "exact match", "token_accuracy": "per-token accuracy"}


def is_task_run(run: Run) -> bool:
    """A run of a synthetic task (its config says so); unreadable configs count as not (the perplexity report names
    them)."""
    try:
        return tasks.get(run.load_config().task.name).metric != "perplexity"
    except RunFileError:
        return False


def read_accuracy_rows(run: Run, meta: dict[str, Any]) -> list[dict[str, str]]:
    """A run's accuracy.csv, checked whole (as report.read_eval_rows): never used in part."""

    path = run.accuracy_csv
    rows, _ = read_whole_csv(path, meta.get("accuracy_csv_sha256"), REQUIRED)
    for i, r in enumerate(rows, 2):
        if None in r or r["status"] not in STATUSES:
            raise RunFileError(f"{path} line {i} is malformed (truncated or edited)")
    return rows


def _diverged_rows(cfg: Config, meta: dict[str, Any]) -> list[dict[str, Any]]:
    depths = build_task(cfg.task, {"train": np.zeros(1), "validation": np.zeros(1)}).eval_depths()
    L = reference_length(cfg)
    return [{"task": cfg.task.name, "scheme": cfg.scheme["name"], "base_scheme": cfg.scheme["name"],
             "model": cfg.model.name, "L_train": L, "L_eval": n, "ratio": round(n / L, 4),
             "depth": "" if d is None else d, "exact_match": "nan", "token_accuracy": "nan", "solved": "",
             "examples": cfg.task.eval_examples, "answer_tokens": 0, "seed": cfg.seed, "step": "",
             "precision": "", "status": "diverged", "note": f"training diverged at step {meta.get('diverged_step')}"}
            for n in run_lengths(cfg) for d in depths]


@dataclass
class Accuracy:
    """Accuracy rows of many task runs (columns of accuracy.csv plus run, config, label), what was left out, and the
    meta.json of each run read (by run name)."""

    df: pd.DataFrame
    left_out: list[str] = field(default_factory=list)
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)


def collect_accuracy(runs: list[Run]) -> Accuracy:
    frames, flat, left, metas = [], {}, [], {}
    mixed = mixed_numerics(runs)
    for run in runs:
        try:
            meta = run.meta()
            cfg = run.load_config()
            status = meta.get("status")
            if status == "diverged":
                rows = _diverged_rows(cfg, meta)
            elif status != "done" or not run.accuracy_csv.exists():
                raise RunFileError(f"{run.path} is not finished (status {status or 'unknown'}); its rows are left "
                                   "out until it is")
            else:
                rows = read_accuracy_rows(run, meta)
        except RunFileError as e:
            left.append(str(e))
            continue
        metas[run.path.name] = meta
        ident, config_id = config_identity(cfg, meta, mixed)
        flat[config_id] = flatten({k: v for k, v in ident.items() if k not in UNLABELLED})
        d = pd.DataFrame(rows).reindex(columns=ACCURACY_COLUMNS)
        d.insert(0, "run", run.path.name)
        d["config"] = config_id
        frames.append(d)
    if not frames:
        return Accuracy(pd.DataFrame(), left, metas)
    df = pd.concat(frames, ignore_index=True)
    for c in ("L_train", "L_eval", "seed", "examples"):
        df[c] = pd.to_numeric(df[c])
    for c in ("exact_match", "token_accuracy"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    df["depth"] = df["depth"].fillna("").astype(str)
    dup = df.duplicated(["config", "seed", "scheme", "L_eval", "depth", "examples", "step", "precision"])
    if dup.any():
        for name in sorted(set(df.loc[dup, "run"])):
            left.append(f"{name}: a second copy of a run already read; the first is used")
        df = df[~dup].reset_index(drop=True)
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


def per_seed(df: pd.DataFrame, metric: str = "exact_match") -> pd.DataFrame:
    """One value per (task, label, L_train, L_eval, seed): depths pooled (each depth has the same number of
    examples, so the pooled accuracy is their mean), with the worst status of the cell's rows."""
    order = {s: i for i, s in enumerate(("diverged", "nonfinite", "not_applicable", "ok"))}
    g = df.groupby(["task", "label", "L_train", "L_eval", "seed"], sort=True)
    out = g.agg(value=(metric, "mean"), status=("status", lambda s: min(s, key=order.__getitem__)))
    return out.reset_index()


def accuracy_table(df: pd.DataFrame, task: str, metric: str = "exact_match") -> pd.DataFrame:
    """Index (label, L_train), one column per eval length; cells 'mean% ± std' over seeds (with the number of seeds
    in a column), or diverged / nan / n/a when any seed has no number."""
    d = per_seed(df[df["task"] == task], metric)
    lengths = sorted(d["L_eval"].unique())
    table: dict[tuple[str, int], dict[str, str]] = {}
    for (label, L), g in d.groupby(["label", "L_train"], sort=True):
        row = {}
        for n in lengths:
            c = g[g["L_eval"] == n]
            if c.empty:
                row[str(n)] = "—"
            elif (c["status"] != "ok").any():
                row[str(n)] = {"diverged": "diverged", "nonfinite": "nan"}.get(
                    sorted(c["status"], key=("diverged", "nonfinite", "not_applicable", "ok").index)[0], "n/a")
            else:
                v = 100 * c["value"].to_numpy(float)
                row[str(n)] = f"{v.mean():.1f}" + (f" ± {v.std(ddof=1):.1f}" if len(v) > 1 else "")
        row["seeds"] = str(g["seed"].nunique())
        table[(label, int(L))] = row
    out = pd.DataFrame.from_dict(table, orient="index")
    out.index = out.index.set_names(["scheme", "L"])
    return out


def _markdown(t: pd.DataFrame) -> str:
    return markdown.table(["scheme", "L", *t.columns], [[label, L, *row.tolist()] for (label, L), row in t.iterrows()])


LEGEND = ("Cells: accuracy in % on the held-out examples (mean ± std over seeds; passkey: all depths pooled). "
          "Exact match: the whole answer right under greedy decoding. `diverged`/`nan`: a replica gave no number "
          "(never averaged in); `n/a`: the task or scheme cannot run at that length; `—`: not evaluated.")


def write_accuracy_files(acc: Accuracy, out: Path, title: str) -> tuple[pd.DataFrame, list[Path]]:
    """accuracy_long.csv (every row, sorted), accuracy.csv (wide: task × metric × row) and accuracy.md under ``out``;
    returns the sorted rows and the files written."""
    df = acc.df.sort_values(["task", "L_train", "scheme", "seed", "L_eval", "depth"], kind="stable")
    atomic_write_text(out / "accuracy_long.csv", df.to_csv(index=False))
    parts, md = [], [f"# {title}\n"]
    for task in sorted(df["task"].unique()):
        d = df[df["task"] == task]
        examples = sorted(int(x) for x in d["examples"].unique())
        depths = sorted({x for x in d["depth"] if x})
        per = f"{', '.join(map(str, examples))} held-out examples per length" + (
            f" × {len(depths)} depths" if depths else "")
        for metric, words in METRICS.items():
            t = accuracy_table(d, task, metric)
            flat = t.reset_index()
            flat.insert(0, "metric", metric)
            flat.insert(0, "task", task)
            parts.append(flat)
            md.append(f"\n## {task}: {words} (columns: eval length in tokens; {per})\n\n{_markdown(t)}\n")
    md.append(f"\n{LEGEND}\n")
    atomic_write_text(out / "accuracy.csv", pd.concat(parts, ignore_index=True).to_csv(index=False))
    atomic_write_text(out / "accuracy.md", "".join(md).lstrip())
    return df, [out / "accuracy_long.csv", out / "accuracy.csv", out / "accuracy.md"]

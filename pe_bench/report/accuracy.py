"""Accuracy tables of task runs (rows: scheme label; columns: eval length; one table per task and training length).

The row rules are the perplexity tables' (pe_bench.report.perplexity): a row is one configuration (the identity
without the seed; runs that disagree on numerics are never one row), its seeds are averaged (mean ± std), a diverged
replica makes the cell say ``diverged`` (never averaged in), an unfinished run or an unreadable or altered
accuracy.csv is left out with one line naming it (pe_bench.report.collect).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pe_bench import markdown
from pe_bench.report.collect import Accuracy
from pe_bench.runs import atomic_write_text

METRICS = {"exact_match": "exact match", "token_accuracy": "per-token accuracy"}


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

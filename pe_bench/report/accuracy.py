"""Accuracy tables of task runs (rows: scheme label; columns: eval length; one table per task and training length),
the effective-length leaderboard, and paired comparisons of two rows on the same held-out examples.

The row rules are the perplexity tables' (pe_bench.report.perplexity): a row is one configuration (the identity
without the seed; runs that disagree on numerics are never one row), its seeds are averaged, a diverged replica makes
the cell say ``diverged`` (never averaged in), an unfinished run or an unreadable or altered accuracy.csv is left out
with one line naming it (pe_bench.report.collect).

Every exact-match cell carries a 95 % interval: Wilson over the held-out examples with one seed, Student-t over the
per-seed accuracies with several (pe_bench.stats). A row whose exact match at L is below ``LEARNT_AT_L`` says
``not learnt at L`` in every beyond-L cell: its zeros there would measure the recipe, not extrapolation.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from pe_bench import markdown
from pe_bench.errors import ConfigError
from pe_bench.report.collect import Accuracy
from pe_bench.runs import atomic_write_text
from pe_bench.stats import accuracy_interval, paired_accuracy

METRICS = {"exact_match": "exact match", "token_accuracy": "per-token accuracy"}
LEARNT_AT_L = 0.9  # exact match at L below which a row's beyond-L cells say NOT_LEARNT
EFFECTIVE_FRACTION = 0.8  # the effective length keeps exact match ≥ this fraction of its accuracy at L
NOT_LEARNT = "not learnt at L"
CITABLE_SEEDS = 3  # a row with fewer seeds is exploratory (its column says so)
NO_L = "no number at L"  # past L, in a row with no exact match at L (not evaluated there, or no number)
STATUS_ORDER = ("diverged", "nonfinite", "not_applicable", "ok")
STATUS_TEXT = {"diverged": "diverged", "nonfinite": "nan", "not_applicable": "n/a"}


def per_seed(df: pd.DataFrame, metric: str = "exact_match") -> pd.DataFrame:
    """One value per (task, label, L_train, L_eval, seed): depths pooled (each depth has the same number of
    examples, so the pooled accuracy is their mean), the examples solved and scored, and the worst status of the
    cell's rows."""
    order = {s: i for i, s in enumerate(STATUS_ORDER)}
    g = df.groupby(["task", "label", "L_train", "L_eval", "seed"], sort=True)
    out = g.agg(value=(metric, "mean"), solved=("solved", "sum"), examples=("examples", "sum"),
                status=("status", lambda s: min(s, key=order.__getitem__)))
    return out.reset_index()


def cells(df: pd.DataFrame, task: str, metric: str = "exact_match") -> pd.DataFrame:
    """One row per (label, L_train, L_eval) of a task: status, mean, std, the 95 % interval (lo, hi) of exact match
    and its method, seeds, and ``at_L`` (the row's exact match at L on the task it was trained on — for an evaluation
    variant, its task's; NaN when it has none)."""
    d = per_seed(df[df["task"] == task], metric)
    em = per_seed(df[df["task"] == trained_task(df, task)])
    out = []
    for (label, L), g in d.groupby(["label", "L_train"], sort=True):
        e = em[(em["label"] == label) & (em["L_train"] == L)]
        at_l = e[(e["L_eval"] == L) & (e["status"] == "ok")]["value"]
        at_l = float(at_l.mean()) if len(at_l) == len(e[e["L_eval"] == L]) and len(at_l) else math.nan
        for n, c in g.groupby("L_eval", sort=True):
            row = {"label": label, "L_train": int(L), "L_eval": int(n), "seeds": c["seed"].nunique(), "at_L": at_l,
                   "status": min(c["status"], key=STATUS_ORDER.index), "mean": math.nan, "std": math.nan,
                   "lo": math.nan, "hi": math.nan, "method": "", "examples": int(c["examples"].iloc[0])}
            if row["status"] == "ok":
                v = c["value"].to_numpy(float)
                row.update(mean=float(v.mean()), std=float(v.std(ddof=1)) if len(v) > 1 else math.nan)
                if metric == "exact_match":
                    iv = accuracy_interval([(int(s), int(x)) for s, x in zip(c["solved"], c["examples"])])
                    row.update(lo=iv.lo, hi=iv.hi, method=_method(iv.method, iv.n))
            out.append(row)
    return pd.DataFrame(out)


def trained_task(df: pd.DataFrame, task: str) -> str:
    """The task whose exact match at L says whether a row of ``task`` was learnt: an evaluation variant
    (flipflop[ignore_prob=0.1]) is learnt if the task it was trained on is (when ``df`` has that task's rows)."""
    trained = task.split("[", 1)[0]
    return trained if (df["task"] == trained).any() else task


def _method(method: str, n: int) -> str:
    return f"Wilson, {n} examples" if method.startswith("Wilson") else f"t, {n} seeds"


def not_learnt(at_l: float) -> bool:
    """A row not learnt at L: its exact match there is below LEARNT_AT_L (NaN: no number at L, see NO_L)."""
    return not at_l >= LEARNT_AT_L


def _cell_text(r: pd.Series, intervals: bool, row_seeds: int) -> str:
    """A cell: 'mean ± std [lo, hi]', with '(k seeds)' when fewer seeds than its row's were evaluated there."""
    if r["status"] != "ok":
        return STATUS_TEXT.get(r["status"], "n/a")
    if r["L_eval"] > r["L_train"] and math.isnan(r["at_L"]):
        return NO_L
    if r["L_eval"] > r["L_train"] and not_learnt(r["at_L"]):
        return NOT_LEARNT
    text = f"{100 * r['mean']:.1f}" + (f" ± {100 * r['std']:.1f}" if r["seeds"] > 1 else "")
    text += f" [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]" if intervals and r["method"] else ""
    return text + (f" ({r['seeds']} seed{'s' * (r['seeds'] > 1)})" if r["seeds"] < row_seeds else "")


def accuracy_table(df: pd.DataFrame, task: str, metric: str = "exact_match", intervals: bool = True) -> pd.DataFrame:
    """Index (label, L_train), one column per eval length; cells 'mean%' (± std over seeds) [95 % interval] (exact
    match), ``not learnt at L`` past L for a row below LEARNT_AT_L at L, or diverged / nan / n/a when any seed has
    no number; then the number of seeds and the interval's method."""
    c = cells(df, task, metric)
    lengths = sorted(c["L_eval"].unique())
    table: dict[tuple[str, int], dict[str, str]] = {}
    for (label, L), g in c.groupby(["label", "L_train"], sort=True):
        by_n = {int(r["L_eval"]): r for _, r in g.iterrows()}
        seeds = int(g["seeds"].max())
        row = {str(n): _cell_text(by_n[n], intervals, seeds) if n in by_n else "—" for n in lengths}
        row["seeds"] = str(seeds)
        if metric == "exact_match":  # the method of the cells with all the row's seeds
            row["interval"] = next((m for m, k in zip(g["method"], g["seeds"]) if m and k == seeds), "")
        row["exploratory"] = "yes" if seeds < CITABLE_SEEDS else ""
        table[(label, int(L))] = row
    out = pd.DataFrame.from_dict(table, orient="index")
    out.index = out.index.set_names(["scheme", "L"])
    return out


def _markdown(t: pd.DataFrame) -> str:
    return markdown.table(["scheme", "L", *t.columns], [[label, L, *row.tolist()] for (label, L), row in t.iterrows()])


LEGEND = ("Cells: accuracy in % on the held-out examples (passkey: all depths pooled); exact match: the whole answer "
          "right under greedy decoding, with its 95 % interval in [ ] (one seed: Wilson over the examples; several: "
          "mean ± std and Student-t over the seeds, at least the pooled examples' Wilson interval); per-token "
          "accuracy has no interval (the tokens of one example are not independent); `(k seeds)`: a cell evaluated "
          f"by fewer seeds than its row. `{NOT_LEARNT}`: the row's exact match at L on the task it was trained on "
          "(for an evaluation variant such as `flipflop[ignore_prob=0.1]`, its task's) is below "
          f"{100 * LEARNT_AT_L:g} %, so its beyond-L cells would measure the recipe, not extrapolation (`{NO_L}`: "
          "it has none). `diverged`/`nan`: a replica gave no number (never averaged in); `n/a`: the task or scheme "
          "cannot run at that length; `—`: not evaluated. `exploratory` yes: fewer than 3 seeds — a reading, not a "
          "finding (between-seed spread on these tasks reaches tens of points).")


def write_accuracy_files(acc: Accuracy, out: Path, title: str) -> tuple[pd.DataFrame, list[Path]]:
    """accuracy_long.csv (every row, sorted; without the per-example outcomes, which stay in the runs),
    accuracy.csv (wide: task × metric × row), accuracy.md and accuracy_seeds.csv (each seed's exact match per task,
    row and length, depths pooled: what the seeds' spread is read from) under ``out``; returns the sorted rows and
    the files written."""
    df = acc.df.sort_values(["task", "L_train", "scheme", "seed", "L_eval", "depth"], kind="stable")
    long = df.drop(columns=["outcomes", "as_trained"], errors="ignore")  # outcomes stay in the runs
    atomic_write_text(out / "accuracy_long.csv", long.to_csv(index=False))
    parts, md = [], [f"# {markdown.inline(title)}\n"]
    for task in sorted(df["task"].unique()):
        d = df[df["task"] == task]
        examples = sorted(int(x) for x in d["examples"].unique())
        depths = sorted({x for x in d["depth"] if x})
        per = f"{', '.join(map(str, examples))} held-out examples per length" + (
            f" × {len(depths)} depths" if depths else "")
        for metric, words in METRICS.items():
            t = accuracy_table(df, task, metric)  # all tasks: a variant is judged learnt on its trained task
            flat = t.reset_index()
            flat.insert(0, "metric", metric)
            flat.insert(0, "task", task)
            parts.append(flat)
            md.append(f"\n## {task}: {words} (columns: eval length in tokens; {per})\n\n{_markdown(t)}\n")
    md.append(f"\n{LEGEND}\n")
    atomic_write_text(out / "accuracy.csv", pd.concat(parts, ignore_index=True).to_csv(index=False))
    atomic_write_text(out / "accuracy.md", "".join(md).lstrip())
    seeds = per_seed(df).rename(columns={"label": "scheme", "L_train": "L", "value": "exact_match"})
    atomic_write_text(out / "accuracy_seeds.csv", seeds.round({"exact_match": 6}).to_csv(index=False))
    return df, [out / "accuracy_long.csv", out / "accuracy.csv", out / "accuracy.md", out / "accuracy_seeds.csv"]


def _outcomes(g: pd.DataFrame) -> tuple[dict[int, np.ndarray], dict[int, tuple[str, ...]]] | None:
    """(seed → solved flags of a cell's held-out examples, depths in order; seed → the held-out hashes they were
    scored on), or None when a seed has no number or no per-example outcomes there."""
    flags, sets = {}, {}
    for seed, s in g.sort_values("depth", kind="stable").groupby("seed"):
        if (s["status"] != "ok").any() or (s["outcomes"] == "").any() or (s["heldout"] == "").any():
            return None
        flags[int(seed)] = np.frombuffer("".join(s["outcomes"]).encode(), dtype=np.uint8) == ord("x")
        sets[int(seed)] = tuple(s["heldout"])
    return flags, sets


def _paired_row(task: str, L: int, n: int, a: str, b: str, ga: dict, gb: dict) -> dict:
    """One row of :func:`compare_accuracy`: both rows' exact match over the common seeds, the paired difference."""
    common = sorted(set(ga) & set(gb))
    p = paired_accuracy({s: ga[s] for s in common}, {s: gb[s] for s in common})
    one = p.p_value is not None
    return {"task": task, "L": L, "L_eval": n, a: _pct(np.mean([ga[s].mean() for s in common])),
            b: _pct(np.mean([gb[s].mean() for s in common])), "difference": _pct(p.diff),
            "95% interval": f"[{_pct(p.interval.lo)}, {_pct(p.interval.hi)}]", f"only {a}": p.only_a,
            f"only {b}": p.only_b, "McNemar p": f"{p.p_value:.3g}" if one else "",
            "method": f"McNemar, {p.interval.n} examples" if one else _method(p.interval.method, p.interval.n),
            "seeds": ",".join(map(str, common)), "verdict": p.verdict}


def compare_accuracy(acc: Accuracy, a: str, b: str) -> pd.DataFrame:
    """acc(A) − acc(B) in exact-match points at every task and length where both rows were scored on the very same
    held-out examples (their ``heldout`` hashes agree), paired example by example over the seeds both have: McNemar
    with one common seed, t over the per-seed differences with several. What could not be compared (and the seeds
    only one row has) is listed in ``attrs['left_out']``."""
    df = acc.df
    for name in (a, b):
        if name not in set(df["label"]):
            raise ConfigError(f"--compare: no accuracy rows for scheme {name!r}; rows here: "
                              f"{', '.join(sorted(set(df['label'])))}")
    rows, left = [], []
    d = df[df["label"].isin([a, b])]
    for (task, L, n), g in d.groupby(["task", "L_train", "L_eval"], sort=True):
        if len(set(g["label"])) < 2:
            continue
        where = f"{task} L={L} at {n}"
        oa, ob = _outcomes(g[g["label"] == a]), _outcomes(g[g["label"] == b])
        if oa is None or ob is None:
            left.append(f"{where}: a row has no number or no per-example outcomes there (re-evaluate it with "
                        "`pe-bench eval`)")
            continue
        common = sorted(set(oa[0]) & set(ob[0]))
        if not common:
            left.append(f"{where}: no seed in common ({a}: {sorted(oa[0])}, {b}: {sorted(ob[0])})")
            continue
        if any(oa[1][s] != ob[1][s] for s in common):
            left.append(f"{where}: scored on different held-out examples (other task options or corpus)")
            continue
        only = sorted(set(oa[0]) ^ set(ob[0]))
        if only:
            left.append(f"{where}: seeds {only} of one row only are not in the paired difference")
        rows.append(_paired_row(task, int(L), int(n), a, b, oa[0], ob[0]))
    if not rows:
        raise ConfigError(f"--compare {a} {b}: no task and length where both were scored on the same held-out "
                          "examples" + (f"; {left[0]}" if left else ""))
    out = pd.DataFrame(rows)
    out.attrs["left_out"] = left
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def verdict_lines(t: pd.DataFrame, a: str, b: str) -> list[str]:
    """One line per task: at how many lengths A solves more than B, fewer, or indistinguishably (95 %)."""
    out = []
    for (task, L), g in t.groupby(["task", "L"], sort=True):
        counts = g["verdict"].value_counts()
        parts = [f"{a} higher at {counts.get('higher', 0)}", f"lower at {counts.get('lower', 0)}",
                 f"indistinguishable at {counts.get('indistinguishable', 0)}"]
        out.append(f"{task} (L={L}): " + ", ".join(parts) + f" of {len(g)} lengths than {b} (paired, 95 %)")
    return out

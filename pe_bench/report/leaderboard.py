"""The effective-length leaderboard: for each task and row, the longest evaluated length up to which exact match
stays at or above ``EFFECTIVE_FRACTION`` of the row's own accuracy at L and above the floor — the larger of chance
and the task's trivial baseline (SyntheticTask.trivial_baseline: the most frequent development answer, or a random
candidate the context offers) — (RULER's "effective context length", Hsieh et al. 2024, relative to the model's own
accuracy at L rather than to a fixed score).

Beside it, the absolute effective length (RULER's own convention): the longest evaluated length up to which exact
match stays at or above ``ABSOLUTE_THRESHOLD`` (and above the floor), whatever the row's accuracy at L.

Each range comes from the cells' intervals: the lower end is the longest length up to which every cell's lower
bound qualifies, the upper end the same with the upper bounds. A length past which nothing was evaluated is written
``≥ n``: the row may hold on further. A row not learnt at L (pe_bench.report.accuracy) has no effective length.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from pe_bench import markdown
from pe_bench.report.accuracy import (CITABLE_SEEDS, EFFECTIVE_FRACTION, LEARNT_AT_L, NOT_LEARNT, STATUS_TEXT,
                                      cells, not_learnt, per_seed, trained_task)
from pe_bench.report.collect import Collected
from pe_bench.report.perplexity import comparison
from pe_bench.runs import atomic_write_text

COLUMNS = ["task", "scheme", "L", "at_L", "at_L_lo", "at_L_hi", "effective_length", "effective_ratio",
           "effective_lo", "effective_hi", "longest_evaluated", "at_effective", "at_effective_lo", "at_effective_hi",
           "chance_at_effective", "baseline_at_effective", "absolute_length", "absolute_ratio", "absolute_lo",
           "absolute_hi", "seeds", "interval", "status", "seed_lengths", "seed_min", "seed_max", "exploratory"]
ABSOLUTE_THRESHOLD = 0.85  # the absolute effective length: exact match ≥ this (RULER's 85 %, Hsieh et al. 2024)


def _longest(g: pd.DataFrame, value: str, target: float) -> int | None:
    """The longest L_eval up to which (from L on, in order) every cell is ok, ``value`` ≥ target and above the floor
    (column ``chance``: the larger of chance and the trivial baseline)."""
    best = None
    for _, r in g.iterrows():
        if r["status"] != "ok" or not (r[value] >= target and r[value] > r["chance"]):
            break
        best = int(r["L_eval"])
    return best


def _absolute(g: pd.DataFrame, L: int) -> dict:
    """The absolute effective length of one row's cells (from L on) and its 95 % range: '' where even L falls short
    (written ``< L``)."""
    eff = _longest(g, "mean", ABSOLUTE_THRESHOLD)
    lo, hi = _longest(g, "lo", ABSOLUTE_THRESHOLD), _longest(g, "hi", ABSOLUTE_THRESHOLD)
    return {"absolute_length": eff or "", "absolute_ratio": round(eff / L, 4) if eff else "",
            "absolute_lo": lo or "", "absolute_hi": hi or "", "longest_evaluated": int(g["L_eval"].max())}


def _entry(task: str, label: str, L: int, g: pd.DataFrame) -> dict:
    """The leaderboard row of one (task, row, L) from its cells (sorted by L_eval, from L on)."""
    at = g[g["L_eval"] == L]
    base = {"task": task, "scheme": label, "L": L, "seeds": int(g["seeds"].max()),
            "interval": next((m for m in g["method"] if m), "")}
    if at.empty:
        return {**base, "status": "not evaluated at L"}
    r0 = at.iloc[0]
    base.update(at_L=r0["mean"], at_L_lo=r0["lo"], at_L_hi=r0["hi"])
    if r0["status"] == "ok":
        base.update(_absolute(g, L))
    if r0["status"] != "ok":
        return {**base, "status": STATUS_TEXT.get(r0["status"], "n/a")}
    if not_learnt(r0["at_L"]):
        return {**base, "status": NOT_LEARNT}
    target = EFFECTIVE_FRACTION * r0["mean"]
    eff = _longest(g, "mean", target)
    if eff is None:  # at chance at L already
        return {**base, "status": "at chance at L"}
    lo, hi = _longest(g, "lo", target), _longest(g, "hi", target)
    e = g[g["L_eval"] == eff].iloc[0]
    return {**base, "effective_length": eff, "effective_ratio": round(eff / L, 4), "effective_lo": lo or "",
            "effective_hi": hi, "at_effective": e["mean"],
            "at_effective_lo": e["lo"], "at_effective_hi": e["hi"], "chance_at_effective": e["chance_given"],
            "baseline_at_effective": e["baseline"], "status": "ok"}


def leaderboard(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, scheme row, L) of accuracy rows ``df`` (pe_bench.report.collect.Accuracy.df): exact match
    at L with its interval, the effective length and its 95 % range, exact match there, and a status (ok, not learnt
    at L, diverged, …)."""
    keys = ["task", "label", "L_train", "L_eval"]
    chance = df.groupby(keys)["chance"].max()
    baseline = df.groupby(keys)["baseline"].max() if "baseline" in df else pd.Series(dtype=float)
    out = []
    for task in sorted(df["task"].unique()):
        c = cells(df, task)
        c["chance"] = [chance.get((task, r.label, r.L_train, r.L_eval), math.nan) for r in c.itertuples()]
        c["baseline"] = [baseline.get((task, r.label, r.L_train, r.L_eval), math.nan) for r in c.itertuples()]
        c["chance_given"] = c["chance"]
        # the floor: chance or the trivial baseline, whichever is higher (a task that says neither: 0, said so)
        c["chance"] = c[["chance", "baseline"]].max(axis=1).fillna(0.0)
        for (label, L), g in c.groupby(["label", "L_train"], sort=True):
            g = g[g["L_eval"] >= L].sort_values("L_eval")
            entry = _entry(task, label, int(L), g)
            out.append({**entry, **_seed_range(df, task, label, int(L), g.set_index("L_eval")["chance"]),
                        "exploratory": entry["seeds"] < CITABLE_SEEDS})
    return pd.DataFrame(out).reindex(columns=COLUMNS)


def _seed_range(df: pd.DataFrame, task: str, label: str, L: int, floor: pd.Series) -> dict:
    """Each seed's own effective length (tokens, in seed order; '—' where that seed is not learnt at L on the task it
    was trained on, or has no number) and their min and max: the spread the mean-based length hides."""
    mine = df[(df["label"] == label) & (df["L_train"] == L)]
    d = per_seed(mine[mine["task"] == task])
    learnt = per_seed(mine[mine["task"] == trained_task(df, task)])
    lengths: list[int | None] = []
    for seed, s in d.groupby("seed", sort=True):
        at = s[s["L_eval"] == L]
        ok = learnt[(learnt["seed"] == seed) & (learnt["L_eval"] == L) & (learnt["status"] == "ok")]
        if at.empty or at["status"].iloc[0] != "ok" or ok.empty or not_learnt(float(ok["value"].iloc[0])):
            lengths.append(None)
            continue
        g = s[s["L_eval"] >= L].sort_values("L_eval")
        g = g.assign(mean=g["value"], chance=[floor.get(n, 0.0) for n in g["L_eval"]])
        lengths.append(_longest(g, "mean", EFFECTIVE_FRACTION * float(at["value"].iloc[0])))
    found = [n for n in lengths if n is not None]
    return {"seed_lengths": " / ".join("—" if n is None else str(n) for n in lengths),
            "seed_min": min(found) if found else "", "seed_max": max(found) if found else ""}


def _multiple(n, L: int, longest: int) -> str:
    """n tokens in multiples of L ('4L'), '≥ 8L' at the longest length evaluated, '< L' for none."""
    if n == "" or n is None or (isinstance(n, float) and math.isnan(n)):
        return "< L"
    text = "L" if int(n) == int(L) else f"{int(n) / int(L):g}L"
    return f"≥ {text}" if int(n) == int(longest) else text


def effective_cell(r: pd.Series, view: str = "effective") -> str:
    """'4L [2L, ≥ 8L]' (the effective length and its 95 % range, in multiples of L), or the row's status;
    ``view="absolute"``: the absolute effective length, which a row not learnt at L has too."""
    absolute = view == "absolute" and r["status"] in ("ok", NOT_LEARNT, "at chance at L") and pd.notna(r["at_L"])
    if r["status"] != "ok" and not absolute:
        return r["status"]
    L, top = r["L"], r["longest_evaluated"]
    return (f"{_multiple(r[f'{view}_length'], L, top)} "
            f"[{_multiple(r[f'{view}_lo'], L, top)}, {_multiple(r[f'{view}_hi'], L, top)}]")


def seeds_mark(r: pd.Series) -> str:
    """' (1 seed)' after a cell of an exploratory row (fewer than CITABLE_SEEDS seeds), '' otherwise."""
    n = int(r["seeds"])
    return f" ({n} seed{'s' * (n != 1)})" if n < CITABLE_SEEDS else ""


def seed_range_cell(r: pd.Series) -> str:
    """'L–4L' (the per-seed effective lengths' range, in multiples of L), '—' where no seed has one."""
    if r["seed_min"] in ("", None) or (isinstance(r["seed_min"], float) and math.isnan(r["seed_min"])):
        return "—"
    lo, hi = (_multiple(r[k], r["L"], r["longest_evaluated"]) for k in ("seed_min", "seed_max"))
    return lo if lo == hi else f"{lo} – {hi}"


def summary_table(board: pd.DataFrame, view: str = "effective") -> pd.DataFrame:
    """Rows: scheme (and L); columns: tasks; cells: :func:`effective_cell` of ``view`` (effective | absolute), marked
    ``(1 seed)`` where the row is exploratory there."""
    board = board.assign(cell=[effective_cell(r, view) + seeds_mark(r) for _, r in board.iterrows()])
    t = board.pivot_table(index=["scheme", "L"], columns="task", values="cell", aggfunc="first", sort=True)
    return t.fillna("—")


def _pct(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


LEGEND = (f"Effective length: the longest evaluated length up to which exact match stays at or above "
          f"{100 * EFFECTIVE_FRACTION:g} % of the row's own exact match at L and above the floor — the larger of "
          "chance (guessing every answer token) and the trivial baseline (the most frequent answer of the task's "
          "development examples given to every test example, or, where the task names them, a random answer among "
          "the candidates its context offers; `floors` below each task) — in multiples of L; in [ ] its 95 % range from the cells' intervals (Wilson over examples with one "
          "seed, t over seeds with several). `≥`: true at the longest length evaluated (it may hold further). "
          f"`{NOT_LEARNT}`: exact match at L below {100 * LEARNT_AT_L:g} % (no effective length: the recipe failed, "
          "not the scheme). `range over seeds`: the lowest and highest of the seeds' own effective lengths (each "
          f"seed judged alone). `(1 seed)`, `(2 seeds)`, `exploratory`: fewer than {CITABLE_SEEDS} seeds — a "
          "reading, not a finding.")


def floor_lines(df: pd.DataFrame) -> dict[str, str]:
    """Per task with a trivial baseline: 'Floors, L = 64: chance 1.0 / 1.0 / … %, trivial baseline 25.0 / 25.0 / … %
    at 64 / 128 / … tokens; L = 128: …' ('?' where a number is not known)."""
    out = {}
    for task, g in df.groupby("task", sort=True):
        parts = []
        for L, h in g.groupby("L_train", sort=True):
            by = h.groupby("L_eval")[["chance", "baseline"]].max() if "baseline" in h else None
            if by is None:
                continue
            lengths = " / ".join(str(int(n)) for n in by.index)
            parts.append(f"L = {int(L)}: chance {' / '.join(_pct(x) or '?' for x in by['chance'])} %, trivial "
                         f"baseline {' / '.join(_pct(x) or '?' for x in by['baseline'])} % at {lengths} tokens")
        if parts:
            out[task] = "Floors, " + "; ".join(parts) + "."
    return out


RELATIVE_SENTENCE = (f"**Effective length (relative)**: the longest length up to which exact match stays at or above "
                     f"{100 * EFFECTIVE_FRACTION:g} % of the row's own exact match at L and above the floor, in "
                     "multiples of L (how far the row keeps what it learnt).")
ABSOLUTE_SENTENCE = (f"**Effective length (absolute)**: the longest length up to which exact match stays at or above "
                     f"{100 * ABSOLUTE_THRESHOLD:g} % (RULER's threshold) and above the floor, in multiples of L, `< L` "
                     "where even L falls short — a row's own accuracy at L does not enter.")


def _formatted(extra: pd.DataFrame) -> pd.DataFrame:
    """The columns beside the summaries as printed: a ratio to 3 decimals, a context value signed."""
    def cell(column: str, v):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            return v
        return f"{v:+.3f}" if column.startswith("context value") else f"{v:.3f}"

    return pd.DataFrame({c: [cell(c, v) for v in extra[c]] for c in extra.columns}, index=extra.index)


def leaderboard_markdown(board: pd.DataFrame, title: str, extra: pd.DataFrame | None = None,
                         floors: dict[str, str] | None = None) -> str:
    """leaderboard.md: the two summaries (schemes × tasks, the relative then the absolute effective length, each
    defined in one sentence above it; ``extra``: more columns by scheme, e.g. perplexity), then each task's details
    (``floors``: a line per task, :func:`floor_lines`)."""
    md = [f"# {markdown.inline(title)}: effective length\n"]
    for view, sentence in (("effective", RELATIVE_SENTENCE), ("absolute", ABSOLUTE_SENTENCE)):
        t = summary_table(board, view)
        if extra is not None:
            t = t.join(_formatted(extra), on="scheme").astype(object).fillna("—")
        md += ["\n", sentence, "\n\n", markdown.table(["scheme", "L", *t.columns],
                                                     [[s, L, *row.tolist()] for (s, L), row in t.iterrows()])]
    for task, g in board.groupby("task", sort=True):
        rows = [[r["scheme"], r["L"], f"{_pct(r['at_L'])} [{_pct(r['at_L_lo'])}, {_pct(r['at_L_hi'])}]"
                 if r["status"] != "not evaluated at L" else "—", effective_cell(r), seed_range_cell(r),
                 "" if r["status"] != "ok" else f"{_pct(r['at_effective'])} [{_pct(r['at_effective_lo'])}, "
                 f"{_pct(r['at_effective_hi'])}]", effective_cell(r, "absolute"),
                 f"{r['seeds']}{' (exploratory)' * bool(r['exploratory'])}", r["interval"]]
                for _, r in g.iterrows()]
        md += [f"\n\n## {task}\n\n", markdown.table(["scheme", "L", "exact match at L", "effective length",
                                                     "range over seeds", "exact match there",
                                                     "absolute effective length", "seeds", "interval"], rows)]
        if floors is not None and task in floors:
            md.append(f"\n\n{floors[task]}")
    md.append(f"\n\n{LEGEND}\n")
    unknown = sorted(set(board.loc[board["chance_at_effective"].isna() & (board["status"] == "ok"), "task"]))
    if unknown:
        md.append(f"\nChance unknown (the task defines no `chance()`), so 0 is the floor: {', '.join(unknown)}.\n")
    return "".join(md)


def write_leaderboard_files(df: pd.DataFrame, board: pd.DataFrame, out: Path, title: str,
                            extra: pd.DataFrame | None = None) -> list[Path]:
    """leaderboard.csv and leaderboard.md under ``out`` from ``board`` (:func:`leaderboard` of the accuracy rows
    ``df``, which give each task's floors)."""
    atomic_write_text(out / "leaderboard.csv", board.to_csv(index=False))
    atomic_write_text(out / "leaderboard.md", leaderboard_markdown(board, title, extra, floor_lines(df)))
    return [out / "leaderboard.csv", out / "leaderboard.md"]


def perplexity_columns(col: Collected, split: str = "validation") -> pd.DataFrame | None:
    """Beside the effective lengths: each scheme row's perplexity at the longest length over L (non-overlapping)
    and, where its sliding pass scored the same tokens at both lengths, its context value there (the paired
    truncation contrast: the loss with the longest length's context minus with L's, nats per token, the mean over
    seeds; negative: the context past L helps), one column each per training length of the language-model runs;
    None without perplexity rows."""
    t = comparison(col, "nonoverlapping", split)
    if t.empty:
        return None
    longest = max(int(c) for c in t.columns if str(c).isdigit())
    sliding = comparison(col, "sliding", split)
    context = sliding.attrs.get("numbers", {}) if not sliding.empty else {}
    out: dict[str, dict] = {}
    for (scheme, L), (ratio, _) in t.attrs["numbers"].items():
        out.setdefault(scheme, {})[perplexity_column(longest // L, L)] = "—" if math.isnan(ratio) else round(ratio, 3)
        nats = context.get((scheme, L), (math.nan, math.nan))[1]
        if not math.isnan(nats):
            out[scheme][context_column(L)] = round(nats, 3)
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("scheme")


def perplexity_column(ratio: int, L: int) -> str:
    return f"perplexity {ratio}L/L (L={L})"


def context_column(L: int) -> str:
    return f"context value (L={L})"

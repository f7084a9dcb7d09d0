"""Perplexity tables: one row per configuration (rows: scheme label; columns: eval length), mean ± std over seeds
with a 95 % interval, the best in bold where paired tests separate it from every other row, paired comparisons
(``--compare A B``), as CSV, markdown and rich."""

from __future__ import annotations

import dataclasses
import io
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pe_bench import markdown, stats
from pe_bench.config import ConfigError
from pe_bench.report.collect import FINETUNE_COLUMNS, REFERENCE_COLUMNS, Collected
from pe_bench.report.files import STATUS_CELL, WINDOW_KEY, window_key
from pe_bench.runs import atomic_write_text

MODES = ("nonoverlapping", "sliding")


def _cell_windows(col: Collected, rows: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]] | None:
    """seed → per-window (nll, tokens) for the rows of one table cell; None if any seed lacks them (rows whose
    windows disagree never get here: :func:`collect_all` leaves their run out)."""
    out = {}
    for r in rows[[c for c in ("run", "seed", *WINDOW_KEY) if c in rows.columns]].itertuples(index=False):
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
    'longest/L' is the perplexity at the longest length over the one at L, with its paired interval where both
    scored the same tokens (:func:`paired_ratio`); 'seeds' counts replicas. The separated best of each length
    (paired tests, :func:`best_marks`) is in ``.attrs``."""
    col = df if isinstance(df, Collected) else Collected(df)
    d = col.df
    if d.empty:
        return pd.DataFrame()
    d = d[(d["mode"] == mode) & (d["split"] == split)]
    if d.empty:
        return pd.DataFrame()
    lengths = sorted(int(x) for x in d["L_eval"].unique())
    d = d.assign(row=row_names(d))
    rows, index, stats, numbers = [], [], {}, {}
    for name, L in dict.fromkeys(zip(d["row"], d["L_train"])):
        r = d[(d["row"] == name) & (d["L_train"] == L)]
        cells, means, kinds = {}, {}, set()
        seeds = r["seed"].nunique()
        for n in lengths:
            c = r[r["L_eval"] == n]
            text, mean, kind = _cell_stats(col, c)
            partial = 0 < c["seed"].nunique() < seeds  # a length only some seeds reached: said, never passed off
            cells[str(n)] = f"{text} ({c['seed'].nunique()} of {seeds} seeds)" if partial else text
            means[n] = mean
            if kind:
                kinds.add(kind)
            stats[(name, int(L), n)] = (mean, c)
        longest = reach(r)
        at = "" if longest == lengths[-1] else f" (at {longest})"  # a row not evaluated as long as the table
        paired = paired_ratio(col, r[r["L_eval"] == longest], r[r["L_eval"] == int(L)]) if longest > int(L) else None
        cells["longest/L"], ratio = _longest_over_L(paired, cells, means, int(L), longest, lengths[-1])
        value, nats = context_value_cell(paired) if mode == "sliding" and longest > int(L) else ("—", math.nan)
        if mode == "sliding":
            cells[CONTEXT_VALUE] = _said_at(value, at)
        numbers[(name, int(L))] = (ratio, nats)
        cells["seeds"] = int(r["seed"].nunique())
        cells["interval"] = " / ".join(sorted(kinds)) or "—"
        rows.append(cells)
        index.append((name, int(L)))
    t = pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["scheme", "L_train"]), dtype=object)
    if CONTEXT_VALUE in t and (t[CONTEXT_VALUE] == "—").all():
        t = t.drop(columns=CONTEXT_VALUE)  # no pair of lengths scored on the same windows
    t.attrs["best"] = best_marks(col, stats, lengths)
    t.attrs["numbers"] = numbers  # (row, L) → (longest/L, context value in nats; NaN where the cell has none)
    return t


def _longest_over_L(c: stats.Contrast | None, cells: dict, means: dict, L: int, longest: int,
                    table_longest: int) -> tuple[str | float, float]:
    """The longest/L cell of one table row: the perplexity at the row's longest length over the one at L with its
    paired 95 % ratio interval where both lengths scored the same tokens (``c``, :func:`paired_ratio`; the point is
    the exponentiated mean log-ratio over seeds), else the ratio of the mean perplexities alone; and its number."""
    base, last = means.get(L, float("nan")), means.get(longest, float("nan"))
    broken = [cells[k] for k in (str(L), str(longest)) if cells.get(k) in ("diverged", "nan")]
    at = "" if longest == table_longest else f" (at {longest})"
    if broken:
        return broken[0], math.nan
    if pd.isna(base) or pd.isna(last) or longest <= L:  # no length past L in this row: no ratio
        return "n/a", math.nan
    if c is None:
        ratio = float(last / base)
        return (round(ratio, 3) if not at else f"{ratio:.3f}{at}"), ratio
    iv = "" if c.interval is None else f" [{math.exp(c.interval.lo):.3f}, {math.exp(c.interval.hi):.3f}]"
    return f"{c.ratio:.3f}{iv}{at}", c.ratio


def paired_ratio(col: Collected, longest: pd.DataFrame, at_L: pd.DataFrame) -> stats.Contrast | None:
    """The paired contrast of one row's loss at its longest length against L on the same scored tokens
    (:func:`stats.truncation_contrast`: t over seeds, or one seed's bootstrap over blocks of ≥ 16K tokens): the
    sliding pass's windows pair one to one; non-overlapping L windows are summed k at a time into the longest
    windows that hold them. None where a seed lacks either side or the tokens do not line up."""
    if (longest["status"] != "ok").any() or (at_L["status"] != "ok").any():
        return None
    more, less = _cell_windows(col, longest), _cell_windows(col, at_L)
    if not more or not less or set(more) != set(less):
        return None
    pairs = {}
    for s in sorted(more):
        (nll_m, tok_m), (nll_l, tok_l) = more[s], less[s]
        if len(tok_m) == 0 or len(tok_l) % len(tok_m):
            return None
        k = len(tok_l) // len(tok_m)
        nll_l, grouped = nll_l.reshape(len(tok_m), k).sum(axis=1), tok_l.reshape(len(tok_m), k).sum(axis=1)
        if not np.array_equal(grouped, tok_m):
            return None
        pairs[s] = (nll_m, nll_l, tok_m)
    return stats.truncation_contrast(pairs)


def _said_at(cell: str, at: str) -> str:
    """A cell read at a row's own longest length, saying so (``at``: ' (at 256)', or '' at the table's longest)."""
    return cell if cell == "—" else cell + at


CONTEXT_VALUE = "context value"  # the sliding pass's paired truncation contrast, longest against L (nats per token)


def context_value_cell(c: stats.Contrast | None) -> tuple[str, float]:
    """``-0.004 [-0.006, -0.002] ×0.996``: the paired truncation contrast of one sliding-table row — the same model's
    loss on the same scored tokens with the longest length's context minus with L's (nats per token, mean over the
    seeds both lengths have; negative: the context past L helps), its 95 % interval (t over seeds; with one seed a
    moving-block bootstrap over blocks of ≥ 16K tokens, none when the tokens are too few for ten) and the paired
    ratio of perplexities, from the row's :func:`paired_ratio` ``c``; '—' where the two lengths were not scored on
    the same windows (``c`` None)."""
    if c is None:
        return "—", math.nan
    iv = "" if c.interval is None else f" [{c.interval.lo:+.3f}, {c.interval.hi:+.3f}]"
    return f"{c.value:+.3f}{iv} ×{c.ratio:.3f}", c.value


def context_of(col: Collected, c: pd.DataFrame, start: int, end: int) -> pd.DataFrame:
    """The context-use rows (one per seed) of the eval rows ``c`` of one cell, for positions [start, end): the same
    runs, scheme label, split, length and evaluation settings."""
    x = col.context
    if x.empty or c.empty:
        return pd.DataFrame()
    first = c.iloc[0]
    same = (x["run"].isin(set(c["run"])) & (x["scheme"] == first["scheme"]) & (x["split"] == first["split"])
            & (x["L_eval"] == int(first["L_eval"]))
            & (x["pos_start"] == start) & (x["pos_end"] == end) & (x["step"].astype(str) == str(first["step"]))
            & (x["precision"].astype(str) == str(first["precision"])) & (x["budget"].astype(str) == str(first["budget"]))
            & (x["tokens_scored"] == int(first["tokens_scored"])))
    return x[same]


def gain_cell(col: Collected, c: pd.DataFrame, start: int, end: int) -> str:
    """``+0.006 [−0.002, +0.014]``: the loss at positions [start, end) minus the loss at [L/2, L) of L windows,
    nats per token, mean over seeds with its 95 % interval (t over seeds with ≥ 2, else the run's block bootstrap;
    none for one seed of a run whose context use comes from its position curve); '—' where a seed has no context
    row (a length not reached, or position buckets that do not fall on the range's edges)."""
    g = _context_rows(col, c, start, end)
    if g is None:
        return "—"
    values = g["gain"].to_numpy(float)
    if len(values) == 1:
        lo, hi = float(g["lo"].iloc[0]), float(g["hi"].iloc[0])
    else:
        iv = stats.seed_interval(values)
        lo, hi = iv.lo, iv.hi
    if math.isnan(lo):  # one seed of an evaluation older than context.csv: from its position curve, no interval
        return f"{values.mean():+.3f}"
    return f"{values.mean():+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _context_rows(col: Collected, c: pd.DataFrame, start: int, end: int) -> pd.DataFrame | None:
    """The context rows of every seed of ``c`` (one length's rows of one table row), None unless each has one."""
    g = context_of(col, c[c["status"] == "ok"], start, end)
    return None if g.empty or len(g) != len(c) or (c["status"] != "ok").any() else g


def context_table(col: Collected, split: str = "validation") -> pd.DataFrame:
    """Context use at the longest length every seed of a row reached (:func:`reach`), for each row of the
    nonoverlapping table: one column per position range
    past L ([L, 2L), [2L, 4L), …, [L, longest)), the loss there minus the loss at [L/2, L) of L windows, nats per
    token, with its interval (:func:`gain_cell`), and the reference loss itself."""
    d, x = col.df, col.context
    if d.empty or x.empty:
        return pd.DataFrame()
    d = d[(d["mode"] == "nonoverlapping") & (d["split"] == split)]
    d = d.assign(row=row_names(d))
    rows, index = [], []
    for name, L in dict.fromkeys(zip(d["row"], d["L_train"])):
        r = d[(d["row"] == name) & (d["L_train"] == L)]
        longest = reach(r)
        c = r[r["L_eval"] == longest]
        mine = x[(x["L_train"] == int(L)) & (x["L_eval"] == longest)]
        ranges = sorted({(int(a), int(b)) for a, b in zip(mine["pos_start"], mine["pos_end"])},
                        key=lambda ab: (ab[1] - ab[0] == longest - int(L), ab))  # [L, longest) whole: last
        if longest <= int(L) or not ranges:
            continue
        ref = context_of(col, c, int(L), longest)
        cells = {"loss [L/2, L)": f"{ref['ref_loss'].mean():.3f}" if len(ref) else "—"}
        cells |= {f"[{a}, {b})": gain_cell(col, c, a, b) for a, b in ranges}
        cells["seeds"] = int(c["seed"].nunique())
        rows.append(cells)
        index.append((name, int(L)))
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["scheme", "L_train"]), dtype=object)


def reach(r: pd.DataFrame) -> int:
    """The longest length every seed of one table row was evaluated at (the row's own longest length, where
    longest/L and the context use are read: a length only some seeds reached would compare other seeds)."""
    seeds = set(r["seed"])
    full = [int(n) for n, g in r.groupby("L_eval") if set(g["seed"]) == seeds]
    return max(full, default=int(r["L_eval"].max()))


def row_names(d: pd.DataFrame) -> list[str]:
    """The table row of each eval row: its label, plus the evaluation settings (sliding stride S, token budget,
    precision) that differ within its configuration — rows of other settings are never averaged together."""
    if "warmup" not in d:
        d = d.assign(warmup="0")  # rows of files older than the column
    varies = {c: d.groupby("config")[c].nunique().max() > 1 for c in ("budget", "S", "precision", "warmup")}
    return [label + (f" · S={S}" if varies["S"] else "") + (f" · tokens={budget}" if varies["budget"] else "")
            + (f" · {prec or 'precision ?'}" if varies["precision"] else "")
            + (f" · warm-up={w}" if varies["warmup"] else "")
            for label, budget, S, prec, w in zip(d["label"], d["budget"], d["S"], d["precision"], d["warmup"])]


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
            iv = stats.log_seed_interval(values)
        else:
            w = _cell_windows(col, c)
            if w is None:
                return (round(mean, 3) if len(values) == 1 else text), mean, ""
            iv = stats.ppl_interval(list(w.values()), n_boot=BOOTSTRAP)
    except ValueError:
        return text, mean, ""
    kind = f"t on log, {len(values)} seeds" if len(values) >= 2 else "block bootstrap, windows"
    return f"{text} [{iv.lo:.3f}, {iv.hi:.3f}]", mean, kind


BOOTSTRAP = 1000  # resamples per interval: the 2.5/97.5 percentiles move by < 0.1% of the perplexity beyond this


def best_marks(col: Collected, stats_by_cell: dict, lengths: list[int]) -> set[tuple[str, int, int]]:
    """Cells (row, L, length) that are the separated best of their table group at that length: the lowest mean,
    marked only when the paired test (same windows, same seeds) against every other row of the group is rejected by
    Holm's step-down correction at 5 % family-wise. Rows whose paired losses equal the best's exactly (the same
    model at that length, e.g. an eval-time variant at L) share its mark; a group whose best is not separated from
    every other row gets no mark."""
    marks: set[tuple[str, int, int]] = set()
    for n in lengths:
        by_group: dict[tuple, list] = {}
        for (name, L, m), (mean, c) in stats_by_cell.items():
            if m == n and not pd.isna(mean):
                key = (c["group"].iloc[0], L, c["budget"].iloc[0], c["S"].iloc[0], c["precision"].iloc[0],
                       c["warmup"].iloc[0], c["tokens_scored"].iloc[0])  # rows compete only on the same windows
                by_group.setdefault(key, []).append((mean, name, L, c))
        for members in by_group.values():
            marks |= {(name, L, n) for name, L in _separated_best(col, members)}
    return marks


def _separated_best(col: Collected, members: list) -> list[tuple[str, int]]:
    """The rows (name, L) of one group to mark: the best and its identical twins, when a Holm-corrected paired test
    separates it from every other row; none otherwise, when there is no other row to separate it from, or when a
    row lacks per-window losses."""
    members = sorted(members, key=lambda x: x[0])
    _, best_name, best_L, best_rows = members[0]
    tests = [(name, L, _paired(col, c, best_rows)) for _, name, L, c in members[1:]]
    if any(p is None for _, _, p in tests):
        return []  # a row without per-window losses cannot be tested: no claim about this group
    same = [(name, L) for name, L, p in tests if p.diff == 0 and p.interval.lo == p.interval.hi == 0]
    others = [p for name, L, p in tests if (name, L) not in same]
    if not others or not all(stats.holm_rejected([p.p_value for p in others])):
        return []
    return [(best_name, best_L), *same]


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
    settings = ["mode", "group", "L_train", "L_eval", "budget", "S", "precision", "warmup", "step", "tokens_scored"]
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
    if t.groupby(["mode", "config", "L_eval"])["budget"].nunique().max() < 2:  # one budget per length: unsaid
        t = t.drop(columns="budget")
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
    if not set(ra["seed"]) & set(rb["seed"]):
        return None, (f"the seeds do not overlap ({a}: {', '.join(map(str, sorted(set(ra['seed']))))}; {b}: "
                      f"{', '.join(map(str, sorted(set(rb['seed']))))}): nothing to pair")
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
            "budget": f"{g['budget'].iloc[0]} ({int(g['tokens_scored'].iloc[0]):,} tokens)",
            f"ppl {a}": round(float(ra["ppl"].mean()), 3), f"ppl {b}": round(float(rb["ppl"].mean()), 3),
            "difference": round(p.diff, 3), "95% interval": f"[{p.interval.lo:.3f}, {p.interval.hi:.3f}]",
            "method": f"t, {p.interval.n} seeds" if p.interval.method == stats.T_METHOD
            else f"paired block bootstrap, {p.interval.n} windows",
            "excludes 0": "yes" if p.excludes_zero else "no", "verdict": verdict,
            "seeds left out": ", ".join(map(str, dropped)) or "-"}, ""


def _mark(value: Any, marked: bool, bold: tuple[str, str]) -> str:
    return f"{bold[0]}{value}{bold[1]}" if marked else str(value)


def write_tables(df: pd.DataFrame | Collected, out_dir: Path, title: str = "", split: str = "validation",
                 preamble: str = "") -> list[Path]:
    """comparison.csv (every mode, wide) and comparison.md (one table per mode; ``preamble``: a line under its
    title, such as the report's precondition), for one split."""
    col = df if isinstance(df, Collected) else Collected(df)
    df = col.df
    out_dir.mkdir(parents=True, exist_ok=True)
    parts, md = [], [f"# {markdown.inline(title)}\n" if title else ""]
    if preamble:
        md.append(f"\n{preamble}\n")
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
                  f"{_fmt(scored) if scored else 0} tokens scored per length)\n\n{_markdown(t)}\n\n{LEGEND}"
                  f"{RATIO_LEGEND}{_sliding_legend(d) if mode == 'sliding' else ''}"
                  f"{CONTEXT_VALUE_LEGEND if CONTEXT_VALUE in t.columns else ''}\n")
    ctx = context_table(col, split)
    if not ctx.empty:
        md.append(f"\n## Position gain past L on the {split} split, at the longest length (nats per token)\n\n"
                  f"{_markdown(ctx)}\n\n{CONTEXT_LEGEND}\n")
    paths = []
    if parts:
        csv_path = out_dir / "comparison.csv"
        atomic_write_text(csv_path, pd.concat(parts, ignore_index=True).to_csv(index=False))
        md_path = out_dir / "comparison.md"
        atomic_write_text(md_path, "".join(md).lstrip())
        paths = [csv_path, md_path]
    return paths


LEGEND = ("Cells: mean perplexity (± std over seeds) [95% interval: with ≥ 2 seeds a t interval over the seeds' mean "
          "log-losses, exponentiated; with one a moving-block bootstrap over the evaluation windows — column "
          "`interval`]. **Bold**: the best of its column among the rows trained with the same recipe (all but the "
          "scheme: the same L, steps and batch) and scored on the same "
          "windows, only where paired tests (the same windows and seeds) separate it from every other such row "
          "(Holm-corrected to 5 % family-wise); rows scoring exactly as it does (the same model at that length) "
          "share the mark; such a group without bold has no separated best. "
          "`diverged`/`nan`: a replica gave no finite number (never averaged in); `n/a`: the scheme cannot run at "
          "that length; `—`: not evaluated.")


RATIO_LEGEND = (" `longest/L`: the perplexity at the longest length over the one at L [95 % interval of the paired "
                "ratio where both scored the same tokens: t over seeds, or with one seed a moving-block bootstrap over "
                "blocks of ≥ 16K tokens, omitted when they make fewer than ten]; `n/a` where the row has no length past "
                "its L.")
SLIDING_LEGEND = (" Sliding: the first (longest length) tokens are context only; every length then scores the same "
                  "tokens, each with at least L_eval − S tokens of context, so longest/L compares the lengths "
                  "without the early-token effect.")
CONTEXT_VALUE_LEGEND = (" `context value`: the same model on the same scored tokens with the longest length's "
                        "context minus with L's — a paired truncation contrast, nats per token: 0 = uses exactly L "
                        "(the sliding pass at L is the windowed null), negative = the context past L helps, positive "
                        "= it hurts; [95 % interval: t over seeds, or with one seed a moving-block bootstrap over "
                        "blocks of ≥ 16K tokens, omitted when the scored tokens make fewer than ten]; ×: the paired "
                        "ratio of perplexities.")
OLD_SLIDING_LEGEND = (" Sliding without a warm-up (rows evaluated before it existed): each window scores its last S "
                      "tokens from the start of the split, so the first tokens of every length have less context "
                      "and longest/L still holds the early-token effect.")


def _sliding_legend(d: pd.DataFrame) -> str:
    """The sliding table's legend: what its rows' warm-up means (rows with and without one: both sentences)."""
    warm = pd.to_numeric(d["warmup"], errors="coerce").fillna(0) if "warmup" in d else pd.Series([0] * len(d))
    return ((SLIDING_LEGEND if (warm > 0).any() else "")
            + (OLD_SLIDING_LEGEND if (warm <= 0).any() else ""))


CONTEXT_LEGEND = ("Each column: the mean loss at those positions of the longest windows minus the mean loss at "
                  "positions [L/2, L) of the L windows (`loss [L/2, L)`), nats per token [95 % interval]. A position "
                  "gain, not a calibrated measure of context use: the two sides are other tokens with less context, "
                  "so position-to-position noise (±0.01–0.03 nats) is as large as a flat scheme's value; the sliding "
                  "table's `context value` is the paired contrast on the same tokens.")


def _fmt(strides) -> str:
    return ", ".join(str(int(s)) for s in strides) if len(strides) > 1 else str(int(strides[0]))


def _markdown(t: pd.DataFrame) -> str:
    best = t.attrs.get("best", set())
    rows = [[scheme, L] + [_mark(v, c.isdigit() and (scheme, L, int(c)) in best, ("**", "**")) for c, v in row.items()]
            for (scheme, L), row in t.iterrows()]
    return markdown.table(["scheme", "L", *t.columns], rows)


CONSOLE_COLUMNS = 120  # the compact console table's width: mean ± std at four eval lengths beside the row name


def rich_table(t: pd.DataFrame, title: str, wide: bool = True, styled: bool = True) -> Table:
    """A comparison table for the console. ``wide``: every column, cells with their intervals (as comparison.md);
    otherwise mean ± std alone (``6.732±0.030``) and no interval column, so that four eval lengths fit 120 columns
    (a row name too long for them folds onto a second line).
    ``styled``: best cells in bold (a terminal); otherwise marked with a trailing ``*`` (a log file, a pipe)."""
    table = _rich_table(t, title, wide, styled, None)
    over = 0 if wide else _rendered_width(table) - CONSOLE_COLUMNS
    width = max(len(str(scheme)) for scheme, _ in t.index)
    while over > 0 and width > 12:  # re-measured: rich's column padding around max_width differs across versions
        width = max(12, width - over)
        table = _rich_table(t, title, wide, styled, width)
        over = _rendered_width(table) - CONSOLE_COLUMNS
    return table


def _rich_table(t: pd.DataFrame, title: str, wide: bool, styled: bool, scheme_width: int | None) -> Table:
    marker = ("[bold]", "[/bold]") if styled else ("", "*")
    marked = bool(t.attrs.get("best"))
    table = Table(title=title, header_style="bold", box=None if not wide else box.HEAVY_HEAD, pad_edge=False,
                  caption=f"{'bold' if styled else '*'}: the best of the rows with its training recipe, separated from "
                          "every other such row (paired, Holm 5%)" if marked else None)
    columns = [c for c in t.columns if wide or c != "interval"]
    table.add_column("scheme", no_wrap=scheme_width is None, overflow="fold", max_width=scheme_width)
    table.add_column("L", justify="right")
    for c in columns:
        table.add_column(c, justify="right", no_wrap=True)
    best = t.attrs.get("best", set())
    for (scheme, L), row in t.iterrows():
        cells = [_mark(escape(str(row[c]) if wide else compact(row[c])), c.isdigit() and (scheme, L, int(c)) in best,
                       marker) for c in columns]
        table.add_row(escape(str(scheme)), str(L), *cells)
    return table


def _rendered_width(table: Table) -> int:
    """The widest line of ``table`` printed without a width limit."""
    probe = Console(file=io.StringIO(), width=10_000, highlight=False)
    probe.print(table)
    return max(len(line.rstrip()) for line in probe.file.getvalue().splitlines())


def compact(cell: Any) -> str:
    """``6.732 ± 0.030 [6.466, 6.999]`` → ``6.732±0.030``: a cell without its interval (kept in the files)."""
    return re.sub(r" \[[^\]]*\]$", "", str(cell)).replace(" ± ", "±")


def write_table_files(df: pd.DataFrame | Collected, out: Path, title: str, split: str,
                      preamble: str = "") -> tuple[Collected, list[Path]]:
    """eval_long.csv (every row, sorted) and the comparison tables under ``out``; returns the sorted rows and the
    files written."""
    col = df if isinstance(df, Collected) else Collected(df)
    df = col.df.sort_values(["data", "model", "L_train", "scheme", "seed", "split", "mode", "L_eval"], kind="stable")
    col = dataclasses.replace(col, df=df)
    # the fine-tuning columns only where there are fine-tunes (the long CSV of other reports stays as it was)
    fine_tunes = (df.get("ft_parent", pd.Series([], dtype=str)) != "").any()
    plain = df if fine_tunes else df.drop(columns=list(FINETUNE_COLUMNS), errors="ignore")
    plain = plain.drop(columns=list(REFERENCE_COLUMNS), errors="ignore")  # internal keys, not the runs' numbers
    atomic_write_text(out / "eval_long.csv", plain.to_csv(index=False))
    return col, [out / "eval_long.csv", *write_tables(col, out, title, split, preamble)]

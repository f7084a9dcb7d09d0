"""What fraction of the trained-long headroom an extrapolating row recovers.

A model trained at L and evaluated at L·r gains ``short(L) − short(L·r)`` nats per token over its own loss at L; the
same model trained at L·r with the same token budget (the *trained-long reference*) reaches ``long(L·r)`` there, so
``short(L) − long(L·r)`` is what the longer context is worth to a model that can use it. The fraction recovered is

    (short(L) − short(L·r)) / (short(L) − long(L·r))

— 1: the extrapolating row does as well as training long; 0: it merely does not break; negative: it breaks. Losses
are those of the sliding evaluation (pe_bench.evaluate.perplexity: every length scores the same tokens, each with at
least L_eval − S tokens of context), so the early-token effect of non-overlapping blocks is not counted as a gain.
A row is compared with the reference of its own base scheme where there is one, else with the best reference (the
lowest loss at that length); seeds are paired in order (seed i with seed i) and the fraction's interval is a t
interval over those pairs. Where a seed's reference is no better than the short model at L (headroom ≤ 0: training
long with that budget did not pay), there is no fraction: the table says "no headroom".
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from pe_bench import markdown, stats
from pe_bench.report.collect import Collected
from pe_bench.runs import atomic_write_text

COLUMNS = ["scheme", "L", "L_eval", "reference", "short_at_L", "short", "long", "gained", "headroom", "fraction",
           "lo", "hi", "seeds"]


def _losses(col: Collected) -> pd.DataFrame:
    """Sliding rows that hold a number: one per (label, L_train, L_eval, seed), with its mean loss."""
    d = col.df
    d = d[(d["mode"] == "sliding") & (d["status"] == "ok")]
    return d.assign(loss=np.log(d["ppl"].astype(float)))[["label", "base_scheme", "L_train", "L_eval", "seed", "loss"]]


def headroom(short: Collected, long: Collected) -> pd.DataFrame:
    """One row per short-trained row × longer evaluation length that a trained-long reference was evaluated at
    (COLUMNS; losses in nats per token, means over seeds). Rows whose seeds or lengths do not line up are left out."""
    s, g = _losses(short), _losses(long)
    ref = g[g["L_train"] == g["L_eval"]]  # each reference at its own training length
    out = []
    for (label, base, L), rows in s.groupby(["label", "base_scheme", "L_train"], sort=True):
        at_L = rows[rows["L_eval"] == L].set_index("seed")["loss"]
        for n in sorted(set(rows["L_eval"]) & set(ref["L_eval"])):
            if n <= L or at_L.empty:
                continue
            mine = ref[ref["L_eval"] == n]
            name = base if base in set(mine["base_scheme"]) else mine.groupby("base_scheme")["loss"].mean().idxmin()
            r = _fraction(at_L, rows[rows["L_eval"] == n].set_index("seed")["loss"],
                          mine[mine["base_scheme"] == name].sort_values("seed")["loss"].to_numpy())
            if r is not None:
                out.append({"scheme": label, "L": int(L), "L_eval": int(n), "reference": f"{name} trained at {n}",
                            **r})
    return pd.DataFrame(out, columns=COLUMNS)


def _fraction(at_L: pd.Series, at_n: pd.Series, long: np.ndarray) -> dict | None:
    """Means and the fraction recovered over the seeds both short lengths have, paired in order with the
    reference's seeds (as many pairs as the shorter side has)."""
    seeds = sorted(set(at_L.index) & set(at_n.index))
    k = min(len(seeds), len(long))
    if k == 0:
        return None
    a, b, c = at_L[seeds[:k]].to_numpy(), at_n[seeds[:k]].to_numpy(), long[:k]
    if (a - c).min() <= 0:  # the reference is no better than the short model at L: nothing to recover
        return {"short_at_L": a.mean(), "short": b.mean(), "long": c.mean(), "gained": (a - b).mean(),
                "headroom": (a - c).mean(), "fraction": math.nan, "lo": math.nan, "hi": math.nan, "seeds": k}
    frac = (a - b) / (a - c)
    lo = hi = math.nan
    if k >= 2 and np.isfinite(frac).all():
        iv = stats.seed_interval(frac)
        lo, hi = iv.lo, iv.hi
    return {"short_at_L": a.mean(), "short": b.mean(), "long": c.mean(), "gained": (a - b).mean(),
            "headroom": (a - c).mean(), "fraction": float(frac.mean()), "lo": lo, "hi": hi, "seeds": k}


def markdown_table(t: pd.DataFrame) -> str:
    """The headroom table as markdown: losses to 3 decimals, the fraction as a percentage with its interval."""
    def pct(x: float) -> str:
        return "—" if math.isnan(x) else f"{100 * x:.0f} %"

    def fraction(r) -> str:
        if math.isnan(r.fraction):
            return "no headroom" if r.headroom <= 0 or math.isnan(r.headroom) else "—"
        return pct(r.fraction) + ("" if math.isnan(r.lo) else f" [{pct(r.lo)}, {pct(r.hi)}]")

    rows = [[r.scheme, r.L, r.L_eval, r.reference, f"{r.short_at_L:.3f}", f"{r.short:.3f}", f"{r.long:.3f}",
             f"{r.gained:+.3f}", f"{r.headroom:+.3f}", fraction(r), r.seeds] for r in t.itertuples()]
    return markdown.table(["scheme", "L", "L_eval", "reference", "loss at L", "loss at L_eval", "reference's loss",
                           "gained", "headroom", "fraction recovered [95 %]", "seeds"], rows)


def split_by_length(col: Collected, split: str = "validation") -> tuple[Collected, Collected] | None:
    """(short, long): the rows of the shortest training length and those of runs trained at one of its longer
    evaluation lengths (the trained-long references), on the same model and data; None when the runs hold no such
    pair."""
    d = col.df
    if d.empty or "model" not in d or "data" not in d:
        return None
    d = d[(d["split"] == split) & (d["mode"] == "sliding")]
    if d.empty:
        return None
    L = d["L_train"].min()
    short = d[d["L_train"] == L]
    long = d[(d["L_train"] > L) & d["L_train"].isin(set(short["L_eval"]))
             & d["model"].isin(set(short["model"])) & d["data"].isin(set(short["data"]))]
    if long.empty:
        return None
    return Collected(short, col.windows), Collected(long, col.windows)


def write_headroom(col: Collected, out: Path, title: str, split: str = "validation") -> list[Path]:
    """headroom.csv and headroom.md under ``out`` when the runs hold trained-long references; else nothing."""
    pair = split_by_length(col, split)
    if pair is None:
        return []
    t = headroom(*pair)
    if t.empty:
        return []
    csv_path, md_path = out / "headroom.csv", out / "headroom.md"
    atomic_write_text(csv_path, t.round(6).to_csv(index=False))
    head = f"# {title}\n\n" if title else ""
    atomic_write_text(md_path, f"{head}## What fraction of the trained-long headroom each row recovers ({split} "
                               f"split, sliding evaluation)\n\n{markdown_table(t)}\n\n{LEGEND}\n")
    return [csv_path, md_path]


LEGEND = ("Losses in nats per token, means over seeds, from the sliding evaluation (every length scores the same "
          "tokens, each with at least L_eval − S tokens of context). `gained`: loss at L minus loss at L_eval of the "
          "model trained at L; `headroom`: loss at L minus the loss at L_eval of the same scheme trained at L_eval "
          "with the same token budget (the reference; the best reference where the scheme has none); fraction "
          "recovered = gained / headroom, seeds paired in order, [95 % t interval over the pairs]: 100 % = as good as "
          "training long, 0 % = no gain from the longer context, negative = worse than at L; `no headroom`: in some "
          "seed the reference is no better at L_eval than the short model at L, so there is nothing to recover.")

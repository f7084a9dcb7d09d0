"""What fraction of the trained-long headroom an extrapolating row recovers.

A model trained at L and evaluated at L·r gains ``short(L) − short(L·r)`` nats per token over its own loss at L; the
same model trained at L·r with the same token budget (the *trained-long reference*) reaches ``long(L·r)`` there, so
``short(L) − long(L·r)`` is what the longer context is worth to a model that can use it. The fraction recovered is

    (short(L) − short(L·r)) / (short(L) − long(L·r))

— 1: the extrapolating row does as well as training long; 0: it merely does not break; negative: it breaks. Losses
are those of the sliding evaluation (pe_bench.evaluate.perplexity: every length scores the same tokens, each with at
least L_eval − S tokens of context), so the early-token effect of non-overlapping blocks is not counted as a gain.
Eval-time variants (rope+yarn×8, …) get no row: the headroom is a trained model's. A row is compared only with
references of its own trained scheme (same scheme options), the same model, data and task, and the same token
budget, evaluated with the same sliding settings (stride, warm-up, token budget); each such reference configuration
is a row of its own, and only each run's final weights count (a ``--partial`` evaluation's rows are not paired).
Seeds are paired by seed number (seed i with seed i, seeds one side lacks named in the note; a row whose sides share
no seed says so and holds no number); the fraction is the ratio of the mean gain to the mean headroom over those
pairs, with Fieller's interval for a ratio of means (with one seed, a paired block bootstrap of the ratio over the
same windows; unbounded where the headroom's own interval holds 0). A seed that diverged on either side gives no
fraction ("diverged"), never a smaller pairing. Where a seed's reference is no better than the short model at L
(headroom ≤ 0: training long with that budget did not pay), there is no fraction: the table says "no headroom" (and
the note which seed, where the mean has some). The gate is checked against each short model a reference is paired
with, and listed once per pair.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from pe_bench import markdown, stats
from pe_bench.report.collect import Collected
from pe_bench.report.files import WINDOW_KEY, window_key, write_csv_md

COLUMNS = ["scheme", "base_scheme", "L", "L_eval", "reference", "tokens", "short_at_L", "short", "long", "gained", "headroom", "fraction",
           "lo", "hi", "headroom_lo", "headroom_hi", "seeds", "note", "gate", "gate_detail"]
SETTINGS = ["stride", "warmup", "budget"]  # a sliding pass's settings: rows of other settings are never paired
MATCH = ["base_scheme", "scheme_id", "setup", "tokens_trained", *SETTINGS]  # what a reference shares with its row


def _losses(col: Collected) -> pd.DataFrame:
    """Sliding rows of the schemes as trained (eval-time variants have no headroom row), one per (run, label, L_eval,
    settings), with their loss (NaN where the row holds no number)."""
    d = col.df
    d = d[(d["mode"] == "sliding") & d.get("as_trained", pd.Series(True, index=d.index)).astype(bool)]
    if "step" in d and "steps" in d:  # a --partial evaluation holds an earlier step's weights: not the run's number
        d = d[(pd.to_numeric(d["step"], errors="coerce") == pd.to_numeric(d["steps"])) | (d["status"] != "ok")]
    loss = np.log(pd.to_numeric(d["ppl"], errors="coerce").astype(float))
    cols = ["label", "config", "L_train", "L_eval", "seed", "status", *MATCH]
    keys = [c for c in ("run", *WINDOW_KEY) if c in d and c not in cols]  # to find the rows' per-window losses
    return d.assign(loss=loss, budget=d["budget"].astype(str), warmup=d["warmup"].astype(str),
                    stride=d["stride"].astype(str))[[*cols, *keys, "loss"]]


def headroom(short: Collected, long: Collected) -> pd.DataFrame:
    """One row per short-trained row × longer evaluation length × matching trained-long reference configuration
    (COLUMNS; losses in nats per token, means over the paired seeds). ``.attrs["unpaired"]``: the references that
    match no short row (another budget, model, data or sliding setting), named rather than dropped."""
    s, g = _losses(short), _losses(long)
    ref = g[g["L_train"] == g["L_eval"]]  # each reference at its own training length
    out, used = [], set()
    for (label, _config, L), rows in s.groupby(["label", "config", "L_train"], sort=True):
        for key, same in rows.groupby(MATCH, sort=True):
            at_L = same[same["L_eval"] == L]
            mine = ref.merge(pd.DataFrame([key], columns=MATCH), on=MATCH)
            for n in sorted(set(same["L_eval"]) & set(mine["L_eval"])):
                if n <= L or at_L.empty:
                    continue
                for rc, r in mine[mine["L_eval"] == n].groupby("config", sort=True):
                    used.add(rc)
                    row = _fraction(at_L, same[same["L_eval"] == n], r)
                    at_short = g[(g["config"] == rc) & (g["L_eval"] == L)].merge(
                        pd.DataFrame([key], columns=MATCH), on=MATCH)
                    passed, why = gate(at_L, at_short, r, windows=(short.windows, long.windows))
                    row.update(zip(("headroom_lo", "headroom_hi"),
                                   _headroom_interval(at_L, r, (short.windows, long.windows))))
                    if row["seeds"] == 1 and not math.isnan(row["fraction"]):
                        row.update(zip(("lo", "hi"), _one_seed_fraction_interval(
                            at_L, same[same["L_eval"] == n], r, (short.windows, long.windows))))
                    if not passed and not math.isnan(row["fraction"]):
                        row.update(fraction=math.nan, lo=math.nan, hi=math.nan)
                    out.append({"scheme": label, "base_scheme": key[MATCH.index("base_scheme")], "L": int(L),
                                "L_eval": int(n),
                                "reference": f"{r['label'].iloc[0]} trained at {n}",
                                "tokens": int(key[MATCH.index("tokens_trained")]), **row,
                                "gate": "passed" if passed else "failed", "gate_detail": why})
    t = pd.DataFrame(out, columns=COLUMNS)
    alone = ref[~ref["config"].isin(used)].drop_duplicates("config")
    t.attrs["unpaired"] = [f"{r.label} trained at {r.L_train}" for r in alone.itertuples()]
    return t


def gate(short_at_L: pd.DataFrame, ref_at_L: pd.DataFrame, ref_at_n: pd.DataFrame,
         windows: tuple[dict, dict] | None = None) -> tuple[bool, str]:
    """Whether a trained-long reference may bound anything, and the line that says why: (1) with L tokens of context,
    on the same tokens, it is no worse than the short model at L (its loss minus the short model's, paired by seed,
    with a t interval over the seeds: not above 0); (2) its own context value — its loss with n tokens of context
    minus with L, the same tokens — is negative with an interval excluding 0 (it uses what it was trained on). With
    one paired seed both contrasts come from the per-window losses (``windows``: the short and the long runs'), with
    a paired block bootstrap over blocks of ≥ 16K tokens (:func:`stats.truncation_contrast`). A reference not
    evaluated at L, or without an interval, fails: nothing is known."""
    if ref_at_L.empty:
        return False, "not evaluated at L: evaluate it at L too (eval.lengths=[L, …]) to check the gate"
    oks = [x[x["status"] == "ok"] for x in (short_at_L, ref_at_L, ref_at_n)]
    if any(x["seed"].duplicated().any() for x in oks):
        return False, "two rows of one seed on one side (e.g. two precisions): not paired, the gate cannot be checked"
    a, b, c = (x.set_index("seed")["loss"] for x in oks)
    seeds = sorted(set(a.index) & set(b.index) & set(c.index))
    if len(seeds) == 1:  # the short model may have more seeds than its reference: the paired one's windows
        return _one_seed_gate(*(x[x["seed"] == seeds[0]] for x in (short_at_L, ref_at_L, ref_at_n)), windows)
    if len(seeds) < 2:
        return False, "no paired seed: the gate cannot be checked"
    worse, value = (b[seeds] - a[seeds]).to_numpy(), (c[seeds] - b[seeds]).to_numpy()
    iw, iv = stats.seed_interval(worse), stats.seed_interval(value)
    return _verdict(worse.mean(), iw, value.mean(), iv, f"{len(seeds)} seeds")


def _one_seed_gate(short_at_L: pd.DataFrame, ref_at_L: pd.DataFrame, ref_at_n: pd.DataFrame,
                   windows: tuple[dict, dict] | None) -> tuple[bool, str]:
    """The gate of one paired seed, from the per-window losses of the three sides (the same scored tokens)."""
    short_w, long_w = windows or ({}, {})
    sides = [_windows_of(short_w, short_at_L), _windows_of(long_w, ref_at_L), _windows_of(long_w, ref_at_n)]
    if any(w is None for w in sides):
        return False, "1 paired seed without per-window losses: no interval, the gate cannot be checked"
    (nll_a, tok), (nll_b, tok_b), (nll_c, tok_c) = sides
    if not (np.array_equal(tok, tok_b) and np.array_equal(tok, tok_c)):
        return False, "1 paired seed scored on other windows at L and L_eval: the gate cannot be checked"
    worse = stats.truncation_contrast({0: (nll_b, nll_a, tok)})
    value = stats.truncation_contrast({0: (nll_c, nll_b, tok)})
    if worse.interval is None or value.interval is None:
        return False, (f"1 paired seed on {worse.tokens:,} tokens, fewer than ten blocks of "
                       f"{stats.CONTRAST_BLOCK_TOKENS:,}: no interval, the gate cannot be checked")
    return _verdict(worse.value, worse.interval, value.value, value.interval,
                    f"1 seed, block bootstrap over {worse.tokens:,} tokens")


def _headroom_interval(short_at_L: pd.DataFrame, ref_at_n: pd.DataFrame,
                       windows: tuple[dict, dict]) -> tuple[float, float]:
    """The 95 % interval of the headroom (short model's loss at L minus the reference's at L_eval, the same scored
    tokens): t over the paired seeds, or with one seed a paired block bootstrap of the per-window losses over blocks
    of ≥ 16K tokens; NaNs where there is none."""
    a, c = (x[x["status"] == "ok"].drop_duplicates("seed").set_index("seed")["loss"] for x in (short_at_L, ref_at_n))
    seeds = sorted(set(a.index) & set(c.index))
    if len(seeds) >= 2:
        iv = stats.seed_interval((a[seeds] - c[seeds]).to_numpy())
        return iv.lo, iv.hi
    sides = _seed_windows(seeds, [(windows[0], short_at_L), (windows[1], ref_at_n)])
    if sides is None:
        return math.nan, math.nan
    c1 = stats.truncation_contrast({0: (sides[0][0], sides[1][0], sides[0][1])})
    return (math.nan, math.nan) if c1.interval is None else (c1.interval.lo, c1.interval.hi)


def _one_seed_fraction_interval(short_at_L: pd.DataFrame, short_at_n: pd.DataFrame, ref_at_n: pd.DataFrame,
                                windows: tuple[dict, dict]) -> tuple[float, float]:
    """One paired seed's fraction recovered, its 95 % interval: the gain and the headroom on the same windows,
    bootstrapped together over blocks of ≥ 16K tokens (:func:`stats.contrast_ratio`); NaNs where there is none."""
    seeds = sorted(set(short_at_L["seed"]) & set(short_at_n["seed"]) & set(ref_at_n["seed"]))
    sides = _seed_windows(seeds, [(windows[0], short_at_L), (windows[0], short_at_n), (windows[1], ref_at_n)])
    if sides is None:
        return math.nan, math.nan
    iv = stats.contrast_ratio(sides[0][0], sides[1][0], sides[2][0], sides[0][1])
    return (math.nan, math.nan) if iv is None else (iv.lo, iv.hi)


def _seed_windows(seeds: list, sides: list[tuple[dict, pd.DataFrame]]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """The per-window (nll, tokens) of each side's row of the one paired seed (``sides``: (windows, rows) each); None
    unless there is exactly one seed, every side has its windows, and they score the same windows."""
    if len(seeds) != 1:
        return None
    found = [_windows_of(w, rows[rows["seed"] == seeds[0]]) for w, rows in sides]
    if any(f is None for f in found) or not all(np.array_equal(found[0][1], f[1]) for f in found[1:]):
        return None
    return found


def _windows_of(windows: dict, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """The per-window (nll, tokens) of the one ok row of ``rows``, None where it has none."""
    ok = rows[rows["status"] == "ok"]
    if len(ok) != 1 or "run" not in ok:
        return None
    return windows.get(window_key(ok["run"].iloc[0], ok.iloc[0].to_dict()))


def _verdict(worse: float, iw: stats.Interval, value: float, iv: stats.Interval, how: str) -> tuple[bool, str]:
    """The gate's verdict and its line from the two contrasts (nats per token) and their 95 % intervals."""
    said = (f"at L {worse:+.3f} [{iw.lo:+.3f}, {iw.hi:+.3f}] nats against the short model; its context value "
            f"{value:+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}] ({how})")
    if iw.lo > 0:
        return False, f"worse at equal short context: {said}"
    if not iv.hi < 0:
        return False, f"its context value is not below 0: {said}"
    return True, said


def _fraction(at_L: pd.DataFrame, at_n: pd.DataFrame, long: pd.DataFrame) -> dict:
    """Means and the fraction recovered over the seeds all three sides have, paired by seed; no number where they
    share none (the note names each side's seeds). A seed that diverged on any side (or holds two rows) gives no
    fraction."""
    sides = [at_L, at_n, long]
    seeds = sorted(set.intersection(*(set(x["seed"]) for x in sides)))
    if not seeds:
        mine, theirs = (", ".join(map(str, sorted({int(v) for x in xs for v in x["seed"]}))) for xs in (sides[:2], sides[2:]))
        return _blank(0, f"no seed in common (short model: {mine}; reference: {theirs})")
    unpaired = sorted(set().union(*(set(x["seed"]) for x in sides)) - set(seeds))
    note = f"seeds {', '.join(map(str, unpaired))} unpaired" if unpaired else ""
    kept = [x[x["seed"].isin(seeds)].sort_values("seed") for x in sides]
    if any(x["seed"].duplicated().any() for x in kept):
        return _blank(len(seeds), "two rows of one seed on one side: not paired")
    bad: dict[str, set[int]] = {}  # status → seeds: 'diverged', 'nonfinite', … each said as it is
    for x in kept:
        for sd, st in zip(x["seed"], x["status"]):
            if st != "ok":
                bad.setdefault(str(st), set()).add(int(sd))
    if bad:
        return _blank(len(seeds), "; ".join(f"{st} (seed {', '.join(map(str, sorted(sds)))})"
                                            for st, sds in sorted(bad.items())))
    a, b, c = (x["loss"].to_numpy() for x in kept)
    means = {"short_at_L": a.mean(), "short": b.mean(), "long": c.mean(), "gained": (a - b).mean(),
             "headroom": (a - c).mean(), "seeds": len(seeds), "note": note}
    if (a - c).min() <= 0:  # the reference is no better than the short model at L: nothing to recover
        if (a - c).mean() > 0:  # the mean alone would not say why there is no fraction
            where = ", ".join(str(sd) for sd, h in zip(seeds, a - c) if h <= 0)
            means["note"] = "; ".join(x for x in (note, f"no headroom in seed{'s' * (',' in where)} {where}") if x)
        return {**means, "fraction": math.nan, "lo": math.nan, "hi": math.nan}
    lo = hi = math.nan
    if len(seeds) >= 2 and np.isfinite(a - b).all() and np.isfinite(a - c).all():
        iv = stats.fieller_interval(a - b, a - c)
        lo, hi = iv.lo, iv.hi
    return {**means, "fraction": float((a - b).mean() / (a - c).mean()), "lo": lo, "hi": hi}


def _blank(seeds: int, note: str) -> dict:
    nan = math.nan
    return {"short_at_L": nan, "short": nan, "long": nan, "gained": nan, "headroom": nan, "fraction": nan, "lo": nan,
            "hi": nan, "headroom_lo": nan, "headroom_hi": nan, "seeds": seeds, "note": note}


def markdown_table(t: pd.DataFrame) -> str:
    """The headroom table as markdown: losses to 3 decimals, the fraction as a percentage with its interval."""
    def pct(x: float) -> str:
        return "—" if math.isnan(x) else f"{100 * x:.0f} %"

    def fraction(r) -> str:
        if r.gate != "passed":
            return "— (reference fails the gate)"
        if math.isnan(r.fraction):
            return "no headroom" if r.headroom <= 0 or "no headroom in seed" in r.note else "—"
        if math.isinf(r.lo):  # the headroom's own interval holds 0: no ratio can be claimed (Fieller 1954)
            return "— (headroom not resolved above 0)"
        worse = " (the longer context costs more than the whole headroom)" if r.hi < -1 else ""
        return pct(r.fraction) + ("" if math.isnan(r.lo) else f" [{pct(r.lo)}, {pct(r.hi)}]") + worse

    def num(x: float, spec: str) -> str:
        return "—" if math.isnan(x) else format(x, spec)

    def room(r) -> str:
        if math.isnan(r.headroom):
            return "—"
        iv = "" if math.isnan(r.headroom_lo) else f" [{r.headroom_lo:+.3f}, {r.headroom_hi:+.3f}]"
        return f"{r.headroom:+.3f}{iv} ({pct1(1 - math.exp(-r.headroom))})"

    def pct1(x: float) -> str:
        return f"{100 * x:.1f} %"

    rows = [[r.scheme, r.L, r.L_eval, r.reference, f"{r.tokens:,}", num(r.short_at_L, ".3f"), num(r.short, ".3f"), num(r.long, ".3f"),
             num(r.gained, "+.3f"), room(r), fraction(r), r.seeds, r.note] for r in t.itertuples()]
    table = markdown.table(["scheme", "L", "L_eval", "reference", "tokens trained", "loss at L", "loss at L_eval", "reference's loss",
                            "gained", "headroom [95 %] (perplexity)", "fraction recovered [95 %]", "seeds", "note"],
                           rows)
    alone = t.attrs.get("unpaired", [])
    unpaired = ("\n\nTrained-long runs paired with no short row (another token budget, model, data or task, or "
                "another sliding stride, warm-up or token budget than every short model's):\n"
                + "".join(f"\n- {name}" for name in alone)) if alone else ""
    if t.empty:
        return unpaired.lstrip("\n")
    gates = t.drop_duplicates(["reference", "L", "scheme"])
    shorts = gates.groupby(["reference", "L"])["scheme"].transform("size")  # >1: the gate is per short model
    lines = "".join(f"\n- {r.reference} (against {f'{r.scheme} at ' if n > 1 else ''}L = {r.L}): {r.gate} — "
                    f"{r.gate_detail}" for r, n in zip(gates.itertuples(), shorts))
    return f"{table}\n\nThe gate each reference must pass before it bounds anything:\n{lines}{unpaired}"


def split_by_length(col: Collected, split: str = "validation") -> tuple[Collected, Collected] | None:
    """(short, long): the rows of every training length evaluated at a longer length some run was trained at (each
    such length's short models, intermediate ones included), and the rows of the runs trained at one of those longer
    lengths (the trained-long references), on the same model and data; None when the runs hold no such pair. A run
    trained at 128 beside runs at 64 and 512 is both: 64's reference and 512's short model."""
    d = col.df
    if d.empty or "model" not in d or "data" not in d:
        return None
    d = d[(d["split"] == split) & (d["mode"] == "sliding")]
    trained = set(d["L_train"])
    longer = {L: {n for n in set(e) & trained if n > L} for L, e in d.groupby("L_train")["L_eval"]}
    short = d[d["L_train"].map(lambda L: bool(longer[L]))]
    if short.empty:
        return None
    refs = set().union(*longer.values())
    long = d[d["L_train"].isin(refs) & d["model"].isin(set(short["model"]))
             & d["data"].isin(set(short["data"]))]
    if long.empty:
        return None
    return Collected(short, col.windows), Collected(long, col.windows)


def headroom_table(col: Collected, split: str = "validation") -> pd.DataFrame:
    """:func:`headroom` of the runs' short rows and trained-long references (empty where they hold none)."""
    pair = split_by_length(col, split)
    return headroom(*pair) if pair is not None else pd.DataFrame(columns=COLUMNS)


def precondition(t: pd.DataFrame) -> str:
    """The report's precondition in one line, from its :func:`headroom_table`: whether a trained-long reference passes
    the gate, and so whether the report can tell "uses the context past L" from "does not break"."""
    cannot = ("this report tells which schemes break past L (perplexity, context value), not how much of a longer "
              "context a scheme could use")
    if t.empty and t.attrs.get("unpaired"):
        return f"**Precondition**: the trained-long runs pair with no short row (`headroom.md`): {cannot}."
    if t.empty:
        return f"**Precondition**: no trained-long reference among these runs: {cannot}."
    passed = t[t["gate"] == "passed"].drop_duplicates("reference")
    if passed.empty:
        return f"**Precondition**: no trained-long reference passes its gate (`headroom.md`): {cannot}."
    r = passed.iloc[0]
    many = len(passed) > 1
    return (f"**Precondition**: {len(passed)} trained-long reference{'s pass their' if many else ' passes its'} gate "
            f"(`headroom.md`; {r.reference}: {r.gate_detail}): where a row has one, its fraction recovered tells "
            "\"uses the context past L\" from \"does not break\".")


def write_headroom(col: Collected, out: Path, title: str, split: str = "validation",
                   t: pd.DataFrame | None = None) -> list[Path]:
    """headroom.csv and headroom.md under ``out`` when the runs hold trained-long references (``t``: their
    :func:`headroom_table`, when already made); else nothing."""
    t = headroom_table(col, split) if t is None else t
    if t.empty and not t.attrs.get("unpaired"):
        return []
    return write_csv_md(out, "headroom", t, title, f"What fraction of the trained-long headroom each row recovers "
                        f"({split} split, sliding evaluation)", f"{markdown_table(t)}\n\n{LEGEND}")


LEGEND = ("Losses in nats per token, means over seeds, from the sliding evaluation (every length scores the same "
          "tokens, each with at least L_eval − S tokens of context). `gained`: loss at L minus loss at L_eval of the "
          "model trained at L; `headroom`: loss at L minus the loss at L_eval of the same scheme trained at L_eval "
          "with the same model, data and token budget, evaluated with the same sliding settings (the reference: its "
          "row label says how its recipe differs), [95 % interval: t over the paired seeds, or with one seed a paired "
          "block bootstrap over blocks of ≥ 16K tokens] (the reference's perplexity at L_eval that much below the "
          "short model's at L); fraction recovered = mean gained / mean headroom, seeds paired by "
          "seed number, [95 % Fieller interval over the pairs, or with one seed a paired block bootstrap of the gain "
          "and the headroom over blocks of ≥ 16K tokens]: 100 % = as good as "
          "training long, 0 % = no gain from the longer context, negative = worse than at L, below −100 % (the whole "
          "interval) = the longer context costs more than the whole headroom, as for a scheme that breaks past L; "
          "`no headroom`: in some "
          "seed the reference is no better at L_eval than the short model at L, so there is nothing to recover; "
          "`headroom not resolved above 0`: the headroom's own interval holds 0, so its Fieller interval is "
          "unbounded and no fraction is claimed. A "
          "reference bounds a row only if it passes the gate listed below the table: at L tokens of context it is no "
          "worse than the short model (paired by seed, t interval), and its own context value (loss with L_eval "
          "tokens of context minus with L, same tokens) is below 0 with an interval excluding 0 (one seed: the paired "
          "block bootstrap); a reference that fails is listed with its numbers and no fraction. Only each run's final "
          "weights are paired (a `--partial` evaluation is not).")

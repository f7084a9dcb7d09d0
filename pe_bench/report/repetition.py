"""The repetition probe's table (pe_bench.evaluate.repetition): per configuration and distance d, the copy gain —
the loss on a passage's second copy minus the same tokens after a control passage, nats per token — as a mean over
seeds with a t interval over seeds, or for one seed its t interval over the passages (said in the cell)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pe_bench import markdown, stats
from pe_bench.report.collect import Collected
from pe_bench.report.files import write_csv_md

TABLE_COLUMNS = ["label", "L_train", "distance", "ratio", "seeds", "first_loss", "control_loss", "second_loss", "gain",
                 "lo", "hi", "interval", "passages", "passage_tokens"]
LEGEND = ("A passage of L/2 tokens from the evaluation split, the text that follows it in the corpus, then the "
          "passage again, so that each token of the second copy has its twin d tokens back; the same second copy is "
          "also scored after a control sequence that has another passage in place of the first copy (the same "
          "filler, the same tokens scored). Copy gain = loss(second copy) − loss(same tokens, control), in nats per "
          "token over the passage's tokens after its first: 0 = the model does not use the copy d tokens back, "
          "negative = it does (down to −(control loss) for a perfect copy). Mean over seeds [95 % t interval over "
          "seeds]; a one-seed cell gives its t interval over the passages and says so (exploratory: the spread "
          "between seeds is not in it). repetition.csv also gives `first_loss` (the passage at the start of a "
          "sequence, no context), `control_loss` and `second_loss`.")


def repetition_table(col: Collected) -> pd.DataFrame:
    """One row per (configuration, distance) of status ok in every seed (TABLE_COLUMNS); a distance that some seed
    could not score (not applicable, non-finite) gets no interval and says so in ``interval``."""
    r = col.repetition
    if r.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    out = []
    for (_, distance, _, _), g in r.groupby(["config", "distance", "passages", "passage_tokens"], sort=False):
        base = {"label": g["label"].iloc[0], "L_train": int(g["L_train"].iloc[0]), "distance": int(distance),
                "ratio": round(float(distance) / float(g["L_train"].iloc[0]), 4), "seeds": g["seed"].nunique(),
                "passages": int(g["passages"].iloc[0]), "passage_tokens": int(g["passage_tokens"].iloc[0])}
        if (g["status"] != "ok").any():
            bad = g.loc[g["status"] != "ok", "status"].iloc[0]
            out.append({**base, "interval": f"{bad} in {int((g['status'] != 'ok').sum())} of {len(g)} seeds"})
            continue
        means = {c: float(g[c].mean()) for c in ("first_loss", "control_loss", "second_loss", "gain")}
        if len(g) >= 2:
            ci = stats.seed_interval(g["gain"].to_numpy(float))
            lo, hi, how = ci.lo, ci.hi, f"t over {len(g)} seeds"
        else:
            lo, hi, how = float(g["lo"].iloc[0]), float(g["hi"].iloc[0]), "1 seed: t over passages"
        out.append({**base, **means, "lo": lo, "hi": hi, "interval": how})
    t = pd.DataFrame(out, columns=TABLE_COLUMNS)
    return t.sort_values(["L_train", "label", "distance"], kind="stable").reset_index(drop=True)


def markdown_table(t: pd.DataFrame) -> str:
    """One table per training length L (its distances are multiples of its own L): rows, configuration; columns,
    distance (d/L); cells, copy gain [interval], "(1 seed)" where one seed."""
    out = []
    for L, at in t.groupby("L_train", sort=True):
        distances = sorted(at["distance"].unique())
        header = ["scheme", "L", *[f"d = {d} ({d / L:g}L)" for d in distances]]
        rows = [[label, L, *[_cell(by.get(int(d))) for d in distances]]
                for label, g in at.groupby("label", sort=False)
                for by in [{int(r.distance): r for r in g.itertuples()}]]
        out.append(markdown.table(header, rows))
    return "\n\n".join(out)


def _cell(r) -> str:
    if r is None:
        return ""
    if not np.isfinite(getattr(r, "gain", np.nan)):
        return r.interval
    one = " (1 seed)" if r.seeds < 2 else ""
    return f"{r.gain:+.3f} [{r.lo:+.3f}, {r.hi:+.3f}]{one}"


def write_repetition(col: Collected, out: Path, title: str, split: str = "validation") -> list[Path]:
    """repetition.csv and repetition.md under ``out`` when the runs were probed (``eval.modes`` with repetition);
    else nothing."""
    t = repetition_table(col)
    if t.empty:
        return []
    return write_csv_md(out, "repetition", t, title, f"Does a model reach back d tokens in real text? The repetition "
                        f"probe ({split} split)", f"{markdown_table(t)}\n\n{LEGEND}")

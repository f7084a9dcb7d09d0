"""Context extension with a fine-tuning budget: the table and plot of a parent's fine-tunes by method and budget.

A row of the table is one method (the fine-tune's scheme label — e.g. ``rope+yarn×8`` — with PoSE's target and the
fine-tuning length, ``rope+yarn×8 PoSE→512 @64``) at one budget of steps, for one parent configuration, averaged
over seeds. Budget 0 is the parent itself evaluated with the method's eval-time scheme options (``rope+yarn×8``),
so the curve starts where the eval-time table stops; ``rope @512`` at budget 0 is plain ``rope``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pe_bench import markdown
from pe_bench.report.collect import Collected
from pe_bench.report.files import STATUS_CELL
from pe_bench.runs import atomic_write_text


def extension_table(col: Collected, mode: str = "nonoverlapping", split: str = "validation") -> pd.DataFrame:
    """One row per (parent, method, budget of steps, scored tokens per length): mean perplexity over seeds at every
    eval length ('± std' with several seeds; 'diverged'/'nan'/'n/a' where a seed gave no number — never averaged in; '—' not evaluated), and the
    number of seeds. Empty without fine-tuned runs."""
    d = col.df
    if d.empty:  # Collected gives every non-empty frame its 'ft_parent' ('' for a run that is not a fine-tune)
        return pd.DataFrame()
    d = d[(d["mode"] == mode) & (d["split"] == split)]
    fine = d[d["ft_parent"] != ""]
    lengths = sorted(int(n) for n in d["L_eval"].unique())
    rows = []
    for (parent, method, budget, precision), g in fine.groupby(["ft_parent", "ft_method", "budget", "precision"],
                                                               sort=False):
        scheme = g["scheme"].iloc[0]
        base = d[(d["bare"] == parent) & (d["ft_parent"] == "") & (d["scheme"] == scheme) & (d["budget"] == budget)
                 & (d["precision"] == precision)]
        runs = d[(d["bare"] == parent) & (d["ft_parent"] == "")]["run"]  # the parent's name without seed and hash
        parent_label = (runs.iloc[0].rsplit("-", 2)[0] if not runs.empty
                        else f"(parent configuration {parent} not in this report)")
        L_ft = int(method.split(" · ")[0].rsplit("@", 1)[1])
        configs = sorted(g.groupby("config"), key=lambda kv: int(kv[1]["ft_steps"].iloc[0]))
        for steps, part in [(0, base)] + [(int(part["ft_steps"].iloc[0]), part) for _, part in configs]:
            if part.empty:
                continue
            rows.append({"parent": parent_label, "method": method, "L_ft": L_ft, "steps": steps,
                         "L": int(part["L_train"].iloc[0]), "tokens": budget,
                         **{str(n): _cell(part[part["L_eval"] == n]) for n in lengths},
                         "seeds": int(part["seed"].nunique())})
    return pd.DataFrame(rows)


def _cell(c: pd.DataFrame) -> str | float:
    if c.empty:
        return "—"
    for status, word in STATUS_CELL.items():
        if (c["status"] == status).any():
            return word
    v = c["ppl"].to_numpy(float)
    return round(float(v.mean()), 3) if len(v) == 1 else f"{v.mean():.3f} ± {v.std(ddof=1):.3f}"


def write_extension(t: pd.DataFrame, out: Path, title: str = "", split: str = "validation") -> list[Path]:
    """extension.csv and extension.md of an ``extension_table`` (non-overlapping blocks); nothing when it is empty
    (no fine-tuned runs)."""
    if t.empty:
        return []
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "extension.csv", out / "extension.md"]
    atomic_write_text(paths[0], t.to_csv(index=False))
    header = list(t.columns)
    lines = [f"# {markdown.inline(title)}\n" if title else "",
             f"## Perplexity after fine-tuning, by method and budget (non-overlapping blocks, {split} split; columns: "
             "eval length in tokens; steps 0 = the parent evaluated with the method's eval-time options)\n",
             markdown.table(header, t.itertuples(index=False))]
    atomic_write_text(paths[1], "\n".join(x for x in lines if x) + "\n")
    return paths


def curve(t: pd.DataFrame, method: str, length: int, parent: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(steps, perplexity) of one method at one eval length: the finite single numbers of the table (a cell with
    '± std' is its mean)."""
    r = t[(t["method"] == method) & ((t["parent"] == parent) if parent is not None else True)]
    xs, ys = [], []
    for steps, v in zip(r["steps"], r[str(length)]):
        try:
            y = float(str(v).split(" ± ")[0])
        except ValueError:
            continue
        xs.append(int(steps))
        ys.append(y)
    return np.array(xs), np.array(ys)

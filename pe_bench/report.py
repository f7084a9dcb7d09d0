"""Run directories → comparison tables (rows: scheme variant; columns: eval length), as CSV, markdown and rich, and
plots (perplexity vs eval length; loss vs position)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.markup import escape
from rich.table import Table

from pe_bench.runs import Run, atomic_write_text, read_csv

MODES = ("nonoverlapping", "sliding")


def collect(runs: list[Run]) -> pd.DataFrame:
    """Every eval row of the given runs, in run order, with the run directory's name in column 'run'."""
    rows = [{"run": run.path.name, **r} for run in runs for r in read_csv(run.eval_csv)]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    for c in ("L_train", "L_eval", "stride", "tokens_scored", "seed"):
        df[c] = pd.to_numeric(df[c])
    for c in ("loss", "ppl", "bpb"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def comparison(df: pd.DataFrame, mode: str, split: str = "validation") -> pd.DataFrame:
    """Perplexity table for one mode: index (scheme, L_train), one column per eval length, mean over seeds;
    'n/a' where the scheme cannot run at that length, '—' where it was not evaluated. Column 'longest/L' is the
    ratio of the perplexity at the longest length to the one at the training length; 'seeds' counts seeds."""
    d = df[(df["mode"] == mode) & (df["split"] == split)]
    if d.empty:
        return pd.DataFrame()
    lengths = sorted(int(x) for x in d["L_eval"].unique())
    mean = d.groupby(["scheme", "L_train", "L_eval"], sort=False)["ppl"].mean()
    std = d.groupby(["scheme", "L_train", "L_eval"], sort=False)["ppl"].std()  # NaN for one seed
    seeds = d.groupby(["scheme", "L_train"], sort=False)["seed"].nunique()
    rows, index = [], []
    for scheme, L in dict.fromkeys(zip(d["scheme"], d["L_train"])):
        cells = {str(n): mean.get((scheme, L, n), float("nan")) for n in lengths}
        base, last = cells.get(str(L), float("nan")), cells[str(lengths[-1])]
        row = {str(n): (_cell(cells[str(n)], std.get((scheme, L, n), float("nan"))) if pd.notna(cells[str(n)])
                        else "n/a" if (scheme, L, n) in mean.index else "—") for n in lengths}
        row["longest/L"] = "n/a" if pd.isna(base) or pd.isna(last) else round(float(last / base), 3)
        row["seeds"] = int(seeds[(scheme, L)])
        rows.append(row)
        index.append((scheme, int(L)))
    return pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["scheme", "L_train"]), dtype=object)


def _cell(mean: float, std: float) -> float | str:
    """The mean, rounded; 'mean ± std' when there is more than one seed."""
    return round(float(mean), 3) if pd.isna(std) else f"{float(mean):.3f} ± {float(std):.3f}"


def write_tables(df: pd.DataFrame, out_dir: Path, title: str = "", split: str = "validation") -> list[Path]:
    """comparison.csv (every mode, wide) and comparison.md (one table per mode), for one split."""
    out_dir.mkdir(parents=True, exist_ok=True)
    parts, md = [], [f"# {title}\n" if title else ""]
    for mode in MODES:
        t = comparison(df, mode, split)
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
                  f"{_fmt(scored)} tokens scored per length)\n\n{_markdown(t)}\n")
    paths = []
    if parts:
        csv_path = out_dir / "comparison.csv"
        atomic_write_text(csv_path, pd.concat(parts, ignore_index=True).to_csv(index=False))
        md_path = out_dir / "comparison.md"
        atomic_write_text(md_path, "".join(md).lstrip())
        paths = [csv_path, md_path]
    return paths


def _fmt(strides) -> str:
    return ", ".join(str(int(s)) for s in strides) if len(strides) > 1 else str(int(strides[0]))


def _markdown(t: pd.DataFrame) -> str:
    header = ["scheme", "L"] + list(t.columns)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (scheme, L), row in t.iterrows():
        lines.append("| " + " | ".join([str(scheme), str(L)] + [str(v) for v in row.values]) + " |")
    return "\n".join(lines)


def rich_table(t: pd.DataFrame, title: str) -> Table:
    table = Table(title=title, header_style="bold")
    table.add_column("scheme", no_wrap=True)
    table.add_column("L", justify="right")
    for c in t.columns:
        table.add_column(c, justify="right")
    for (scheme, L), row in t.iterrows():
        table.add_row(escape(str(scheme)), str(L), *[str(v) for v in row.values])
    return table


def plot_lengths(df: pd.DataFrame, path: Path, mode: str = "nonoverlapping", split: str = "validation") -> Path | None:
    """Perplexity vs eval length (log2 x axis), one line per scheme variant and training length, shaded ± std
    over seeds. Returns the path, or None when there is nothing to plot."""
    d = df[(df["mode"] == mode) & (df["split"] == split) & df["ppl"].notna()]
    if d.empty:
        return None
    stats = d.groupby(["scheme", "L_train", "L_eval"], sort=False)["ppl"].agg(["mean", "std"]).reset_index()
    fig, ax = _figure()
    for (scheme, L), g in stats.groupby(["scheme", "L_train"], sort=False):
        g = g.sort_values("L_eval")
        label = scheme if d["L_train"].nunique() == 1 else f"{scheme} (L={L})"
        (line,) = ax.plot(g["L_eval"], g["mean"], marker="o", ms=3, label=label)
        ax.fill_between(g["L_eval"], g["mean"] - g["std"].fillna(0), g["mean"] + g["std"].fillna(0),
                        color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel(f"perplexity ({split}, {mode})")
    ax.grid(True, which="both", alpha=0.3)
    _save(fig, ax, path)
    return path


def plot_positions(pos: pd.DataFrame, path: Path, split: str = "validation") -> Path | None:
    """Mean loss vs position inside the window at the longest evaluated length, one line per scheme variant."""
    d = pos[pos["split"] == split] if not pos.empty else pos
    if d.empty:
        return None
    longest = d["L_eval"].max()
    d = d[d["L_eval"] == longest]
    fig, ax = _figure()
    for (scheme, L), g in d.groupby(["scheme", "L_train"], sort=False):
        g = (g.assign(nll=g["loss"] * g["tokens"]).groupby(["pos_start", "pos_end"], sort=True)[["nll", "tokens"]]
             .sum().reset_index())  # token-weighted over seeds
        g["mid"], g["loss"] = (g["pos_start"] + g["pos_end"]) / 2, g["nll"] / g["tokens"]
        label = scheme if d["L_train"].nunique() == 1 else f"{scheme} (L={L})"
        ax.plot(g["mid"], g["loss"], marker="o", ms=3, label=label)
    for L in sorted(d["L_train"].unique()):
        ax.axvline(L, color="grey", ls="--", lw=0.8)
    ax.set_xlabel(f"position inside a {longest}-token window (dashed: training length)")
    ax.set_ylabel(f"mean loss, nats/token ({split})")
    ax.grid(True, alpha=0.3)
    _save(fig, ax, path)
    return path


def collect_positions(runs: list[Run]) -> pd.DataFrame:
    rows = [{"run": run.path.name, **r} for run in runs if run.positions_csv.exists()
            for r in read_csv(run.positions_csv)]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    for c in ("L_train", "L_eval", "pos_start", "pos_end", "tokens", "seed"):
        df[c] = pd.to_numeric(df[c])
    df["loss"] = pd.to_numeric(df["loss"], errors="coerce")
    return df


def _figure():
    """A headless figure whose style cycle gives 30 distinguishable lines (10 colours × solid, dashed, dotted):
    one per table row, even for the whole zoo with its extension rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cycler import cycler

    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=120)
    ax.set_prop_cycle(cycler(linestyle=["-", "--", ":"]) * cycler(color=plt.get_cmap("tab10").colors))
    return fig, ax


def _save(fig, ax, path: Path) -> None:
    """Legend, then a deterministic PNG (no timestamp metadata), written atomically."""
    import matplotlib.pyplot as plt

    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside, not over, the lines
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", metadata={"Software": None})
    plt.close(fig)
    tmp.replace(path)


def write_report(df: pd.DataFrame, pos: pd.DataFrame, out: Path, title: str, split: str = "validation",
                 modes: tuple[str, ...] | list[str] = MODES, plots: bool = True) -> list[Path]:
    """Everything `pe-bench report` writes: eval_long.csv, comparison.csv/.md and (with matplotlib) the plots.
    Raises ImportError after the tables if plots were asked for and matplotlib is missing."""
    df = df.sort_values(["data", "model", "L_train", "scheme", "seed", "split", "mode", "L_eval"], kind="stable")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "eval_long.csv", df.to_csv(index=False))
    written = [out / "eval_long.csv", *write_tables(df, out, title, split)]
    if plots:
        for m in modes:
            written.append(plot_lengths(df, out / f"ppl_vs_length_{m}.png", m, split))
        written.append(plot_positions(pos, out / "loss_vs_position.png", split))
    return [p for p in written if p is not None]

"""Plots of a report: perplexity vs evaluation length, and mean loss vs position inside the longest window.

A row's style is a function of its name alone (:func:`style_for`), so a scheme looks the same in every plot of every
report: the base scheme picks the colour and the marker shape; a filled marker on a solid line is the scheme as
trained, a hollow marker on a broken line one of its variants (an eval-time extension, another configuration) drawn
in a shade of the same colour. The training length L is a wide translucent grey band, a style no row uses. More than
:data:`MAX_ROWS` rows are split into panels by scheme family, each with its own legend, so no row is lost.

matplotlib is imported only when a figure is made (it is an optional dependency); :func:`style_for` needs none."""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pe_bench.report.collect import Collected
from pe_bench.report.perplexity import row_names
from pe_bench.schemes import catalog

# Colours and markers for a scheme that pins none (chosen by a digest of its name): none is a pinned colour.
EXTRA_COLOURS = ("#6a3d9a", "#ff4500", "#2f4f4f", "#3fd4a0", "#8da0cb", "#a6761d", "#fb9a99", "#5c5c8a")
EXTRA_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "p", "h", "*")
# Panels of a plot with many rows: a scheme's family is the first place it acts on (its ``acts_on``; none: input).
FAMILIES = {"input": "absolute positions at the input (or none)", "qk": "q and k changed by position (rotary, scaled)",
            "scores": "the attention scores changed by position", "other": "other schemes"}

SOLID = "-"
BROKEN = {"dashed": (0, (5, 2)), "dashdot": (0, (6, 2, 1.5, 2)), "dotted": (0, (1.2, 1.5)),
          "longdash": (0, (11, 3)), "dashdotdot": (0, (6, 2, 1.5, 2, 1.5, 2)), "shortdash": (0, (2.5, 1.5))}
# Shade of the base colour: > 0 mixes in white, < 0 black.
SHADES = (-0.35, -0.2, 0.2, 0.35, 0.5)
# The training length: a wide translucent grey band behind the rows (no row is grey, wide or translucent).
L_LINE = {"color": "#9e9e9e", "linestyle": SOLID, "linewidth": 7.0, "alpha": 0.35, "zorder": 0.5}
LINEWIDTH, MARKERSIZE = 1.6, 5.0
MAX_ROWS = 12  # rows in one panel; more are split into panels by family
PANEL = (6.6, 3.5)  # inches per panel (the legend goes beside it)


def _registered() -> tuple[dict[str, tuple[str, str, str]], dict[str, tuple[float, str]]]:
    """What the scheme registry says of each scheme's look: name → (colour, marker, family), and row label →
    (shade, line style) for its named eval-time variants. Colour and marker are the scheme's pinned ``style``, else
    a digest of its name over colours no scheme pins."""
    schemes_, variants = {}, {}
    for name, entry in catalog().items():
        h = _digest(name)
        colour, marker = entry.style or (EXTRA_COLOURS[h % len(EXTRA_COLOURS)],
                                         EXTRA_MARKERS[(h // 8) % len(EXTRA_MARKERS)])
        schemes_[name] = (colour, marker, entry.acts_on[0] if entry.acts_on else "input")
        variants.update(entry.variant_styles)
    return schemes_, variants


def _digest(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big")


SCHEMES, VARIANTS = _registered()


def base_name(name: str) -> str:
    """The scheme a row name starts with: ``rope`` for ``rope+yarn×8``, ``learned[beyond_table=clamp]`` or
    ``rope · model.n_layers=2``."""
    m = re.match(r"[A-Za-z0-9_]+", name.strip())
    return m.group(0) if m else name.strip()


def _shade(colour: str, t: float) -> str:
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    target = 255 if t > 0 else 0
    return "#" + "".join(f"{round(c + (target - c) * abs(t)):02x}" for c in rgb)


def style_for(name: str, variant: bool | None = None) -> dict[str, Any]:
    """The style of a row, a pure function of its name and of whether it is an eval-time variant (the same in every
    plot and every process): colour, linestyle, marker and markerfacecolor, to pass to ``Axes.plot``.

    The base scheme (:func:`base_name`) picks the colour and marker: from :data:`SCHEMES` for the registered ones,
    else from a digest of its name over colours no registered scheme has. The scheme itself is solid with filled
    markers, and so is another configuration of it as trained (an option, a setting, a step: ``variant`` False), in
    a shade chosen by a digest of the whole name. An eval-time variant has a broken line and hollow markers: a
    registered one its fixed shade and line (:data:`VARIANTS`), any other a shade and line chosen by a digest of the
    whole name among those its family's registered rows do not use. ``variant`` None: every name other than its
    base scheme's is taken for a variant (what a row name alone can say). Two rows of different schemes never share
    a style; two unregistered rows of one scheme can (about 1 in 25, 1 in 5 between trained configurations)."""
    base = base_name(name)
    if base in SCHEMES:
        colour, marker, _ = SCHEMES[base]
    else:
        h = _digest(base)
        colour, marker = EXTRA_COLOURS[h % len(EXTRA_COLOURS)], EXTRA_MARKERS[(h // 8) % len(EXTRA_MARKERS)]
    if name == base:
        return {"color": colour, "linestyle": SOLID, "marker": marker, "markerfacecolor": colour}
    if variant is False:
        shade = _shade(colour, SHADES[_digest(name) % len(SHADES)])
        return {"color": shade, "linestyle": SOLID, "marker": marker, "markerfacecolor": shade}
    if name in VARIANTS:
        shade, ls = VARIANTS[name]
    else:
        taken = {v for k, v in VARIANTS.items() if base_name(k) == base}
        free = [(s, ls) for ls in BROKEN for s in SHADES if (s, ls) not in taken]
        shade, ls = free[_digest(name) % len(free)]
    return {"color": _shade(colour, shade), "linestyle": BROKEN[ls], "marker": marker, "markerfacecolor": "none"}


def family(name: str) -> str:
    return SCHEMES.get(base_name(name), ("", "", "other"))[2]


def panels(names: list[str], most: int = MAX_ROWS) -> list[tuple[str, list[str]]]:
    """Rows split into panels: one panel of at most ``most`` rows, else one per scheme family (:data:`FAMILIES`
    order), a family with more rows in balanced parts. Rows keep their order, each next to the others of its base
    scheme. (panel title, row names) each."""
    names = list(dict.fromkeys(names))
    first = {b: i for i, b in reversed(list(enumerate(map(base_name, names))))}
    names.sort(key=lambda n: first[base_name(n)])
    if len(names) <= most:
        return [("", names)]
    out = []
    for fam, title in FAMILIES.items():
        rows = [n for n in names if family(n) == fam]
        parts = math.ceil(len(rows) / most)
        size = math.ceil(len(rows) / parts) if parts else 0
        for i in range(parts):
            out.append((title + (f" ({i + 1}/{parts})" if parts > 1 else ""), rows[i * size:(i + 1) * size]))
    return out


def _columns(d: pd.DataFrame) -> list[tuple[str, str, int]]:
    """(data, model, L_train) of each column of panels, in row order."""
    return list(dict.fromkeys(zip(d["data"].astype(str), d["model"].astype(str), d["L_train"].astype(int))))


def key_of(d: pd.DataFrame) -> list[tuple[str, str, int]]:
    """The (data, model, L_train) column of panels of each row."""
    return list(zip(d["data"].astype(str), d["model"].astype(str), d["L_train"].astype(int)))


def _with_setting_columns(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(**{c: "" for c in ("data", "model") if c not in d})


def _setting(cols: list[tuple[str, str, int]], which: tuple[bool, bool, bool] = (True, True, True)) -> list[str]:
    data, model, L = (sorted({c[i] for c in cols}) for i in range(3))
    parts = []
    if which[0] and any(data):
        parts.append(f"data {', '.join(x for x in data if x)}")
    if which[1] and any(model):
        parts.append(f"model {', '.join(x for x in model if x)}")
    if which[2]:
        parts.append(f"trained at L = {', '.join(map(str, L))}")
    return parts


def _column_title(col: tuple[str, str, int], cols: list[tuple[str, str, int]]) -> str:
    """What tells this column apart from the others (empty with one column)."""
    if len(cols) == 1:
        return ""
    varies = tuple(len({c[i] for c in cols}) > 1 for i in range(3))
    return " · ".join(_setting([col], varies))


def _log_ticks(lo: float, hi: float, most: int = 10) -> tuple[list[float], tuple[float, float]]:
    """Round tick values (1, 1.5, 2, 3, ... × 10^k) for a log axis over the data range [lo, hi], at most ``most`` of
    them and at least two, and the axis limits (the data range, widened to a round value close beside it, padded)."""
    sets = ((1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8), (1, 1.5, 2, 3, 4, 5, 6, 8), (1, 2, 3, 4, 6), (1, 2, 5), (1, 3),
            (1,))

    def candidates(mantissas):
        return [m * 10.0 ** k for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
                for m in mantissas]

    for mantissas in sets:
        ticks = [c for c in candidates(mantissas) if lo * (1 - 1e-9) <= c <= hi * (1 + 1e-9)]
        if len(ticks) <= most:
            break
    cand = candidates(mantissas if len(ticks) >= 2 else sets[0])  # a narrow range: the round values beside it
    below, above = max(c for c in cand if c < lo * (1 - 1e-9)), min(c for c in cand if c > hi * (1 + 1e-9))
    if len(ticks) < 2 or lo / below < 1.25:  # a round value close below the lowest line is worth showing
        ticks = [below, *ticks]
    if len(ticks) < 2 or above / hi < 1.25:
        ticks = [*ticks, above]
    pad = (math.log(max(hi, ticks[-1])) - math.log(min(lo, ticks[0]))) * 0.05
    return ticks, (min(lo, ticks[0]) * math.exp(-pad), max(hi, ticks[-1]) * math.exp(pad))


def _number(v: float, _pos: Any = None) -> str:
    return f"{v:g}" if v < 1e6 else f"{v:.3g}"


def _figure(nrows: int, ncols: int):
    """A headless figure of panels (a row of panels shares its y axis, and a legend beside its last panel)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL[0] * ncols + 3.2, PANEL[1] * nrows + 0.8), dpi=110,
                             squeeze=False, sharey="row", layout="constrained")
    return fig, axes


def _legends(axes) -> None:
    """One legend per row of panels, beside its last panel: the rows in plot order, then the training length(s);
    long handles so that the line styles show."""
    for row in axes:
        seen: dict[str, Any] = {}
        for ax in row:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(lab, h)
        labels = sorted(seen, key=lambda lab: lab.startswith("L = "))  # stable: rows first, then L
        row[-1].legend([seen[lab] for lab in labels], labels, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       borderaxespad=0.0, fontsize=8, handlelength=4.5, frameon=False)


def _mark_L(ax, L: int) -> None:
    ax.axvline(L, label=f"L = {L} (training length)", **L_LINE)


def eval_time(d: pd.DataFrame, names: str) -> set[str]:
    """The names (column ``names`` of ``d``) of the rows that are eval-time variants: where the report says which
    rows are the model as trained (``as_trained``), those that are not; else every name other than its scheme's."""
    if "as_trained" in d:
        return set(d.loc[~d["as_trained"].astype(bool), names])
    return {n for n in d[names] if n != base_name(n)}


def _draw(ax, name: str, x, y, band=None, label: str | None = None, variant: bool | None = None) -> None:
    st = style_for(name, variant)
    ax.plot(x, y, label=label or name, color=st["color"], linestyle=st["linestyle"], marker=st["marker"],
            markerfacecolor=st["markerfacecolor"], markeredgecolor=st["color"], markeredgewidth=1.1,
            markersize=MARKERSIZE, linewidth=LINEWIDTH, zorder=2 if st["linestyle"] == SOLID else 1.8)
    if band is not None:
        ax.fill_between(x, band[0], band[1], color=st["color"], alpha=0.12, lw=0, zorder=1)


def _protocol(d: pd.DataFrame, mode: str) -> str:
    scored = sorted({int(x) for x in d["tokens_scored"] if x > 0}) if "tokens_scored" in d else []
    tokens = f", {' / '.join(f'{n:,}' for n in scored)} tokens scored per length" if scored else ""
    if mode == "nonoverlapping":
        return f"non-overlapping blocks{tokens}"
    if mode == "sliding":
        S = sorted({int(float(s)) for s in d["S"] if str(s) not in ("", "nan")}) if "S" in d else []
        if not S and "stride" in d:
            S = sorted({int(s) for s in d["stride"]})
        return f"sliding window, stride S = {', '.join(map(str, S))}{tokens}"
    return f"{mode}{tokens}"


def _seeds(d: pd.DataFrame, key: str, band: bool = True) -> str:
    """'mean over 2 seeds per row (band: ± 1 std)' and the like."""
    if "seed" not in d:
        return ""
    n = d.groupby(key)["seed"].nunique()
    lo, hi = int(n.min()), int(n.max())
    if hi == 1:
        return "one seed per row"
    what = f"{lo}" if lo == hi else f"{lo}–{hi}"
    return f"mean over {what} seeds per row" + (" (band: ± 1 std)" if band else "")


def _key(names: list[str], variants: set[str]) -> str:
    """The line under the title that says what the line styles mean (when some row is an eval-time variant, or
    another trained configuration of a scheme drawn in a shade of its colour)."""
    shaded = any(n != base_name(n) and n not in variants for n in names)
    if not any(n in variants for n in names):
        return "\nsolid lines: the schemes as trained; a shade of a scheme's colour: another configuration of it" \
            if shaded else ""
    return ("\nsolid line, filled marker: a scheme as trained" + (" (a shade: another configuration)" if shaded else "")
            + "; broken line, hollow marker: a variant of it (same colour)")


def lengths_figure(df: pd.DataFrame, mode: str = "nonoverlapping", split: str = "validation", title: str = ""):
    """The figure of :func:`plot_lengths` (None when there is nothing to plot)."""
    import matplotlib.ticker as mt

    d = df[(df["mode"] == mode) & (df["split"] == split) & df["ppl"].notna()]
    if d.empty:
        return None
    d = Collected(d[d["status"] == "ok"] if "status" in d else d).df
    if d.empty:
        return None
    d = _with_setting_columns(d).assign(row=row_names(d))
    per = (d.groupby(["data", "model", "L_train", "row", "L_eval"], sort=False)["ppl"].agg(["mean", "std", "count"])
           .reset_index())
    std = per["std"].where(per["count"] > 1, 0.0).fillna(0.0)
    per["lo"], per["hi"] = per["mean"] - std, per["mean"] + std
    cols, groups, variants = _columns(d), panels(list(d["row"])), eval_time(d, "row")
    fig, axes = _figure(len(groups), len(cols))
    per["lo"] = per["lo"].clip(lower=per["mean"] * 0.8)  # a wide band never squeezes the lines against the axis
    for j, col in enumerate(cols):
        c = per[(per["data"] == col[0]) & (per["model"] == col[1]) & (per["L_train"] == col[2])]
        lengths = sorted(int(n) for n in d[(d["data"] == col[0]) & (d["model"] == col[1])
                                           & (d["L_train"] == col[2])]["L_eval"].unique())
        for i, (panel_title, members) in enumerate(groups):
            ax = axes[i][j]
            shown = per[per["row"].isin(members)]  # the y range of this row of panels
            ticks, limits = _log_ticks(float(shown["lo"].min()), float(shown["hi"].max()))
            for name in members:
                g = c[c["row"] == name].sort_values("L_eval")
                if not g.empty:
                    _draw(ax, name, g["L_eval"].to_numpy(float), g["mean"].to_numpy(float),
                          (g["lo"].to_numpy(float), g["hi"].to_numpy(float)), variant=name in variants)
            _mark_L(ax, col[2])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(mt.FixedLocator(lengths))
            ax.xaxis.set_major_formatter(mt.FuncFormatter(_number))
            ax.xaxis.set_minor_locator(mt.NullLocator())
            ax.yaxis.set_major_locator(mt.FixedLocator(ticks))
            ax.yaxis.set_major_formatter(mt.FuncFormatter(_number))
            ax.yaxis.set_minor_locator(mt.NullLocator())
            ax.set_ylim(*limits)
            ax.set_xlim(min(lengths + [col[2]]) / 2 ** 0.2, max(lengths + [col[2]]) * 2 ** 0.2)
            ax.grid(True, alpha=0.3)
            ax.set_title(" — ".join(t for t in (_column_title(col, cols), panel_title) if t), fontsize=10, loc="left")
            if i == len(groups) - 1:
                ax.set_xlabel("evaluation length (tokens)")
            if j == 0:
                ax.set_ylabel("perplexity (log scale)")
    _legends(axes)
    setting = " · ".join(_setting(cols) + [f"{split} split"])
    head = f"{title}: perplexity vs evaluation length" if title else "Perplexity vs evaluation length"
    fig.suptitle(f"{head}\n{setting}\n{_protocol(d, mode)} · {_seeds(d, 'row')}{_key(list(d['row']), variants)}",
                 fontsize=10.5)
    return fig


def plot_lengths(df: pd.DataFrame, path: Path, mode: str = "nonoverlapping", split: str = "validation",
                 title: str = "") -> Path | None:
    """Perplexity vs eval length (log-log, ticks at the evaluated lengths), one line per table row (mean over seeds,
    band ± 1 std), the training length L marked; panels by scheme family when there are many rows, and one column
    of panels per (data, model, L). Returns the path, or None when there is nothing to plot."""
    fig = lengths_figure(df, mode, split, title)
    if fig is None:
        return None
    _save(fig, path)
    return path


def positions_figure(pos: pd.DataFrame, split: str = "validation", df: pd.DataFrame | None = None,
                     title: str = ""):
    """The figure of :func:`plot_positions` (None when there is nothing to plot)."""
    import matplotlib.ticker as mt

    d = pos[pos["split"] == split] if not pos.empty else pos
    if df is not None and not d.empty and "label" in df:
        labels = df[["run", "scheme", "label", *(["as_trained"] if "as_trained" in df else [])]]
        labels = labels.drop_duplicates(["run", "scheme"])
        d = (d.merge(labels, on=["run", "scheme"], how="inner").drop(columns="scheme")
             .rename(columns={"label": "scheme"}))
    if d.empty:
        return None
    d = _with_setting_columns(d)
    cols = _columns(d)
    # Each row at its own longest evaluated length: a row not evaluated as long as the others is drawn, not dropped.
    own = d.assign(col=key_of(d)).groupby(["col", "scheme"])["L_eval"].transform("max")
    d = d[d["L_eval"] == own]
    longest = {col: int(d[[k == col for k in key_of(d)]]["L_eval"].max()) for col in cols}
    order = list(dict.fromkeys(df["label"])) if df is not None and "label" in df else []
    names = sorted(dict.fromkeys(d["scheme"]), key=lambda n: order.index(n) if n in order else len(order))
    groups = panels(names)  # in the report's row order, as in the other plots
    variants = eval_time(d, "scheme")
    fig, axes = _figure(len(groups), len(cols))
    for j, col in enumerate(cols):
        c = d[(d["data"] == col[0]) & (d["model"] == col[1]) & (d["L_train"] == col[2])]
        L, n = col[2], longest[col]
        step = L
        while n // step > 8:
            step *= 2
        for i, (panel_title, members) in enumerate(groups):
            ax = axes[i][j]
            for name in members:
                _draw_positions(ax, name, c[c["scheme"] == name], n, name in variants)
            _mark_L(ax, L)
            ax.xaxis.set_major_locator(mt.FixedLocator(list(range(0, n + 1, step))))
            ax.xaxis.set_major_formatter(mt.FuncFormatter(_number))
            ax.yaxis.set_major_formatter(mt.FuncFormatter(_number))
            ax.set_xlim(-n * 0.02, n * 1.02)
            ax.grid(True, alpha=0.3)
            what = f"{n}-token windows" if len(cols) > 1 else ""
            ax.set_title(" — ".join(t for t in (_column_title(col, cols), what, panel_title) if t), fontsize=10,
                         loc="left")
            if i == len(groups) - 1:
                ax.set_xlabel("position inside the window (tokens)")
            if j == 0:
                ax.set_ylabel("mean loss (nats/token)")
    _legends(axes)
    setting = " · ".join(_setting(cols) + [f"{split} split"])
    windows = ", ".join(map(str, sorted(set(d["L_eval"].astype(int)))))
    head = f"{title}: loss by position" if title else "Loss by position"
    buckets = sorted({int(x) for x in (d["pos_end"] - d["pos_start"])})
    fig.suptitle(f"{head}\n{setting}\nnon-overlapping {windows}-token windows (each row at its longest evaluated length), loss "
                 f"averaged over {'/'.join(map(str, buckets))}-token buckets · {_seeds(d, 'scheme', band=False)}"
                 f"{_key(names, variants)}", fontsize=10.5)
    return fig


def _draw_positions(ax, name: str, g: pd.DataFrame, n: int, variant: bool | None = None) -> None:
    """One row's mean loss by position (token-weighted over seeds), labelled with its length when it is not ``n``."""
    if g.empty:
        return
    at = int(g["L_eval"].iloc[0])
    g = (g.assign(nll=g["loss"] * g["tokens"], bad=g["loss"].isna()).groupby(["pos_start", "pos_end"], sort=True)
         [["nll", "tokens", "bad"]].sum().reset_index())
    mean = (g["nll"] / g["tokens"]).where(g["bad"] == 0)  # a seed without a number leaves a gap, never a partial mean
    _draw(ax, name, ((g["pos_start"] + g["pos_end"]) / 2).to_numpy(float), mean.to_numpy(float),
          label=name if at == n else f"{name} (at {at})", variant=variant)


def plot_positions(pos: pd.DataFrame, path: Path, split: str = "validation", df: pd.DataFrame | None = None,
                   title: str = "") -> Path | None:
    """Mean loss vs position inside the window at each row's longest evaluated length, one line per table row label
    (with ``df``, the report's rows: only runs the report kept, labelled as in its tables), token-weighted over
    seeds, L marked; panels as in :func:`plot_lengths`."""
    fig = positions_figure(pos, split, df, title)
    if fig is None:
        return None
    _save(fig, path)
    return path


def _save(fig, path: Path) -> None:
    """A deterministic PNG (no software or time metadata; tight bounding box, so the legends are never clipped),
    written atomically."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", metadata={"Software": None}, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------------------------
# Task runs: accuracy vs eval length, and the passkey heatmap
# ---------------------------------------------------------------------------------------------------------------
ACCURACY_COLUMNS = 4  # panels a row of the accuracy figures


def accuracy_figure(df: pd.DataFrame, title: str = "", labels: list[str] | None = None):
    """One panel per (task, L): exact match (%, mean over seeds, depths pooled) vs eval length on a log2 axis with
    its 95 % band (Wilson over examples with one seed, t over seeds with several), one line per row of ``labels``
    (None: the rows as trained, every trained configuration of a scheme included, without their eval-time
    variants); cells without a number (n/a, diverged) are gaps. One legend for the whole figure, below the panels."""
    from pe_bench.report.accuracy import cells

    variants = eval_time(df, "label")
    names = sorted(set(df["label"]) - variants) if labels is None else labels
    d = df[df["label"].isin(names)]
    panels_ = [(t, int(L)) for t in sorted(d["task"].unique()) for L in sorted(d[d["task"] == t]["L_train"].unique())]
    if not panels_:
        return None
    fig, axes = _panel_grid(len(panels_))
    for (task, L), ax in zip(panels_, axes.flat):
        c = cells(d, task)
        c = c[c["L_train"] == L]
        for name in [n for n in names if n in set(c["label"])]:
            g = c[(c["label"] == name) & (c["status"] == "ok")].sort_values("L_eval")
            x = g["L_eval"].to_numpy()
            _draw(ax, name, x, 100 * g["mean"].to_numpy(), (100 * g["lo"].to_numpy(), 100 * g["hi"].to_numpy()),
                  variant=name in variants)
        _mark_L(ax, L)
        ax.set_xscale("log", base=2)
        lengths = sorted(c["L_eval"].unique())
        ax.set_xticks(lengths, [str(int(n)) for n in lengths], fontsize=7)
        ax.minorticks_off()
        ax.set_ylim(-3, 103)
        ax.set_title(f"{task} (L = {L})", fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels_):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("exact match (%)", fontsize=8)
    for ax in axes[-1, :]:
        ax.set_xlabel("evaluation length (tokens)", fontsize=8)
    _figure_legend(fig, axes)
    head = f"{title}: exact match vs evaluation length" if title else "exact match vs evaluation length"
    fig.suptitle("\n".join(x for x in (head, _key(names, variants).strip(), "bands: 95 % interval") if x), fontsize=10)
    return fig


def _panel_grid(n: int):
    """A headless figure of n small panels, ACCURACY_COLUMNS a row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(ACCURACY_COLUMNS, n)
    rows = -(-n // cols)
    return plt.subplots(rows, cols, figsize=(3.4 * cols + 0.4, 2.7 * rows + 1.6), dpi=110, squeeze=False,
                        sharey=True, layout="constrained")


def _figure_legend(fig, axes) -> None:
    """One legend for every panel of the figure, below them: each row once, then the training length(s)."""
    seen: dict[str, Any] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    labels = sorted(seen, key=lambda lab: lab.startswith("L = "))
    fig.legend([seen[lab] for lab in labels], labels, loc="outside lower center", ncols=min(5, len(labels)),
               fontsize=8, handlelength=4.0, frameon=False)


def variant_families(df: pd.DataFrame) -> dict[str, list[str]]:
    """Base scheme → its rows (its configurations as trained first, then its eval-time variants) for every base
    scheme that has eval-time variants."""
    names, variants = sorted(set(df["label"])), eval_time(df, "label")
    out = {}
    for base in sorted({base_name(n) for n in names}):
        mine = [n for n in names if base_name(n) == base]
        if any(n in variants for n in mine):
            out[base] = sorted(mine, key=lambda n: (n in variants, n != base, n))
    return out


def plot_accuracy(df: pd.DataFrame, path: Path, title: str = "") -> list[Path]:
    """accuracy_vs_length.png (the rows as trained) and accuracy_vs_length_<scheme>.png for each scheme with
    variants (the scheme and its variants) beside ``path``."""
    written = [_save_figure(accuracy_figure(df, title), path)]
    for base, names in variant_families(df).items():
        written.append(_save_figure(accuracy_figure(df, f"{title + ': ' if title else ''}{base} and its variants",
                                                    names),
                                    path.with_name(f"{path.stem}_{base}{path.suffix}")))
    return [p for p in written if p is not None]


def passkey_heatmap_figure(df: pd.DataFrame, title: str = ""):
    """The needle-in-a-haystack picture: one panel per row (scheme) of a task evaluated by depth, exact match (%, mean over seeds) by
    context length (columns) × depth of the key (rows, 0 % = right after BOS); L is outlined; no number is grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = df[df["depth"] != ""]
    if d.empty:
        return None
    names = list(dict.fromkeys(d.sort_values(["L_train", "label"], kind="stable")[["label", "L_train"]]
                               .itertuples(index=False, name=None)))
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols + 1.2, 3.2 * rows + 0.8), dpi=110, squeeze=False,
                             layout="constrained")
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#d0d0d0")
    image = None
    for ax, (name, L) in zip(axes.flat, names):
        c = d[(d["label"] == name) & (d["L_train"] == L)].copy()
        c["depth"] = c["depth"].astype(float)
        ok = c[c["status"] == "ok"].groupby(["depth", "L_eval"])["exact_match"].mean()
        lengths = sorted(c["L_eval"].unique())
        depths = sorted(c["depth"].unique())
        grid = np.full((len(depths), len(lengths)), np.nan)
        for (dep, n), v in ok.items():
            grid[depths.index(dep), lengths.index(n)] = 100 * v
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=100, aspect="auto",
                          origin="upper", interpolation="nearest")
        for (i, j), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=6.5,
                        color="black" if 25 < v < 85 else "white")
        if int(L) in lengths:
            j = lengths.index(int(L))
            ax.add_patch(plt.Rectangle((j - 0.5, -0.5), 1, len(depths), fill=False, lw=2.0, ec="#303030"))
        ax.set_xticks(range(len(lengths)), [str(int(n)) for n in lengths], fontsize=8)
        ax.set_yticks(range(len(depths)), [f"{100 * x:.0f}%" for x in depths], fontsize=7)
        ax.set_xlabel("context length (tokens)", fontsize=8)
        ax.set_ylabel("depth of the key", fontsize=8)
        ax.set_title(f"{name} (L = {L})", fontsize=9)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="exact match (%)")
    fig.suptitle(title or "passkey retrieval: exact match by context length × depth (L outlined)", fontsize=11)
    return fig


def leaderboard_order(board: pd.DataFrame) -> list[tuple[str, int]]:
    """The rows (scheme, L) of a leaderboard in the figure's order. First the rows run on every task of the board,
    by the mean over all those tasks of log2(effective length / L) (a task where the row has no effective length
    counts as L), highest first; then, in a block of their own, the rows run on only some tasks, by name — a mean over
    fewer tasks never outranks one over all of them."""
    tasks = set(board["task"])
    ok = board[board["status"] == "ok"]
    log2 = np.log2(ok["effective_length"].astype(float) / ok["L"].astype(float))
    total = log2.groupby([ok["scheme"], ok["L"]]).sum()
    ran = board.groupby(["scheme", "L"])["task"].agg(lambda t: set(t) == tasks)
    rows = list(dict.fromkeys(zip(board["scheme"], board["L"].astype(int))))
    return sorted(rows, key=lambda r: (not ran.get(r, False),
                                       -total.get(r, 0.0) / len(tasks) if ran.get(r, False) else 0.0, r[0], r[1]))


def leaderboard_figure(board: pd.DataFrame, beside: pd.DataFrame | None = None, title: str = ""):
    """Schemes × tasks coloured by the effective length (log2 of it over L: L … ≥ 8L), each cell labelled; hatched
    where the row is not learnt at L, grey where it has no number; rows in :func:`leaderboard_order`. ``beside``
    (pe_bench.report.leaderboard.perplexity_columns): the perplexity longest/L and the context value as the last
    columns, in their own colours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    if board.empty:
        return None
    rows, tasks = leaderboard_order(board), sorted(board["task"].unique())
    extra = [c for c in (beside.columns if beside is not None else []) if c.startswith(("perplexity", "context value"))]
    size = (0.62 * (len(tasks) + len(extra)) + 5.2, 0.3 * len(rows) + 2.6)
    if extra:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=size, dpi=110, width_ratios=[len(tasks), len(extra)],
                                     layout="constrained")
    else:
        fig, ax = plt.subplots(figsize=size, dpi=110, layout="constrained")
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#e3e3e3")
    grid = _leaderboard_cells(ax, board, rows, tasks)
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=3, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(tasks)), tasks, rotation=40, ha="right", fontsize=7.5)
    run = board.groupby(["scheme", "L"])["task"].nunique()
    fewest = board.groupby(["scheme", "L"])["seeds"].agg(lambda x: (int(x.min()), int(x.max())))
    several_L = board["L"].nunique() > 1

    def seeds(key: tuple[str, int]) -> str:
        lo, hi = fewest[key]
        return f" · {hi} seed{'s' * (hi > 1)}" if hi < 3 else " · some < 3 seeds" if lo < 3 else ""

    ax.set_yticks(range(len(rows)), [f"{s}{f' (L={L})' if several_L else ''}  [{run[(s, L)]} of {len(tasks)}"
                                     f"{seeds((s, L))}]" for s, L in rows], fontsize=7.5)
    bar = fig.colorbar(image, ax=ax, location="top", shrink=0.35, aspect=30, pad=0.01, ticks=[0, 1, 2, 3])
    bar.ax.set_xticklabels(["L", "2L", "4L", "8L"], fontsize=7)
    bar.set_label("effective length (relative)", fontsize=8)
    if extra:
        _beside_columns(bx, rows, beside, extra, TwoSlopeNorm)
    fig.suptitle(f"{title + ': ' if title else ''}effective length by task\nrows run on every task first, by the "
                 "mean log2(effective length / L) over all of them (none: L), then the others by name ([n of m]: tasks "
                 "run); hatched: not learnt at L; grey: not run; red dotted outline: fewer than 3 seeds (exploratory)",
                 fontsize=9)
    return fig


def _leaderboard_cells(ax, board: pd.DataFrame, rows: list[tuple[str, int]], tasks: list[str]) -> np.ndarray:
    """Label, hatch and outline the leaderboard's cells on ``ax``; the grid of log2(effective length / L): (rows,
    tasks), NaN where a cell has no number."""
    import matplotlib.pyplot as plt

    from pe_bench.report.accuracy import NOT_LEARNT

    grid = np.full((len(rows), len(tasks)), np.nan)
    at = {(r["scheme"], int(r["L"]), r["task"]): r for _, r in board.iterrows()}
    for (i, (scheme, L)), (j, task) in ((a, b) for a in enumerate(rows) for b in enumerate(tasks)):
        r = at.get((scheme, L, task))
        if r is None:
            continue
        if r["status"] == "ok":
            grid[i, j] = math.log2(float(r["effective_length"]) / L)
            top = float(r["effective_length"]) == float(r["longest_evaluated"])
            ratio = float(r["effective_length"]) / L
            ax.text(j, i, ("≥ " if top else "") + ("L" if ratio == 1 else f"{ratio:g}L"), ha="center", va="center",
                    fontsize=6.5, color="white" if grid[i, j] < 1.8 else "black")
        elif r["status"] == NOT_LEARNT:
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="////", ec="#9a9a9a", lw=0))
        if r.get("exploratory", False) in (True,):  # fewer than 3 seeds: outlined, a reading rather than a finding
            ax.add_patch(plt.Rectangle((j - 0.44, i - 0.44), 0.88, 0.88, fill=False, ec="#d62728", lw=0.9, ls=":"))
    return grid


def _beside_columns(ax, rows: list[tuple[str, int]], beside: pd.DataFrame | None, extra: list[str], norm) -> None:
    """The perplexity longest/L (coloured around 1: red above, blue below) and the context value (coloured around 0)
    of each row, labelled; blank where the row has no language-model run."""
    import matplotlib

    ax.set_xticks(range(len(extra)), [c.replace(" (", "\n(") for c in extra], rotation=40, ha="right", fontsize=7)
    ax.set_yticks([])
    ax.set_xlim(-0.5, max(1, len(extra)) - 0.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    cmap = matplotlib.colormaps["RdBu_r"]
    for j, c in enumerate(extra):
        centre, span = (1.0, 1.0) if c.startswith("perplexity") else (0.0, 1.0)
        for i, (scheme, _L) in enumerate(rows):
            v = beside[c].get(scheme) if beside is not None and scheme in beside.index else None
            if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
                continue
            level = float(norm(vmin=centre - span, vcenter=centre, vmax=centre + span)(min(max(v, centre - span),
                                                                                         centre + span)))
            ax.add_patch(matplotlib.patches.Rectangle((j - 0.5, i - 0.5), 1, 1, color=cmap(level), lw=0))
            ax.text(j, i, f"{v:.2f}" if c.startswith("perplexity") else f"{v:+.2f}", ha="center", va="center",
                    fontsize=6.5, color="white" if abs(level - 0.5) > 0.35 else "black")


def plot_leaderboard(board: pd.DataFrame, path: Path, beside: pd.DataFrame | None = None,
                     title: str = "") -> Path | None:
    return _save_figure(leaderboard_figure(board, beside, title), path)


def plot_passkey_heatmap(df: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    return _save_figure(passkey_heatmap_figure(df, title), path)


def _save_figure(fig, path: Path) -> Path | None:
    """The figure saved at ``path`` (None when there was nothing to draw)."""
    if fig is None:
        return None
    _save(fig, path)
    return path


def plot_extension(t: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """Perplexity vs fine-tuning steps (symlog x: 0 = the parent, eval-time only), one line per method: at the
    parent's longest length (8L with the default ratios) and at L, a pair of panels per parent."""
    import matplotlib.pyplot as plt
    import matplotlib.ticker as mt

    from pe_bench.report.extension import curve

    if t.empty:
        return None
    parents = list(dict.fromkeys(t["parent"]))
    fig, axes = plt.subplots(len(parents), 2, figsize=(11, 4.2 * len(parents)), squeeze=False)
    for row, parent in enumerate(parents):
        tp = t[t["parent"] == parent]
        L = int(tp["L"].iloc[0])
        lengths = [int(c) for c in tp.columns if c.isdigit() and (tp[c] != "—").any()] or [L]
        for ax, n in zip(axes[row], (max(lengths), L)):
            for i, method in enumerate(dict.fromkeys(tp["method"])):
                xs, ys = curve(tp, method, n)
                if len(xs):
                    ax.plot(xs, ys, marker="osD^v<>ph"[i % 9], label=method)
            ax.set_xscale("symlog", linthresh=10)
            ax.set_yscale("log")  # eval-time PI starts ~10× above the rest
            ax.yaxis.set_major_formatter(mt.FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(mt.FormatStrFormatter("%g"))
            steps = sorted(set(int(s) for s in tp["steps"]))
            ax.set_xticks(steps)
            ax.set_xticklabels([str(s) for s in steps])
            ax.set_xlabel("fine-tuning steps (0: the parent, eval-time only)")
            ax.set_ylabel(f"perplexity at {n} tokens ({n // L}L)" if n % L == 0 else f"perplexity at {n} tokens")
            ax.set_title(f"{parent}: at {n} tokens", fontsize=10)
            ax.grid(alpha=0.3)
        axes[row][0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    _save(fig, path)
    return path


def plot_headroom(t: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """The trained-long headroom against training tokens (a report.headroom table): per scheme as trained and
    evaluation length, 100·(1 − exp(long − short_at_L)) — how much lower the reference's perplexity at L_eval is than
    the short model's at L — at each token budget (log2 x), a dashed line at 5 %. None unless some scheme has two
    budgets or more."""
    import matplotlib.pyplot as plt

    t = t.dropna(subset=["short_at_L", "long"])
    curves = [(k, g.sort_values("tokens")) for k, g in t.groupby(["base_scheme", "L", "L_eval"], sort=True)
              if g["tokens"].nunique() >= 2]
    if not curves:
        return None
    import matplotlib.ticker as mt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (scheme, L, n), g in curves:
        ax.plot(g["tokens"], 100 * (1 - np.exp(g["long"] - g["short_at_L"])), **style_for(scheme),
                label=f"{scheme}: trained at {n} against trained at {L}")
    ax.axhline(5, color="grey", linestyle="--", linewidth=1)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(mt.FixedLocator(sorted(set(t["tokens"]))))
    ax.xaxis.set_major_formatter(mt.FuncFormatter(lambda v, _: f"{v / 1e6:.3g}M"))
    ax.xaxis.set_minor_locator(mt.NullLocator())
    ax.set_xlabel("training tokens (the same budget for both)")
    ax.set_ylabel("trained-long headroom (% of perplexity)")
    ax.set_title("the reference at L_eval against the short model at L (sliding, same tokens)", fontsize=9, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    _save(fig, path)
    return path


# ---------------------------------------------------------------------------------------------------------------
# Attention analysis (pe-bench analyze): statistics by query position, per layer and head
# ---------------------------------------------------------------------------------------------------------------
PANELS = (("entropy_norm", "entropy / log(visible keys)"), ("distance", "mean attended distance (tokens)"),
          ("sink_mass", "attention mass on token 0"))


def attention_figure(rows: list[dict], title: str = ""):
    """Rows: the three statistics; columns: layers; one line per head at the longest evaluation length (it covers
    every query position; for text, a query at position i sees the same keys at every length), x = query position;
    the training length L marked; uniform attention dotted (entropy 1, distance i/2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_layers = max(r["layer"] for r in rows) + 1
    n_heads = max(r["head"] for r in rows) + 1
    L = rows[0]["L_train"]
    longest = max(r["L_eval"] for r in rows)
    fig, axes = plt.subplots(len(PANELS), n_layers, figsize=(3.4 * n_layers + 1.5, 2.7 * len(PANELS) + 0.8),
                             dpi=110, squeeze=False, sharex=True, sharey="row", layout="constrained")
    colours = matplotlib.colormaps["tab10"]
    for col in range(n_layers):
        for r, (key, words) in enumerate(PANELS):
            ax = axes[r][col]
            for head in range(n_heads):
                pts = sorted((0.5 * (x["q_start"] + x["q_end"] - 1), x[key]) for x in rows
                             if x["layer"] == col and x["head"] == head and x["L_eval"] == longest)
                ax.plot(*zip(*pts), color=colours(head % 10), lw=1.4, label=f"head {head}")
            if key == "entropy_norm":
                ax.axhline(1.0, color="#555555", lw=0.8, ls=":", label="uniform attention")
            if key == "distance":
                ax.plot([0, longest], [0, longest / 2], color="#555555", lw=0.8, ls=":", label="uniform attention")
            ax.axvline(L, label=f"L = {L} (training length)", **L_LINE)
            ax.grid(alpha=0.3)
            if r == 0:
                ax.set_title(f"layer {col}", fontsize=10)
            if col == 0:
                ax.set_ylabel(words, fontsize=8)
            if r == len(PANELS) - 1:
                ax.set_xlabel("query position", fontsize=8)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    axes[0][-1].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    fig.suptitle(title or f"attention by query position at {longest} tokens (trained at L = {L})", fontsize=11)
    return fig


def plot_attention(rows: list[dict], path: Path, title: str = "") -> Path:
    """attention_figure saved at ``path``; ImportError without matplotlib."""
    _save(attention_figure(rows, title), path)
    return path

"""Plots a reader can trust at a glance: a scheme looks the same in every plot, L is marked in a style no row uses,
ticks are plain numbers, a one-point row shows, and no row is lost from the legends however many there are."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from pe_bench.plots import MAX_ROWS, SCHEMES, VARIANTS, lengths_figure, plot_lengths, positions_figure, style_for
from pe_bench.schemes import catalog

ROPE_VARIANTS = [n for n in VARIANTS if n.startswith("rope")]


def rows(names, L=64, lengths=None, seeds=(0, 1), mode="nonoverlapping", only_L=()):
    """Eval rows shaped like collect_all's: every name at every length (names in ``only_L``: at L only)."""
    out = []
    for k, name in enumerate(names):
        for n in lengths or (L, 2 * L, 4 * L, 8 * L):
            if name in only_L and n != L:
                continue
            for seed in seeds:
                out.append({"run": f"{name}-L{L}-s{seed}", "scheme": name, "data": "shakespeare", "model": "tiny",
                            "split": "validation", "L_train": L, "L_eval": n, "mode": mode,
                            "stride": n if mode == "nonoverlapping" else L, "S": "" if mode == "nonoverlapping" else L,
                            "ppl": 6.0 + k + (n / L) * (k % 3) + 0.1 * seed, "seed": seed, "status": "ok",
                            "tokens_scored": 4096})
    return pd.DataFrame(out)


def positions(names, L=64, n=512):
    return pd.DataFrame([{"run": f"{name}-L{L}-s0", "scheme": name, "data": "shakespeare", "model": "tiny",
                          "split": "validation", "L_train": L, "L_eval": n, "pos_start": b, "pos_end": b + n // 16,
                          "loss": 2.0 + k * 0.1 + b / n, "tokens": 100, "seed": 0}
                         for k, name in enumerate(names) for b in range(0, n, n // 16)])


def series(fig):
    """label → Line2D for every row drawn (not the training-length lines)."""
    return {ln.get_label(): ln for ax in fig.axes for ln in ax.get_lines()
            if not ln.get_label().startswith(("L = ", "_"))}


def drawn(line):
    # matplotlib keeps the dash pattern (as given, before scaling by the line width) in this attribute
    return (to_hex(line.get_color()), line._unscaled_dash_pattern, line.get_marker(),
            line.get_markerfacecolor() if line.get_markerfacecolor() == "none" else to_hex(line.get_markerfacecolor()))


def expected(name):
    s = style_for(name)
    mfc = s["markerfacecolor"]
    line = plt.Line2D([], [], linestyle=s["linestyle"])
    return (s["color"], line._unscaled_dash_pattern, s["marker"], mfc if mfc == "none" else to_hex(mfc))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_a_scheme_has_the_same_style_in_every_plot():
    a = lengths_figure(rows(["alibi", "rope", "rope+yarn×8"]))
    b = lengths_figure(rows(["t5", "nope", "rope+yarn×8", "alibi", "xl"], seeds=(0,), mode="sliding"), mode="sliding")
    c = positions_figure(positions(["xl", "rope+yarn×8", "alibi"]))
    for name in ("alibi", "rope+yarn×8"):
        assert drawn(series(a)[name]) == drawn(series(b)[name]) == drawn(series(c)[name]) == expected(name)
    assert drawn(series(a)["alibi"]) != drawn(series(a)["rope"]) != drawn(series(a)["rope+yarn×8"])


def test_style_is_a_pure_function_of_the_name_never_of_the_process():
    """No hash() (salted per process): a digest of the name, pinned here."""
    assert style_for("alibi · model.n_layers=2") == {"color": "#b8143c", "linestyle": (0, (1.2, 1.5)),
                                                     "marker": "v", "markerfacecolor": "none"}
    assert style_for("foo") == {"color": "#5c5c8a", "linestyle": "-", "marker": "*", "markerfacecolor": "#5c5c8a"}
    assert style_for("alibi") == style_for("alibi")


def test_registered_schemes_get_pairwise_distinct_styles_and_colours():
    names = sorted(catalog())
    assert sorted(SCHEMES) == names  # a new scheme gets its own entry in the table
    styles = [expected(n) for n in names]
    assert len(set(styles)) == len(names) >= 17
    assert len({s[0] for s in styles}) == len(names)  # distinct colours, not just distinct combinations
    assert all(s[1] == expected("nope")[1] for s in styles)  # each scheme as trained: a solid line


def test_variants_keep_their_scheme_colour_family_and_never_take_another_style():
    bases = {n: SCHEMES[n][0] for n in SCHEMES}
    variants = [*VARIANTS, "alibi · model.n_layers=2", "alibi · model.n_layers=4", "rope+yarn×8 · S=64", "foo",
                "foo[bar=1]"]
    everything = [expected(n) for n in [*SCHEMES, *variants]]
    assert len(set(everything)) == len(everything)
    for name in variants:
        s = style_for(name)
        base = name.split("+")[0].split("[")[0].split(" ")[0]
        if base in SCHEMES:
            assert s["marker"] == SCHEMES[base][1] and s["color"] not in set(bases.values()) - {bases[base]}
            assert s["linestyle"] != "-" and s["markerfacecolor"] == "none"  # broken line, hollow marker
    rope = [expected(n) for n in ["rope", *ROPE_VARIANTS]]
    assert len({r[0] for r in rope}) == len(rope) and len({r[1] for r in rope}) == len(rope)  # shade and dashes


def test_a_scheme_trained_with_an_option_is_a_solid_line_and_only_an_eval_time_variant_is_broken():
    """tilt trained with slope=0.5 is a model as trained (as_trained), not a variant of tilt: a solid line with
    filled markers in a shade of tilt's colour, and the legend under the title says so; rope+yarn×8 (evaluated
    from rope's checkpoint) stays a broken line with hollow markers."""
    d = rows(["tilt", "tilt[slope=0.5]", "rope", "rope+yarn×8"])
    d["as_trained"] = d["scheme"] != "rope+yarn×8"
    fig = lengths_figure(d)
    lines = series(fig)
    assert lines["tilt[slope=0.5]"].get_linestyle() == "-"
    assert lines["tilt[slope=0.5]"].get_markerfacecolor() != "none"
    assert to_hex(lines["tilt[slope=0.5]"].get_color()) != to_hex(lines["tilt"].get_color())
    assert drawn(lines["rope+yarn×8"]) == expected("rope+yarn×8")  # a registered variant: its fixed broken style
    title = fig._suptitle.get_text()
    assert "(a shade: another configuration)" in title and "broken line, hollow marker: a variant of it" in title
    only_trained = lengths_figure(d[d["scheme"].str.startswith("tilt")])._suptitle.get_text()
    assert "another configuration of it" in only_trained and "broken" not in only_trained


@pytest.mark.parametrize("make", ["lengths", "positions"])
def test_training_length_is_marked_in_a_style_no_row_uses(make):
    names = ["alibi", "rope", "rope+yarn×8", "nope", "sinusoidal"]
    fig = lengths_figure(rows(names)) if make == "lengths" else positions_figure(positions(names))
    (ax,) = fig.axes
    marks = [ln for ln in ax.get_lines() if ln.get_label() == "L = 64 (training length)"]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [64, 64]
    mark = (to_hex(marks[0].get_color()), marks[0].get_linewidth(), marks[0].get_alpha())
    for ln in series(fig).values():
        assert to_hex(ln.get_color()) != mark[0] and ln.get_linewidth() < mark[1] and ln.get_alpha() is None
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [*names, "L = 64 (training length)"]
    assert ax.get_legend().handlelength >= 3  # long enough to show the dashes


def test_ticks_are_plain_numbers_at_the_evaluated_lengths():
    fig = lengths_figure(rows(["alibi", "rope"], lengths=(64, 128, 256, 512)))
    fig.canvas.draw()
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128", "256", "512"]
    assert ax.get_yscale() == "log"
    y = [t.get_text() for t in ax.get_yticklabels()]
    assert len(y) >= 3 and all(float(t) > 0 for t in y)  # '6', '10', '15'..., never '6×10⁰' or '$10^{1}$'
    assert not ax.yaxis.get_minorticklabels() or all(not t.get_text() for t in ax.yaxis.get_minorticklabels())


def test_title_says_data_model_L_split_and_protocol():
    text = lengths_figure(rows(["alibi"]), title="sweep")._suptitle.get_text()
    assert all(w in text for w in ("sweep", "shakespeare", "tiny", "L = 64", "validation", "non-overlapping",
                                   "4,096 tokens", "2 seeds"))
    text = lengths_figure(rows(["alibi"], mode="sliding"), mode="sliding")._suptitle.get_text()
    assert "sliding window, stride S = 64" in text


def test_a_one_point_series_is_visible():
    fig = lengths_figure(rows(["learned", "learned[beyond_table=clamp]", "alibi"], only_L=("learned",)))
    line = series(fig)["learned"]
    assert len(line.get_xdata()) == 1
    assert line.get_marker() not in ("", "None", None) and line.get_markersize() >= 4


def test_many_rows_are_split_into_panels_and_every_row_is_in_a_legend():
    names = [*sorted(catalog()), *ROPE_VARIANTS, *[n for n in VARIANTS if n.startswith("learned")],
             "alibi · model.n_layers=2", "foo"]
    for fig in (lengths_figure(rows(names)), positions_figure(positions(names))):
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        assert len(legends) > 1 and len(fig.axes) == len(legends)
        shown = [t.get_text() for lg in legends for t in lg.get_texts() if not t.get_text().startswith("L = ")]
        assert sorted(shown) == sorted(names)  # every row once, none lost
        assert all(len(lg.get_texts()) <= MAX_ROWS + 1 for lg in legends)
        fig.canvas.draw()
        for ax in fig.axes:  # beside the panel, not over its lines
            assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1


def test_several_training_lengths_get_a_column_of_panels_each():
    fig = lengths_figure(pd.concat([rows(["alibi", "rope"], L=64), rows(["alibi", "rope"], L=128)]))
    assert len(fig.axes) == 2
    for ax, L in zip(fig.axes, (64, 128)):
        assert [ln.get_label() for ln in ax.get_lines()][-1] == f"L = {L} (training length)"
        assert f"L = {L}" in ax.get_title(loc="left")
        assert [ln.get_label() for ln in ax.get_lines()][:2] == ["alibi", "rope"]


def test_plots_are_byte_deterministic(tmp_path):
    df = rows(["alibi", "rope", "rope+yarn×8"])
    a, b = plot_lengths(df, tmp_path / "a.png"), plot_lengths(df, tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()
    assert plot_lengths(df, tmp_path / "c.png", mode="sliding") is None


@pytest.mark.parametrize("column, values", [("data", ("shakespeare", "wikitext2")), ("model", ("tiny", "small"))])
def test_several_data_sets_or_models_get_a_column_of_panels_each(column, values):
    df = pd.concat([rows(["alibi", "rope"]).assign(**{column: v}) for v in values])
    fig = lengths_figure(df)
    assert len(fig.axes) == 2
    for ax, v in zip(fig.axes, values):
        assert v in ax.get_title(loc="left")
        assert [ln.get_label() for ln in ax.get_lines()][:2] == ["alibi", "rope"]


def test_a_seed_without_a_number_at_a_position_leaves_a_gap_in_its_own_curve_only():
    import numpy as np

    two = pd.concat([positions(["alibi", "rope"]), positions(["alibi", "rope"]).assign(seed=1)], ignore_index=True)
    two.loc[(two["scheme"] == "rope") & (two["seed"] == 1) & (two["pos_start"] == 0), "loss"] = float("nan")
    lines = series(positions_figure(two))
    rope, alibi = lines["rope"].get_ydata(), lines["alibi"].get_ydata()
    assert np.isnan(rope[0]) and not np.isnan(rope[1:]).any()  # a gap, never the other seed's loss alone
    assert not np.isnan(alibi).any() and alibi[0] == pytest.approx(2.0)

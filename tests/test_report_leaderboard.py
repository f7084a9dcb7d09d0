"""Accuracy cells with intervals, `not learnt at L`, the effective-length leaderboard and the paired accuracy
comparison, on hand-made rows whose answers are known."""

from __future__ import annotations

import pandas as pd
import pytest

from pe_bench.config import ConfigError
from pe_bench.report.accuracy import NOT_LEARNT, accuracy_table, compare_accuracy, verdict_lines
from pe_bench.report.collect import Accuracy
from pe_bench.report.leaderboard import effective_cell, leaderboard, leaderboard_markdown
from pe_bench.stats import wilson_interval

N = 400  # held-out examples per length


def rows(label: str, solved: list[int], seed: int = 0, L: int = 32, task: str = "copy", chance: float = 0.0,
         status: str = "ok") -> list[dict]:
    """One accuracy row per length L, 2L, 4L, 8L with ``solved`` of N examples (the first ones solved)."""
    out = []
    for i, s in enumerate(solved):
        out.append({"task": task, "label": label, "scheme": label, "L_train": L, "L_eval": L * 2**i, "seed": seed,
                    "depth": "", "exact_match": s / N, "token_accuracy": s / N, "solved": s, "examples": N,
                    "status": status, "chance": chance, "heldout": f"h{i}", "run": f"{label}-{seed}",
                    "outcomes": "x" * s + "." * (N - s)})
    return out


def frame(*groups: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([r for g in groups for r in g])


def test_one_seed_cells_carry_the_wilson_interval_and_several_seeds_the_t_interval():
    df = frame(rows("alibi", [396, 200, 40, 0]), rows("t5", [400, 380, 300, 10], seed=0),
               rows("t5", [398, 370, 320, 30], seed=1))
    t = accuracy_table(df, "copy")
    iv = wilson_interval(200, N)
    assert t.loc[("alibi", 32), "64"] == f"50.0 [{100 * iv.lo:.1f}, {100 * iv.hi:.1f}]"
    assert t.loc[("alibi", 32), "interval"] == "Wilson, 400 examples"
    assert t.loc[("t5", 32), "128"].startswith("77.5 ± 3.5 [") and t.loc[("t5", 32), "interval"] == "t, 2 seeds"
    assert t.loc[("t5", 32), "seeds"] == "2"


def test_a_row_below_the_threshold_at_L_says_not_learnt_beyond_L_in_both_metrics():
    df = frame(rows("rope", [20, 0, 0, 0]), rows("alibi", [396, 10, 0, 0]))
    for metric in ("exact_match", "token_accuracy"):
        t = accuracy_table(df, "copy", metric)
        assert t.loc[("rope", 32), "32"].startswith("5.0")  # its own number at L stays
        assert list(t.loc[("rope", 32), ["64", "128", "256"]]) == [NOT_LEARNT] * 3
        assert t.loc[("alibi", 32), "64"].startswith("2.5")  # learnt: its zeros are extrapolation


def test_the_effective_length_is_where_exact_match_stays_above_the_fraction_of_its_accuracy_at_L():
    df = frame(rows("alibi", [396, 380, 200, 10]),  # 99 %, 95 % (≥ 0.8·99), 50 % (below): 2L
               rows("t5", [400, 400, 399, 398]),  # flat to the longest length evaluated: ≥ 8L
               rows("rope", [300, 10, 0, 0]),  # 75 % at L: not learnt
               rows("nope", [392, 20, 0, 0], status="ok"))
    b = leaderboard(df).set_index("scheme")
    assert b.loc["alibi", "effective_length"] == 64 and b.loc["alibi", "effective_ratio"] == 2
    assert effective_cell(b.loc["alibi"]) == "2L [2L, 2L]"
    assert b.loc["t5", "effective_length"] == 256 and effective_cell(b.loc["t5"]) == "≥ 8L [≥ 8L, ≥ 8L]"
    assert b.loc["rope", "status"] == NOT_LEARNT and pd.isna(b.loc["rope", "effective_length"])
    assert b.loc["nope", "effective_length"] == 32
    md = leaderboard_markdown(leaderboard(df), "t")
    assert "| alibi | 32 | 2L [2L, 2L] (1 seed) |" in md and NOT_LEARNT in md


def test_the_range_of_the_effective_length_follows_the_cells_intervals():
    # 2L at 80.5 % of 99 % (target 79.2 %): its interval straddles the target, so the range is [L, 2L] (lower end)
    # and the upper end reaches 4L where the interval's top still clears it
    df = frame(rows("alibi", [396, 319, 310, 100]))
    b = leaderboard(df).iloc[0]
    assert (b["effective_lo"], b["effective_length"], b["effective_hi"]) == (32, 64, 128)


def test_above_chance_is_required_too():
    df = frame(rows("flip", [396, 388, 388, 385], task="flipflop", chance=0.97))  # 2L: 97 %, not above chance
    b = leaderboard(df).iloc[0]
    assert b["status"] == "ok" and b["effective_length"] == 32
    df2 = frame(rows("flip", [396, 388, 388, 385], task="flipflop", chance=0.5))
    assert leaderboard(df2).iloc[0]["effective_length"] == 256


def test_a_diverged_row_has_no_effective_length():
    df = frame(rows("alibi", [0, 0, 0, 0], status="diverged"))
    assert leaderboard(df).iloc[0]["status"] == "diverged"


def acc(df: pd.DataFrame) -> Accuracy:
    return Accuracy(df)


def test_compare_pairs_the_same_examples_and_gives_a_verdict_per_length():
    a = rows("alibi", [396, 380, 200, 10])
    b = rows("rope", [396, 100, 0, 0])
    t = compare_accuracy(acc(frame(a, b)), "alibi", "rope")
    assert list(t["verdict"]) == ["indistinguishable", "higher", "higher", "higher"]
    assert list(t["only alibi"]) == [0, 280, 200, 10] and list(t["only rope"]) == [0, 0, 0, 0]
    assert t.iloc[0]["McNemar p"] == "1" and t.iloc[3]["method"] == "McNemar, 400 examples"
    assert verdict_lines(t, "alibi", "rope") == [
        "copy (L=32): alibi higher at 3, lower at 0, indistinguishable at 1 of 4 lengths than rope (paired, 95 %)"]


def test_compare_refuses_unknown_rows_and_leaves_out_cells_without_outcomes():
    a, b = rows("alibi", [396, 380, 200, 10]), rows("rope", [396, 100, 0, 0])
    with pytest.raises(ConfigError, match="no accuracy rows for scheme 't5'"):
        compare_accuracy(acc(frame(a, b)), "alibi", "t5")
    b[1]["outcomes"] = ""  # an older run: no per-example outcomes at 2L
    t = compare_accuracy(acc(frame(a, b)), "alibi", "rope")
    assert list(t["L_eval"]) == [32, 128, 256]
    assert any("at 64" in line and "pe-bench eval" in line for line in t.attrs["left_out"])
    other = [dict(r, heldout="other") for r in rows("rope", [396, 100, 0, 0])]  # other examples: never paired
    with pytest.raises(ConfigError, match="same held-out examples; .*scored on different held-out examples"):
        compare_accuracy(acc(frame(a, other)), "alibi", "rope")


def test_compare_averages_both_rows_over_the_common_seeds_and_names_the_others():
    a = rows("alibi", [396, 380, 200, 10]) + rows("alibi", [0, 0, 0, 0], seed=1)
    b = rows("rope", [396, 100, 0, 0])
    t = compare_accuracy(acc(frame(a, b)), "alibi", "rope")
    assert list(t["alibi"]) == ["99.0", "95.0", "50.0", "2.5"] and set(t["seeds"]) == {"0"}  # seed 0 only
    assert any("seeds [1] of one row only" in line for line in t.attrs["left_out"])


def test_a_cell_with_fewer_seeds_than_its_row_says_so_and_a_row_without_L_says_no_number_at_L():
    df = frame(rows("t5", [400, 380, 300, 10]), rows("t5", [398, 370, 320], seed=1))  # seed 1 not at 8L
    t = accuracy_table(df, "copy")
    assert t.loc[("t5", 32), "256"].endswith("(1 seed)") and t.loc[("t5", 32), "interval"] == "t, 2 seeds"
    no_l = frame([r for r in rows("rope", [396, 100, 0, 0]) if r["L_eval"] != 32])
    assert set(accuracy_table(no_l, "copy").loc[("rope", 32)][["64", "128", "256"]]) == {"no number at L"}


def test_a_task_that_does_not_say_its_chance_is_named_on_the_page():
    df = frame(rows("alibi", [396, 380, 200, 10], task="first", chance=float("nan")))
    b = leaderboard(df)
    assert b.iloc[0]["effective_length"] == 64 and pd.isna(b.iloc[0]["chance_at_effective"])
    assert "Chance unknown (the task defines no `chance()`), so 0 is the floor: first." in leaderboard_markdown(b, "t")


def test_an_evaluation_variant_is_learnt_at_L_when_its_task_is():
    """flipflop[ignore_prob=0.1] (dense sequences, out of distribution): its own low accuracy at L is the finding, not
    the recipe failing, so its beyond-L cells are shown when flipflop itself is learnt."""
    df = frame(rows("rope", [396, 390, 300, 100], task="flipflop"),
               rows("rope", [100, 40, 10, 0], task="flipflop[ignore_prob=0.1]"),
               rows("nope", [200, 0, 0, 0], task="flipflop"), rows("nope", [100, 0, 0, 0], task="flipflop[ignore_prob=0.1]"))
    t = accuracy_table(df, "flipflop[ignore_prob=0.1]")
    assert t.loc[("rope", 32), "64"].startswith("10.0") and t.loc[("nope", 32), "64"] == NOT_LEARNT


def test_the_absolute_effective_length_is_where_exact_match_stays_at_or_above_85_percent():
    """RULER's convention beside the relative one: a row at 99 % falling to 88 % at 2L and 80 % at 4L is 2L in
    absolute terms although 80 % is still ≥ 80 % of 99 % (relative 4L); a row at 87 % at L is not learnt at L (no
    relative length) but has an absolute one (L); a row at 84 % at L is `< L`. Both are defined in one sentence above
    their summary table."""
    df = frame(rows("alibi", [396, 352, 320, 10]), rows("rope", [348, 20, 0, 0]), rows("nope", [336, 0, 0, 0]))
    b = leaderboard(df).set_index("scheme")
    assert effective_cell(b.loc["alibi"]) == "4L [2L, 4L]"
    assert b.loc["alibi", "absolute_length"] == 64 and b.loc["alibi", "absolute_ratio"] == 2
    assert effective_cell(b.loc["alibi"], "absolute").startswith("2L [")
    assert b.loc["rope", "status"] == NOT_LEARNT and effective_cell(b.loc["rope"], "absolute").startswith("L [")
    assert effective_cell(b.loc["nope"], "absolute").startswith("< L [")
    md = leaderboard_markdown(leaderboard(df), "t")
    relative, absolute = md.index("**Effective length (relative)**"), md.index("**Effective length (absolute)**")
    assert relative < md.index("| alibi | 32 | 4L [2L, 4L] (1 seed) |") < absolute < md.index("| alibi | 32 | 2L [")
    assert "85 %" in md[absolute:absolute + 200]


def test_the_leaderboard_figure_orders_complete_rows_by_their_mean_log2_effective_length_then_the_rest(tmp_path):
    """leaderboard.png: rows run on every task by the mean log2(effective length / L) over them (≥ 8L on both tasks
    first; a row not learnt anywhere last), then rows run on some tasks only, in their own block; written with the
    perplexity and gain columns beside it."""
    from pe_bench.plots import leaderboard_order, plot_leaderboard

    df = frame(rows("alibi", [396, 380, 200, 10]), rows("alibi", [396, 396, 396, 396], task="passkey"),
               rows("t5", [400, 400, 399, 398]), rows("t5", [400, 400, 399, 398], task="passkey"),
               rows("rope", [300, 10, 0, 0]), rows("rope", [300, 0, 0, 0], task="passkey"))
    board = leaderboard(df)
    assert leaderboard_order(board) == [("t5", 32), ("alibi", 32), ("rope", 32)]  # 3, (1 + 3) / 2, none
    # a row run on one task only, ≥ 8L there, comes after every row run on all tasks, never on top
    sparse = leaderboard(frame(*[rows(s, v, task=t) for s, v, t in (
        ("alibi", [396, 380, 200, 10], "copy"), ("alibi", [396, 396, 396, 396], "passkey"),
        ("t5", [400, 400, 399, 398], "copy"), ("t5", [400, 400, 399, 398], "passkey"),
        ("cope", [400, 400, 400, 400], "passkey"), ("rope", [300, 10, 0, 0], "copy"), ("rope", [300, 0, 0, 0], "passkey"))]))
    assert leaderboard_order(sparse) == [("t5", 32), ("alibi", 32), ("rope", 32), ("cope", 32)]
    beside = pd.DataFrame({"perplexity 8L/L (L=64)": [0.98, 2.1], "context value (L=64)": [0.005, "—"]},
                          index=pd.Index(["alibi", "rope"], name="scheme"))
    path = plot_leaderboard(board, tmp_path / "leaderboard.png", beside, "t")
    assert path is not None and path.stat().st_size > 10_000


def test_the_task_figures_draw_the_schemes_as_trained_and_each_schemes_variants_apart(tmp_path):
    """accuracy_vs_length.png holds the rows as trained; accuracy_vs_length_<scheme>.png a scheme and its variants
    (here rope with rope+yarn×8), one legend per figure."""
    from pe_bench.plots import accuracy_figure, plot_accuracy, variant_families

    df = frame(rows("rope", [396, 100, 0, 0]), rows("rope+yarn×8", [396, 300, 200, 100]),
               rows("alibi", [396, 380, 200, 10]), rows("alibi", [396, 396, 396, 396], task="passkey"))
    assert variant_families(df) == {"rope": ["rope", "rope+yarn×8"]}
    fig = accuracy_figure(df)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["alibi", "rope", "L = 32 (training length)"] and all(not a.get_legend() for a in fig.axes)
    written = plot_accuracy(df, tmp_path / "accuracy_vs_length.png")
    assert [p.name for p in written] == ["accuracy_vs_length.png", "accuracy_vs_length_rope.png"]


def test_a_trained_configuration_of_a_scheme_is_drawn_as_trained_never_as_a_variant_of_it(tmp_path):
    """layered trained with window=16 and stickbreaking with and without its remainder are models as trained: they
    are in accuracy_vs_length.png (solid lines, a shade of the scheme's colour) and get no "variants" figure; only
    rope's eval-time variant (as_trained False) is drawn broken, in rope's own figure."""
    from pe_bench.plots import accuracy_figure, plot_accuracy, style_for, variant_families

    df = frame(rows("layered[window=16]", [396, 10, 0, 0]), rows("stickbreaking", [396, 300, 100, 0]),
               rows("stickbreaking[remainder=False]", [396, 200, 50, 0]), rows("rope", [396, 100, 0, 0]),
               rows("rope+yarn×8", [396, 300, 200, 100]))
    df["as_trained"] = df["label"] != "rope+yarn×8"
    assert variant_families(df) == {"rope": ["rope", "rope+yarn×8"]}
    fig = accuracy_figure(df)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["layered[window=16]", "rope", "stickbreaking", "stickbreaking[remainder=False]",
                      "L = 32 (training length)"]
    lines = {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}
    assert all(lines[n].get_linestyle() == "-" and lines[n].get_markerfacecolor() != "none"
               for n in ("layered[window=16]", "stickbreaking[remainder=False]"))
    assert style_for("stickbreaking[remainder=False]", variant=False)["color"] != style_for("stickbreaking")["color"]
    assert "another configuration" in fig._suptitle.get_text() and "broken line" not in fig._suptitle.get_text()
    written = plot_accuracy(df, tmp_path / "accuracy_vs_length.png")
    assert [p.name for p in written] == ["accuracy_vs_length.png", "accuracy_vs_length_rope.png"]


def test_the_perplexity_beside_the_leaderboard_is_the_committed_one_for_every_seed_of_a_scheme():
    """results/leaderboard's last column for ALiBi and NoPE from their committed language-model runs alone (all
    seeds): the perplexity at 8L over L, paired over the seeds (non-overlapping: the same tokens at both lengths),
    per training length; no context value, as their sliding pass had no warm-up (other tokens at L and 8L)."""
    from pathlib import Path

    from pe_bench.report.collect import collect_all
    from pe_bench.report.leaderboard import perplexity_column, perplexity_columns
    from pe_bench.runs import Run

    runs = sorted((Path(__file__).resolve().parents[1] / "results" / "default" / "runs").glob("*-tiny-shakespeare-L64-*"))
    runs = [Run(p) for p in runs if p.name.split("-")[0] in ("alibi", "nope")]
    assert len(runs) == 6
    t = perplexity_columns(collect_all(runs))
    assert list(t.columns) == [perplexity_column(8, 64)] == ["perplexity 8L/L (L=64)"]
    assert {"alibi", "nope", "alibi+logn"} <= set(t.index)  # the schemes and their eval-time variants
    assert round(float(t.loc["alibi", perplexity_column(8, 64)]), 3) == 0.983
    assert round(float(t.loc["nope", perplexity_column(8, 64)]), 3) == 1.740  # exp of the mean log-ratio
    md = (Path(__file__).resolve().parents[1] / "results" / "leaderboard" / "leaderboard.md").read_text()
    committed, inside = {}, False
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| scheme |"):
            inside = cells[-1] == perplexity_column(8, 64)
        elif inside and line.startswith("| "):
            committed.setdefault(cells[0], cells[-1])
    assert "alibi" in committed
    for row in t.index:
        if row in committed:  # rows with task runs too
            assert float(committed[row]) == round(float(t.loc[row, perplexity_column(8, 64)]), 3), row


def test_the_paired_verdicts_are_one_line_per_task_and_length_in_order_counting_zero_verdicts():
    from pe_bench.report.accuracy import verdict_lines

    t = pd.DataFrame({"task": ["passkey", "passkey", "copy", "copy"], "L": [32, 32, 32, 32],
                      "verdict": ["lower", "indistinguishable", "higher", "higher"]})
    assert verdict_lines(t, "rope", "alibi") == [
        "copy (L=32): rope higher at 2, lower at 0, indistinguishable at 0 of 2 lengths than alibi (paired, 95 %)",
        "passkey (L=32): rope higher at 0, lower at 1, indistinguishable at 1 of 2 lengths than alibi (paired, 95 %)"]


def test_compare_over_several_seeds_is_a_t_interval_without_a_mcnemar_p_in_the_named_columns():
    a = rows("alibi", [396, 380, 200, 10]) + rows("alibi", [398, 360, 220, 30], seed=1)
    b = rows("rope", [396, 100, 0, 0]) + rows("rope", [394, 120, 20, 10], seed=1)
    t = compare_accuracy(acc(frame(a, b)), "alibi", "rope")
    assert list(t.columns) == ["task", "L", "L_eval", "alibi", "rope", "difference", "95% interval", "only alibi",
                               "only rope", "McNemar p", "method", "seeds", "verdict"]
    two = t.iloc[1]  # 2L: (95.0 − 25.0 + 90.0 − 30.0) / 2 points
    assert (two["alibi"], two["rope"], two["difference"]) == ("92.5", "27.5", "65.0")
    assert two["McNemar p"] == "" and two["method"] == "t, 2 seeds" and two["seeds"] == "0,1"
    assert two["95% interval"].startswith("[") and two["only alibi"] == 280 + 240


def test_compare_joins_a_cells_depths_in_depth_order_and_leaves_out_a_cell_without_its_heldout_hash():
    def depths(label: str, solved: dict[str, int], order: list[str]) -> list[dict]:
        return [{"task": "passkey", "label": label, "scheme": label, "L_train": 32, "L_eval": 64, "seed": 0,
                 "depth": d, "exact_match": solved[d] / 200, "token_accuracy": solved[d] / 200, "solved": solved[d],
                 "examples": 200, "status": "ok", "chance": 0.0, "heldout": f"h{d}", "run": f"{label}-0",
                 "outcomes": "x" * solved[d] + "." * (200 - solved[d])} for d in order]

    a = depths("alibi", {"0.0": 200, "1.0": 100}, ["1.0", "0.0"])
    b = depths("rope", {"0.0": 200, "1.0": 0}, ["0.0", "1.0"])
    t = compare_accuracy(acc(frame(a, b)), "alibi", "rope")
    # 400 examples, paired depth by depth whatever the rows' order: alibi alone solves 100 at depth 1
    assert (t.iloc[0]["alibi"], t.iloc[0]["rope"], t.iloc[0]["only alibi"], t.iloc[0]["only rope"]) == (
        "75.0", "50.0", 100, 0)
    assert t.iloc[0]["method"] == "McNemar, 400 examples"
    b[1]["heldout"] = ""  # a row without the hash of its held-out examples: never paired
    with pytest.raises(ConfigError, match="no number or no per-example outcomes there"):
        compare_accuracy(acc(frame(a, b)), "alibi", "rope")


def _committed_alibi():
    """The committed ALiBi language-model runs at L = 64 (three seeds), collected."""
    from pathlib import Path

    from pe_bench.report.collect import collect_all
    from pe_bench.runs import Run

    runs = (Path(__file__).resolve().parents[1] / "results" / "default" / "runs").glob("alibi-tiny-shakespeare-L64-*")
    return collect_all([Run(p) for p in sorted(runs)])


def test_the_perplexity_beside_the_leaderboard_is_the_asked_splits_with_that_splits_context_value():
    """The committed one-seed ALiBi run of results/paper (sliding with a warm-up: the same tokens at L and 8L), its
    rows copied as a test split whose losses at 8L are one nat higher per token (every window at 512): each
    split's paired ratio and context value are its own."""
    from dataclasses import replace
    from pathlib import Path

    import numpy as np

    from pe_bench.report.collect import collect_all
    from pe_bench.report.leaderboard import context_column, perplexity_column, perplexity_columns
    from pe_bench.runs import Run

    runs = (Path(__file__).resolve().parents[1] / "results" / "paper" / "runs").glob("alibi-tiny-shakespeare-L64-*")
    col = collect_all([Run(p) for p in runs])
    df = col.df
    test = df.assign(split="test", ppl=df["ppl"].where(df["L_eval"] != 512, np.e * df["ppl"]))
    windows = dict(col.windows)
    for key, (nll, tok) in col.windows.items():
        moved = (key[0], key[1], "test", *key[3:])
        windows[moved] = (nll + tok * (key[3] == "512"), tok)
    both = replace(col, df=pd.concat([df, test], ignore_index=True), windows=windows)
    ppl, ctx = perplexity_column(8, 64), context_column(64)
    v, t = perplexity_columns(both), perplexity_columns(both, "test")
    assert (v.loc["alibi", ctx], t.loc["alibi", ctx]) == (0.005, 1.005)
    assert t.loc["alibi", ppl] == pytest.approx(np.e * v.loc["alibi", ppl], abs=0.003)  # paired: exp(+1 nat)


def test_rows_evaluated_at_L_alone_have_no_perplexity_ratio_and_no_context_value():
    from dataclasses import replace

    from pe_bench.report.leaderboard import perplexity_column, perplexity_columns

    col = _committed_alibi()
    t = perplexity_columns(replace(col, df=col.df[col.df["L_eval"] == 64]))
    assert t.index.name == "scheme" and list(t.columns) == [perplexity_column(1, 64)]
    assert list(t[perplexity_column(1, 64)]) == ["—", "—"]  # nothing past L: never a flat-looking 1.0


def test_compare_goes_through_every_cell_in_order_naming_each_one_it_cannot_pair():
    a = rows("alibi", [396, 380, 200, 10])
    b = [r for r in rows("rope", [396, 100, 0, 0]) if r["L_eval"] != 32]  # no rope row at L
    b[0] = dict(b[0], seed=1, run="rope-1")  # at 2L: rope has seed 1 only
    b[1]["heldout"] = "other"  # at 4L: scored on other examples
    t = compare_accuracy(acc(frame(a, b).iloc[::-1]), "alibi", "rope")  # rows in any order
    assert list(t["L_eval"]) == [256] and t.iloc[0]["only alibi"] == 10
    assert t.attrs["left_out"] == [
        "copy L=32 at 64: no seed in common (alibi: [0], rope: [1])",
        "copy L=32 at 128: scored on different held-out examples (other task options or corpus)"]
    b[0]["outcomes"] = ""
    t = compare_accuracy(acc(frame(a, b)), "alibi", "rope")
    assert t.attrs["left_out"][0] == ("copy L=32 at 64: a row has no number or no per-example outcomes there "
                                      "(re-evaluate it with `pe-bench eval`)")


def test_the_floor_lines_give_chance_and_the_trivial_baseline_per_task_and_training_length_in_order():
    from pe_bench.report.leaderboard import floor_lines

    def floor(task: str, L: int, chance: float, baseline: float) -> list[dict]:
        return [dict(r, baseline=baseline if r["L_eval"] < 8 * L else float("nan"))
                for r in rows("alibi", [400, 400, 400, 400], L=L, task=task, chance=chance)]

    df = frame(floor("passkey", 64, 0.001, 0.25), floor("passkey", 32, 0.001, 0.5), floor("copy", 32, 0.0, 0.0))
    df.loc[(df["task"] == "copy") & (df["L_eval"] == 256), "chance"] = float("nan")  # not known: '?'
    assert floor_lines(df) == {
        "copy": "Floors, L = 32: chance 0.0 / 0.0 / 0.0 / ? %, trivial baseline 0.0 / 0.0 / 0.0 / ? % at "
                "32 / 64 / 128 / 256 tokens.",
        "passkey": "Floors, L = 32: chance 0.1 / 0.1 / 0.1 / 0.1 %, trivial baseline 50.0 / 50.0 / 50.0 / ? % at "
                   "32 / 64 / 128 / 256 tokens; L = 64: chance 0.1 / 0.1 / 0.1 / 0.1 %, trivial baseline "
                   "25.0 / 25.0 / 25.0 / ? % at 64 / 128 / 256 / 512 tokens."}
    assert list(floor_lines(df)) == ["copy", "passkey"]
    assert floor_lines(df.drop(columns="baseline")) == {}  # runs from before the trivial baseline: no line


def test_an_effective_length_cell_by_status_and_view():
    """The effective view names any row not 'ok' by its status; the absolute view gives lengths to a row that is ok,
    not learnt at L or at chance at L (all with a number at L), never to a diverged one; no length at all is '< L'."""
    def row(status: str, at_L: float = 0.5) -> pd.Series:
        return pd.Series({"status": status, "at_L": at_L, "L": 32, "longest_evaluated": 256,
                          "effective_length": 64, "effective_lo": 32, "effective_hi": 256,
                          "absolute_length": float("nan"), "absolute_lo": None, "absolute_hi": 128})
    assert effective_cell(row("ok")) == "2L [L, ≥ 8L]"
    for status in ("ok", NOT_LEARNT, "at chance at L"):
        assert effective_cell(row(status), "absolute") == "< L [< L, 4L]", status
    for status in (NOT_LEARNT, "at chance at L", "diverged"):
        assert effective_cell(row(status)) == status
    assert effective_cell(row("diverged"), "absolute") == "diverged"
    assert effective_cell(row(NOT_LEARNT, float("nan")), "absolute") == NOT_LEARNT  # no number at L


def test_the_leaderboard_page_has_the_extra_columns_beside_both_summaries_and_each_task_in_name_order(tmp_path):
    """leaderboard.md with columns by scheme beside the effective lengths (the perplexity of the language-model runs):
    a scheme without them reads '—'; each task's section comes in name order whatever the board's row order; a row
    not evaluated at L has '—' for its exact match there; every task without a chance is named."""
    from pe_bench.report.leaderboard import write_leaderboard_files

    df = frame(rows("alibi", [396, 380, 200, 10]), rows("t5", [400, 400, 399, 398]),
               [r for r in rows("nope", [392, 20, 0, 0]) if r["L_eval"] != 32],
               rows("alibi", [396, 380, 200, 10], task="bcount", chance=float("nan")),
               rows("alibi", [396, 396, 200, 10], task="abc", chance=float("nan")))
    extra = pd.DataFrame({"perplexity 8L/L (L=32)": [1.5]}, index=pd.Index(["alibi"], name="scheme"))
    board = leaderboard(df)
    md = leaderboard_markdown(board.iloc[::-1], "t", extra)
    relative, absolute = md.index("**Effective length (relative)**"), md.index("**Effective length (absolute)**")
    for part in (md[relative:absolute], md[absolute:md.index("\n## ")]):
        assert "| scheme | L | abc | bcount | copy | perplexity 8L/L (L=32) |" in part
        assert "| alibi | 32 |" in part and part.split("| alibi | 32 |")[1].split("\n")[0].endswith("| 1.500 |")
        assert part.split("| t5 | 32 |")[1].split("\n")[0].endswith("| — |")
    assert md.index("\n## abc\n") < md.index("\n## bcount\n") < md.index("\n## copy\n")
    assert "| nope | 32 | — | not evaluated at L |" in md
    assert "Chance unknown (the task defines no `chance()`), so 0 is the floor: abc, bcount.\n" in md
    write_leaderboard_files(df, board, tmp_path, "t", extra)
    assert "| perplexity 8L/L (L=32) |" in (tmp_path / "leaderboard.md").read_text()


def test_the_accuracy_page_names_every_number_of_examples_a_task_was_scored_on(tmp_path):
    from pe_bench.report.accuracy import write_accuracy_files

    fewer = [{**r, "examples": 200, "solved": r["solved"] // 2} for r in rows("t5", [400, 400, 399, 398], seed=1)]
    write_accuracy_files(acc(frame(rows("alibi", [396, 380, 200, 10]), fewer)), tmp_path, "t")
    assert "200, 400 held-out examples per length)" in (tmp_path / "accuracy.md").read_text()


def test_a_leaderboard_row_at_chance_at_L_or_not_evaluated_at_L_says_so_and_a_diverged_one_has_no_interval():
    df = frame(rows("rope", [396, 396, 300, 0], task="flipflop", chance=0.995),  # learnt (99 %) but not above chance
               [r for r in rows("nope", [392, 20, 0, 0]) if r["L_eval"] != 32],
               rows("alibi", [0, 0, 0, 0], status="diverged"))
    b = leaderboard(df).set_index("scheme")
    assert b.loc["rope", "status"] == "at chance at L" and pd.isna(b.loc["rope", "effective_length"])
    assert b.loc["nope", "status"] == "not evaluated at L" and b.loc["nope", "interval"] == "Wilson, 400 examples"
    assert b.loc["alibi", "status"] == "diverged" and b.loc["alibi", "interval"] == ""


def test_effective_ratios_are_the_length_over_L_to_four_decimals():
    """Lengths that are not powers of two times L: 1.5L for the effective length, 32/24 for the absolute one."""
    relative = [{**r, "L_eval": n} for r, n in zip(rows("alibi", [396, 390, 0]), (32, 48, 64))]
    absolute = [{**r, "L_train": 24, "L_eval": n} for r, n in zip(rows("t5", [396, 390, 0], L=24), (24, 32, 40))]
    b = leaderboard(frame(relative, absolute)).set_index("scheme")
    assert b.loc["alibi", "effective_ratio"] == 1.5 and b.loc["alibi", "absolute_ratio"] == 1.5
    assert b.loc["t5", "effective_ratio"] == 1.3333 and b.loc["t5", "absolute_ratio"] == 1.3333


def test_accuracy_table_cells_a_row_lacks_its_seed_counts_and_the_interval_of_its_full_seed_cells():
    """'—' at a length another row was evaluated at; '(2 seeds)' in a row of three; the interval named by the cells
    with all the row's seeds (not the first cell's); none for a row with no number."""
    df = frame(rows("t5", [400, 380, 300, 10]), rows("t5", [398, 370, 320, 30], seed=1),
               rows("t5", [398, 370, 320], seed=2), rows("alibi", [396, 200]),
               rows("rope", [396, 380, 300, 100]), [r for r in rows("rope", [396, 380, 300, 100], seed=1)
                                                    if r["L_eval"] != 32],
               rows("nope", [0, 0, 0, 0], status="diverged"))
    t = accuracy_table(df, "copy")
    assert t.loc[("t5", 32), "256"].endswith(" (2 seeds)") and t.loc[("t5", 32), "seeds"] == "3"
    assert list(t.loc[("alibi", 32), ["128", "256"]]) == ["—", "—"]
    assert t.loc[("rope", 32), "32"].endswith("(1 seed)") and t.loc[("rope", 32), "interval"] == "t, 2 seeds"
    assert t.loc[("nope", 32), "interval"] == "" and t.loc[("nope", 32), "32"] == "diverged"


def test_an_evaluation_variant_whose_task_has_no_number_at_L_keeps_its_own_cell_at_L():
    df = frame([r for r in rows("rope", [396, 390, 300, 100], task="flipflop") if r["L_eval"] != 32],
               rows("rope", [100, 40, 10, 0], task="flipflop[ignore_prob=0.1]"))
    t = accuracy_table(df, "flipflop[ignore_prob=0.1]")
    assert t.loc[("rope", 32), "32"].startswith("25.0 [") and t.loc[("rope", 32), "64"] == "no number at L"


def test_a_row_exactly_at_the_learnt_threshold_is_learnt_and_one_missing_a_seed_at_L_has_no_number_there():
    """Exact match at L of exactly LEARNT_AT_L (360 of 400) is learnt; a row whose second seed has no number at L
    (nan there, numbers beyond) has no exact match at L, so its beyond-L cells say so instead of borrowing the first
    seed's."""
    from pe_bench.report.accuracy import LEARNT_AT_L, NO_L

    assert 360 / N == LEARNT_AT_L
    gap = [{**r, "status": "nonfinite", "exact_match": float("nan")} if r["L_eval"] == 32 else r
           for r in rows("t5", [398, 370, 320, 30], seed=1)]
    df = frame(rows("alibi", [360, 300, 100, 0]), rows("t5", [400, 380, 300, 10]), gap)
    t = accuracy_table(df, "copy")
    assert t.loc[("alibi", 32), "64"].startswith("75.0 [")
    assert t.loc[("t5", 32), "32"] == "nan" and list(t.loc[("t5", 32), ["64", "128", "256"]]) == [NO_L] * 3


def test_an_evaluation_variant_whose_option_value_has_brackets_is_learnt_when_its_task_is():
    df = frame(rows("rope", [396, 390, 300, 100]), rows("rope", [100, 40, 10, 0], task="copy[keys=[1, 2]]"))
    assert accuracy_table(df, "copy[keys=[1, 2]]").loc[("rope", 32), "64"].startswith("10.0 [")


def test_the_status_order_is_alphabetical():
    """per_seed takes a cell's worst status by STATUS_ORDER; that the order is also alphabetical is what
    scripts/mutation_equivalent.toml relies on to call a plain min() equivalent: a new status breaking it must say so."""
    from pe_bench.report.accuracy import STATUS_ORDER

    assert list(STATUS_ORDER) == sorted(STATUS_ORDER)


def test_cells_have_the_documented_columns_whether_or_not_any_cell_has_a_number():
    from pe_bench.report.accuracy import cells

    columns = ["label", "L_train", "L_eval", "seeds", "at_L", "status", "mean", "std", "lo", "hi", "method", "examples"]
    for df in (frame(rows("alibi", [396, 200])), frame(rows("alibi", [0, 0], status="diverged"))):
        assert list(cells(df, "copy").columns) == columns
        assert cells(df, "copy")["examples"].tolist() == [N, N]


def test_the_written_accuracy_files_judge_an_evaluation_variant_learnt_on_its_trained_task(tmp_path):
    """accuracy.csv/.md as `pe-bench report` writes them, not only the table function: the variant's beyond-L cells
    are numbers when the task it was trained on is learnt at L (the flip-flop densities of results/tasks)."""
    from pe_bench.report.accuracy import write_accuracy_files

    df = frame(rows("rope", [396, 390, 300, 100], task="flipflop"),
               rows("rope", [300, 40, 10, 0], task="flipflop[ignore_prob=0.1]"))
    write_accuracy_files(Accuracy(df), tmp_path, "t")
    wide = pd.read_csv(tmp_path / "accuracy.csv")
    variant = wide[(wide["task"] == "flipflop[ignore_prob=0.1]") & (wide["metric"] == "exact_match")].iloc[0]
    assert variant["64"].startswith("10.0") and f"| {NOT_LEARNT} |" not in (tmp_path / "accuracy.md").read_text()
    seeds = pd.read_csv(tmp_path / "accuracy_seeds.csv")  # each seed's number, in results.json too
    assert len(seeds) == 8 and seeds.loc[(seeds["task"] == "flipflop") & (seeds["L_eval"] == 256), "exact_match"].item() == 0.25


def test_a_row_with_fewer_than_three_seeds_is_marked_exploratory_and_the_seeds_range_is_beside_the_mean():
    """T5's passkey at 2L was 99.8 / 95.2 / 16.1 % over seeds 0–2: the mean-based effective length hides that one
    seed keeps it to 2L and another only to L; the range over seeds shows both. One seed: marked everywhere."""
    df = frame(rows("t5", [400, 399, 200, 0], seed=0), rows("t5", [400, 381, 100, 0], seed=1),
               rows("t5", [400, 64, 0, 0], seed=2), rows("cope", [400, 400, 400, 400]))
    b = leaderboard(df).set_index("scheme")
    t5, cope = b.loc["t5"], b.loc["cope"]
    assert t5["seed_lengths"] == "64 / 64 / 32" and (t5["seed_min"], t5["seed_max"]) == (32, 64)
    assert not t5["exploratory"] and cope["exploratory"] and cope["seed_lengths"] == "256"
    md = leaderboard_markdown(leaderboard(df), "t")
    assert "| cope | 32 | ≥ 8L [≥ 8L, ≥ 8L] (1 seed) |" in md  # the summary: marked
    assert "| t5 | 32 | 100.0 [99.7, 100.0] | L [L, 4L] | L – 2L |" in md and "| 1 (exploratory) |" in md
    t = accuracy_table(df, "copy")
    assert t.loc[("cope", 32), "exploratory"] == "yes" and t.loc[("t5", 32), "exploratory"] == ""

"""The trained-long headroom: what fraction of what training at L·r gains at L·r a model trained at L recovers."""

import math

import numpy as np
import pandas as pd
import pytest

from pe_bench.report.collect import Collected
from pe_bench.report.headroom import headroom, markdown_table


def rows(scheme: str, L: int, losses: dict[int, list[float]], mode: str = "sliding", seeds: list[int] | None = None,
         **changed) -> list[dict]:
    """Eval rows of one configuration: losses[L_eval] = one mean loss per seed (seeds 0, 1, … unless given); the
    same model, data and token budget and sliding settings as every other configuration unless ``changed``."""
    base = {"setup": "tiny shakespeare", "tokens_trained": 2_048_000, "warmup": 512, "budget": 16384, "stride": 16,
            "config": f"{scheme}-{L}"}
    return [{"run": f"{scheme}-{L}-{s}", "scheme": scheme, "label": scheme, "base_scheme": scheme.split("+")[0],
             "scheme_id": scheme.split("+")[0], "L_train": L, "L_eval": n, "mode": mode, "split": "validation",
             "seed": s, "status": "ok", "ppl": math.exp(x), "tokens_scored": 16384, **base, **changed}
            for n, per_seed in losses.items() for s, x in zip(seeds or range(len(per_seed)), per_seed)]


def test_the_fraction_is_the_gain_past_L_over_the_trained_long_gain_paired_by_seed():
    short = Collected(pd.DataFrame(
        rows("alibi", 64, {64: [2.0, 2.1, 2.2], 512: [1.9, 2.0, 2.1]})  # gains 0.1 in every seed
        + rows("nope", 64, {64: [2.2, 2.2, 2.2], 512: [3.0, 3.2, 3.4]})  # breaks
        + rows("alibi", 64, {64: [9.0] * 3, 512: [9.0] * 3}, mode="nonoverlapping")))  # never read
    long = Collected(pd.DataFrame(
        rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]}) + rows("rope", 512, {512: [1.5, 1.5, 1.5], 64: [1.8, 1.8, 1.8]})))
    t = headroom(short, long).set_index("scheme")
    a = t.loc["alibi"]
    assert a["reference"] == "alibi trained at 512" and a["L_eval"] == 512 and a["seeds"] == 3
    assert a["gained"] == pytest.approx(0.1) and a["headroom"] == pytest.approx(0.4)
    assert a["fraction"] == pytest.approx(0.25) and a["lo"] == pytest.approx(0.25) == a["hi"]  # the same in every pair
    assert "nope" not in t.index  # no NoPE reference: another scheme's never stands in
    md = markdown_table(headroom(short, long))
    assert ("| alibi | 64 | 512 | alibi trained at 512 | 2,048,000 | 2.100 | 2.000 | 1.700 | +0.100 | "
            "+0.400 [+0.400, +0.400] (33.0 %) | 25 % [25 %, 25 %] | 3 |") in md  # 1 − e^−0.4: the perplexity's 33 %
    long = Collected(pd.DataFrame(rows("nope", 512, {512: [1.5, 1.5, 1.5], 64: [1.8, 1.8, 1.8]})))
    n = headroom(short, long).set_index("scheme").loc["nope"]
    assert n["fraction"] == pytest.approx(np.mean([-0.8 / 0.7, -1.0 / 0.7, -1.2 / 0.7]))
    assert n["lo"] < n["fraction"] < n["hi"] < 0


def test_one_paired_seed_cannot_pass_the_gate_and_unmatched_lengths_give_no_row():
    short = Collected(pd.DataFrame(rows("rope", 64, {64: [2.0], 128: [2.5], 256: [3.0]})))
    long = Collected(pd.DataFrame(rows("rope", 128, {128: [1.8, 1.7], 64: [2.1, 2.0]})))
    t = headroom(short, long)
    assert t["L_eval"].tolist() == [128]  # no reference trained at 256
    r = t.iloc[0]
    assert r["seeds"] == 1 and math.isnan(r["fraction"]) and r["gate"] == "failed"
    assert r["headroom"] == pytest.approx(0.2) and "1 paired seed without per-window losses: no interval" in r["gate_detail"]
    assert "| — (reference fails the gate) | 1 |" in markdown_table(t)


def test_a_reference_worse_at_short_context_or_not_using_its_context_fails_the_gate_with_its_numbers():
    short = Collected(pd.DataFrame(rows("alibi", 64, {64: [2.0, 2.1, 2.2], 512: [1.9, 2.0, 2.1]})))
    for at_L, why in (([2.3, 2.4, 2.6], "worse at equal short context"),
                      ([1.6, 1.7, 1.8], "its context value is not below 0"), (None, "not evaluated at L")):
        losses = {512: [1.6, 1.7, 1.8], **({64: at_L} if at_L else {})}
        r = headroom(short, Collected(pd.DataFrame(rows("alibi", 512, losses)))).iloc[0]
        assert r["gate"] == "failed" and r["gate_detail"].startswith(why) and math.isnan(r["fraction"])
        assert r["headroom"] == pytest.approx(0.4)  # its numbers are listed, never used


def test_a_report_of_short_and_trained_long_runs_writes_the_headroom_table(tmp_path):
    from pe_bench.report.headroom import split_by_length, write_headroom

    def tagged(r: dict) -> dict:
        return {**r, "model": "tiny", "data": "shakespeare"}

    short = [tagged(r) for r in rows("alibi", 64, {64: [2.0, 2.1], 512: [1.9, 2.0]})]
    long = [tagged(r) for r in rows("alibi", 512, {512: [1.6, 1.7], 64: [1.9, 2.0]})]
    assert split_by_length(Collected(pd.DataFrame(short))) is None  # no reference: no table
    assert write_headroom(Collected(pd.DataFrame(short)), tmp_path, "t") == []
    written = write_headroom(Collected(pd.DataFrame(short + long)), tmp_path, "t")
    assert [p.name for p in written] == ["headroom.csv", "headroom.md"]
    t = pd.read_csv(tmp_path / "headroom.csv")
    assert t["fraction"].round(6).tolist() == [0.25] and "fraction recovered" in (tmp_path / "headroom.md").read_text()


def test_a_reference_no_better_than_the_short_model_at_L_leaves_no_headroom_and_no_fraction():
    short = Collected(pd.DataFrame(rows("nope", 64, {64: [2.0, 2.0], 512: [2.6, 2.7]})))
    long = Collected(pd.DataFrame(rows("nope", 512, {512: [2.3, 1.9], 64: [2.6, 2.2]})))  # worse than 2.0 in seed 0
    r = headroom(short, long).iloc[0]
    assert math.isnan(r["fraction"]) and r["headroom"] == pytest.approx(-0.1)
    assert "| -0.100 [-2.641, +2.441] (-10.5 %) | no headroom | 2 |" in markdown_table(headroom(short, long))


SHORT = rows("alibi", 64, {64: [2.0, 2.1, 2.2], 512: [1.9, 2.0, 2.1]})


def test_a_short_seed_is_never_paired_with_a_reference_of_another_seed():
    long = rows("alibi", 512, {512: [1.6, 1.7], 64: [1.9, 2.0]}, seeds=[5, 6])
    r = headroom(Collected(pd.DataFrame(SHORT)), Collected(pd.DataFrame(long))).iloc[0]  # named, with no number
    assert r["seeds"] == 0 and r["note"] == "no seed in common (short model: 0, 1, 2; reference: 5, 6)"
    assert math.isnan(r["headroom"]) and math.isnan(r["fraction"]) and r["gate"] == "failed"
    long = rows("alibi", 512, {512: [1.6, 1.7], 64: [1.9, 2.0]}, seeds=[1, 6])
    r = headroom(Collected(pd.DataFrame(SHORT)), Collected(pd.DataFrame(long))).iloc[0]
    assert r["seeds"] == 1 and r["long"] == pytest.approx(1.6) and r["note"] == "seeds 0, 2, 6 unpaired"


@pytest.mark.parametrize("changed", [{"setup": "2 layers"}, {"tokens_trained": 1_024_000}, {"scheme_id": "alibi[x]"},
                                     {"stride": 32}, {"warmup": 1024}, {"budget": 8192}])
def test_a_reference_of_another_model_budget_scheme_or_sliding_pass_bounds_nothing(changed):
    long = rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]}, **changed)
    t = headroom(Collected(pd.DataFrame(SHORT)), Collected(pd.DataFrame(long)))
    assert t.empty and t.attrs["unpaired"] == ["alibi trained at 512"]  # named, never silently dropped
    assert "- alibi trained at 512\n" in markdown_table(t) + "\n"


def test_two_reference_configurations_are_two_rows_never_pooled_as_seeds():
    long = (rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]}, config="a", label="alibi · lr=1")
            + rows("alibi", 512, {512: [1.5, 1.5, 1.5], 64: [1.8, 1.8, 1.8]}, config="b", label="alibi · lr=2"))
    t = headroom(Collected(pd.DataFrame(SHORT)), Collected(pd.DataFrame(long)))
    assert t["reference"].tolist() == ["alibi · lr=1 trained at 512", "alibi · lr=2 trained at 512"]
    assert t["seeds"].tolist() == [3, 3] and t["long"].round(6).tolist() == [1.7, 1.5]


def test_a_second_evaluation_stride_is_not_a_second_seed():
    short = SHORT + rows("alibi", 64, {64: [2.0, 2.1, 2.2], 512: [1.0, 1.0, 1.0]}, stride=32)
    long = rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]})
    t = headroom(Collected(pd.DataFrame(short)), Collected(pd.DataFrame(long)))
    assert len(t) == 1 and t.iloc[0]["seeds"] == 3 and t.iloc[0]["fraction"] == pytest.approx(0.25)


def test_a_seed_without_a_finite_number_is_named_by_its_status():
    short = [dict(r) for r in SHORT]
    next(r for r in short if r["seed"] == 2 and r["L_eval"] == 512).update(status="nonfinite", ppl=float("nan"))
    long = rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]})
    r = headroom(Collected(pd.DataFrame(short)), Collected(pd.DataFrame(long))).iloc[0]
    assert math.isnan(r["fraction"]) and r["note"] == "nonfinite (seed 2)"


@pytest.mark.parametrize("side", ["short", "long"])
def test_a_diverged_seed_on_either_side_gives_no_fraction_never_a_smaller_pairing(side):
    short, long = [dict(r) for r in SHORT], rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]})
    broken = next(r for r in (short if side == "short" else long) if r["seed"] == 1 and r["L_eval"] == 512)
    broken.update(status="diverged", ppl=float("nan"))
    r = headroom(Collected(pd.DataFrame(short)), Collected(pd.DataFrame(long))).iloc[0]
    assert math.isnan(r["fraction"]) and r["note"] == "diverged (seed 1)" and r["seeds"] == 3
    assert "| — | — | 3 | diverged (seed 1) |" in markdown_table(pd.DataFrame([r]))


def test_sliding_budgets_that_differ_between_a_references_lengths_are_paired_per_budget():
    long = rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]}) + rows("alibi", 512, {256: [1.9, 1.9, 1.9]}, budget=8192)
    t = headroom(Collected(pd.DataFrame(SHORT)), Collected(pd.DataFrame(long)))
    assert t["L_eval"].tolist() == [512] and t.iloc[0]["fraction"] == pytest.approx(0.25)


def test_every_report_states_its_precondition_in_one_line():
    from pe_bench.report.headroom import headroom_table, precondition

    def tagged(rs: list[dict]) -> list[dict]:
        return [{**r, "model": "tiny", "data": "shakespeare"} for r in rs]

    passing = rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]})
    failing = rows("alibi", 512, {512: [1.6, 1.7, 1.8]})  # not evaluated at L
    said = {name: precondition(headroom_table(Collected(pd.DataFrame(tagged(SHORT + long)))))
            for name, long in (("none", []), ("failing", failing), ("passing", passing))}
    assert said["none"].startswith("**Precondition**: no trained-long reference among these runs")
    assert said["failing"].startswith("**Precondition**: no trained-long reference passes its gate")
    assert "not how much of a longer context a scheme could use" in said["failing"]
    assert said["passing"].startswith("**Precondition**: 1 trained-long reference passes its gate")
    assert all(line.count("\n") == 0 for line in said.values())


def test_the_headroom_curve_is_drawn_against_training_tokens_once_a_scheme_has_two_budgets(tmp_path):
    pytest.importorskip("matplotlib")
    from pe_bench.plots import plot_headroom

    one = pd.DataFrame({"scheme": ["rope"], "base_scheme": ["rope"], "L": [64], "L_eval": [256], "tokens": [2_048_000],
                        "short_at_L": [1.6], "long": [1.5]})
    assert plot_headroom(one, tmp_path / "a.png") is None and not (tmp_path / "a.png").exists()
    two = pd.concat([one, one.assign(tokens=4_096_000, long=1.4)], ignore_index=True)
    assert plot_headroom(two, tmp_path / "b.png") == tmp_path / "b.png"
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_headroom(two, tmp_path / "c.png") and (tmp_path / "b.png").read_bytes() == (tmp_path / "c.png").read_bytes()


def _one_seed(tokens: int, worse_at_L: float, context_value: float) -> tuple[Collected, Collected]:
    """One seed of a short model (L = 64) and its reference trained at 256, sliding windows of 16 scored tokens on
    ``tokens`` tokens, with per-window losses: the reference's loss at 64 is the short model's + ``worse_at_L``, its
    loss at 256 its own at 64 + ``context_value`` (each window with its own noise)."""
    from pe_bench.report.files import window_key

    rng = np.random.default_rng(0)
    n = tokens // 16
    tok = np.full(n, 16.0)
    hard = rng.gamma(4.0, 0.5, n)
    losses = {("alibi", 64, 64): hard, ("alibi", 64, 256): hard + 0.01,
              ("alibi", 256, 64): hard + worse_at_L + rng.normal(0, 0.05, n)}
    losses[("alibi", 256, 256)] = losses[("alibi", 256, 64)] + context_value + rng.normal(0, 0.05, n)
    frames = {L: Collected(pd.DataFrame([rows(scheme, L, {at: [float(loss.mean())]}, budget=tokens,
                                              tokens_scored=tokens)[0] for (scheme, L_, at), loss in losses.items()
                                         if L_ == L])) for L in (64, 256)}
    windows = {window_key(r.run, r): (losses[("alibi", int(r.L_train), int(r.L_eval))] * tok, tok)
               for c in frames.values() for r in c.df.itertuples()}
    return Collected(frames[64].df, windows), Collected(frames[256].df, windows)


def test_one_seed_passes_or_fails_the_gate_by_a_block_bootstrap_over_its_windows():
    """One seed has no t interval, but its per-window losses give paired contrasts over blocks of 16K tokens: a
    reference no worse at L whose context value is clearly negative passes on ten blocks, says so, and fails on one
    block (no interval); a clearly worse one fails on ten."""
    r = headroom(*_one_seed(163840, 0.0, -0.05)).iloc[0]
    assert r["gate"] == "passed" and "(1 seed, block bootstrap over 163,840 tokens)" in r["gate_detail"]
    assert r["fraction"] == pytest.approx(-0.01 / 0.05, rel=0.2)
    assert r["lo"] < r["fraction"] < r["hi"] and r["hi"] - r["lo"] < 0.5  # the same blocks' ratio, bootstrapped
    assert f"[{100 * r['lo']:.0f} %, {100 * r['hi']:.0f} %]" in markdown_table(pd.DataFrame([r]))
    assert r["headroom_lo"] < 0.05 < r["headroom_hi"] and r["headroom_hi"] - r["headroom_lo"] < 0.02  # one seed
    r = headroom(*_one_seed(16384, 0.0, -0.05)).iloc[0]
    assert r["gate"] == "failed" and "fewer than ten blocks of 16,384: no interval" in r["gate_detail"]
    r = headroom(*_one_seed(163840, 0.05, -0.05)).iloc[0]
    assert r["gate"] == "failed" and r["gate_detail"].startswith("worse at equal short context: at L +0.050")


def test_a_one_seed_reference_beside_a_short_model_of_several_seeds_is_gated_on_the_seed_they_share():
    """The short model has seeds 0 and 1, its reference seed 0 only: the gate and the headroom's interval come from
    seed 0's per-window losses (the same as with seed 0 alone), and seed 1 is named as unpaired."""
    from pe_bench.report.files import window_key

    short, long = _one_seed(163840, 0.0, -0.05)
    alone = headroom(short, long).iloc[0]
    other = short.df.assign(seed=1, run="alibi-64-1", ppl=short.df["ppl"] * 1.01)
    windows = dict(short.windows)
    windows.update({window_key(r.run, r): (short.windows[window_key("alibi-64-0", r)][0] * 1.01,
                                           short.windows[window_key("alibi-64-0", r)][1])
                    for r in other.itertuples()})
    both = Collected(pd.concat([short.df, other], ignore_index=True), windows)
    r = headroom(both, long).iloc[0]
    assert r["gate"] == "passed" and r["gate_detail"] == alone["gate_detail"]
    assert (r["headroom_lo"], r["headroom_hi"]) == pytest.approx((alone["headroom_lo"], alone["headroom_hi"]))
    assert "1" in r["note"] and "unpaired" in r["note"]


def test_a_reference_beside_two_short_models_is_gated_against_each_and_the_gates_say_which():
    """The gate holds a reference against a short model at L, so a reference beside two short recipes has two gates,
    each listed under the table with the short model it was checked against."""
    short = SHORT + rows("alibi", 64, {64: [2.3, 2.4, 2.5], 512: [2.2, 2.3, 2.4]}, config="alibi-64-lr",
                         label="alibi · lr=3")
    long = rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [2.15, 2.25, 2.35]})
    t = headroom(Collected(pd.DataFrame(short)), Collected(pd.DataFrame(long)))
    assert t.set_index("scheme")["gate"].to_dict() == {"alibi": "failed", "alibi · lr=3": "passed"}
    md = markdown_table(t)
    assert "- alibi trained at 512 (against alibi at L = 64): failed — worse at equal short context" in md
    assert "- alibi trained at 512 (against alibi · lr=3 at L = 64): passed" in md


def test_only_the_final_weights_of_either_side_are_paired():
    """A --partial evaluation (an earlier step's weights) of the reference is not its trained-long number: the rows
    of the run's last step are used, for the headroom and the gate."""
    long = (rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]}, step=4000, steps=4000)
            + rows("alibi", 512, {512: [3.0, 3.0, 3.0], 64: [3.5, 3.5, 3.5]}, step=1000, steps=4000))
    r = headroom(Collected(pd.DataFrame(SHORT)), Collected(pd.DataFrame(long))).iloc[0]
    assert r["long"] == pytest.approx(1.7) and r["gate"] == "passed" and r["fraction"] == pytest.approx(0.25)
    only_partial = rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [1.9, 2.0, 2.1]}, step=1000, steps=4000)
    assert headroom(Collected(pd.DataFrame(SHORT)), Collected(pd.DataFrame(only_partial))).empty


def test_a_seed_without_headroom_says_so_even_where_the_mean_has_some():
    long = rows("alibi", 512, {512: [1.6, 1.7, 2.3], 64: [1.9, 2.0, 2.6]})  # seed 2: worse than the short model's 2.2
    r = headroom(Collected(pd.DataFrame(SHORT)), Collected(pd.DataFrame(long))).iloc[0]
    assert r["headroom"] > 0 and math.isnan(r["fraction"]) and r["note"] == "no headroom in seed 2"
    assert "| no headroom | 3 | no headroom in seed 2 |" in markdown_table(pd.DataFrame([r]))


def test_a_model_trained_at_an_intermediate_length_gets_its_own_row_against_every_longer_reference():
    from pe_bench.report.headroom import headroom_table

    def tagged(rs: list[dict]) -> list[dict]:
        return [{**r, "model": "tiny", "data": "shakespeare"} for r in rs]

    d = pd.DataFrame(tagged(rows("alibi", 64, {64: [2.0, 2.1], 128: [1.95, 2.05], 512: [1.9, 2.0]})
                            + rows("alibi", 128, {128: [1.8, 1.9], 64: [1.9, 2.0], 512: [1.75, 1.85]})
                            + rows("alibi", 512, {512: [1.6, 1.7], 64: [1.9, 2.0], 128: [1.7, 1.8]})))
    t = headroom_table(Collected(d)).set_index(["L", "L_eval"])
    assert sorted(t.index) == [(64, 128), (64, 512), (128, 512)]
    r = t.loc[(128, 512)]
    assert r["reference"] == "alibi trained at 512" and r["gained"] == pytest.approx(0.05)
    assert r["headroom"] == pytest.approx(0.2) and t.attrs["unpaired"] == []


def test_a_headroom_whose_interval_holds_0_claims_no_fraction():
    short = Collected(pd.DataFrame(rows("rope", 64, {64: [2.0, 2.1, 2.2], 256: [4.0, 4.2, 4.4]})))  # breaks past L
    long = Collected(pd.DataFrame(rows("rope", 256, {256: [1.95, 1.85, 2.15], 64: [2.1, 2.0, 2.3]})))  # passes
    t = headroom(short, long)
    r = t.iloc[0]
    assert r["gate"] == "passed" and r["headroom_lo"] < 0 < r["headroom_hi"] and math.isinf(r["lo"])
    assert r["fraction"] < -10  # the point ratio exists, but a ratio over a headroom that may be 0 means nothing
    assert "| — (headroom not resolved above 0) | 3 |" in markdown_table(t)


def test_a_row_that_loses_more_past_L_than_the_whole_headroom_says_so_beside_its_fraction():
    """A scheme that breaks past L (loss 2.1 at L, 4.2 at 4L) against a passing reference 0.2 nats better: its
    fraction recovered is far below −100 %, which is correct and is labelled as what it means."""
    short = Collected(pd.DataFrame(rows("rope", 64, {64: [2.0, 2.1, 2.2], 256: [4.0, 4.2, 4.4]})))
    long = Collected(pd.DataFrame(rows("rope", 256, {256: [1.8, 1.9, 2.0], 64: [1.95, 2.05, 2.15]})))
    t = headroom(short, long)
    r = t.iloc[0]
    assert r["gate"] == "passed" and r["hi"] < -1 and r["fraction"] == pytest.approx(-2.1 / 0.2)
    assert f"{100 * r['fraction']:.0f} % [" in markdown_table(t)
    assert "(the longer context costs more than the whole headroom) | 3 |" in markdown_table(t)
    ok = headroom(Collected(pd.DataFrame(SHORT)), Collected(pd.DataFrame(rows("alibi", 512, {512: [1.6, 1.7, 1.8],
                                                                                       64: [1.9, 2.0, 2.1]}))))
    assert "costs more than the whole headroom" not in markdown_table(ok)

"""The trained-long headroom: what fraction of what training at L·r gains at L·r a model trained at L recovers."""

import math

import numpy as np
import pandas as pd
import pytest

from pe_bench.report.collect import Collected
from pe_bench.report.headroom import headroom, markdown_table


def rows(scheme: str, L: int, losses: dict[int, list[float]], mode: str = "sliding") -> list[dict]:
    """Eval rows of one configuration: losses[L_eval] = one mean loss per seed."""
    return [{"run": f"{scheme}-{L}-{s}", "scheme": scheme, "label": scheme, "base_scheme": scheme.split("+")[0],
             "L_train": L, "L_eval": n, "mode": mode, "split": "validation", "stride": 16, "seed": s,
             "status": "ok", "ppl": math.exp(x), "tokens_scored": 16384}
            for n, per_seed in losses.items() for s, x in enumerate(per_seed)]


def test_the_fraction_is_the_gain_past_L_over_the_trained_long_gain_paired_by_seed():
    short = Collected(pd.DataFrame(
        rows("alibi", 64, {64: [2.0, 2.1, 2.2], 512: [1.9, 2.0, 2.1]})  # gains 0.1 in every seed
        + rows("nope", 64, {64: [2.2, 2.2, 2.2], 512: [3.0, 3.2, 3.4]})  # breaks
        + rows("alibi", 64, {64: [9.0] * 3, 512: [9.0] * 3}, mode="nonoverlapping")))  # never read
    long = Collected(pd.DataFrame(
        rows("alibi", 512, {512: [1.6, 1.7, 1.8], 64: [2.5] * 3}) + rows("rope", 512, {512: [1.5, 1.5, 1.5]})))
    t = headroom(short, long).set_index("scheme")
    a = t.loc["alibi"]
    assert a["reference"] == "alibi trained at 512" and a["L_eval"] == 512 and a["seeds"] == 3
    assert a["gained"] == pytest.approx(0.1) and a["headroom"] == pytest.approx(0.4)
    assert a["fraction"] == pytest.approx(0.25) and a["lo"] == pytest.approx(0.25) == a["hi"]  # the same in every pair
    n = t.loc["nope"]  # no NoPE reference: the best one (RoPE's, 1.5) stands in
    assert n["reference"] == "rope trained at 512"
    assert n["fraction"] == pytest.approx(np.mean([-0.8 / 0.7, -1.0 / 0.7, -1.2 / 0.7]))
    assert n["lo"] < n["fraction"] < n["hi"] < 0
    md = markdown_table(headroom(short, long))
    assert "| alibi | 64 | 512 | alibi trained at 512 | 2.100 | 2.000 | 1.700 | +0.100 | +0.400 | 25 % [25 %, 25 %] | 3 |" in md


def test_one_seed_has_no_interval_and_unmatched_lengths_give_no_row():
    short = Collected(pd.DataFrame(rows("rope", 64, {64: [2.0], 128: [2.5], 256: [3.0]})))
    long = Collected(pd.DataFrame(rows("rope", 128, {128: [1.8, 1.7]})))
    t = headroom(short, long)
    assert t["L_eval"].tolist() == [128]  # no reference trained at 256
    r = t.iloc[0]
    assert r["seeds"] == 1 and math.isnan(r["lo"]) and r["fraction"] == pytest.approx(-0.5 / 0.2)
    assert "-250 % | 1 |" in markdown_table(t)


def test_a_report_of_short_and_trained_long_runs_writes_the_headroom_table(tmp_path):
    from pe_bench.report.headroom import split_by_length, write_headroom

    def tagged(r: dict) -> dict:
        return {**r, "model": "tiny", "data": "shakespeare"}

    short = [tagged(r) for r in rows("alibi", 64, {64: [2.0, 2.1], 512: [1.9, 2.0]})]
    long = [tagged(r) for r in rows("alibi", 512, {512: [1.6, 1.7]})]
    assert split_by_length(Collected(pd.DataFrame(short))) is None  # no reference: no table
    assert write_headroom(Collected(pd.DataFrame(short)), tmp_path, "t") == []
    written = write_headroom(Collected(pd.DataFrame(short + long)), tmp_path, "t")
    assert [p.name for p in written] == ["headroom.csv", "headroom.md"]
    t = pd.read_csv(tmp_path / "headroom.csv")
    assert t["fraction"].round(6).tolist() == [0.25] and "fraction recovered" in (tmp_path / "headroom.md").read_text()


def test_a_reference_no_better_than_the_short_model_at_L_leaves_no_headroom_and_no_fraction():
    short = Collected(pd.DataFrame(rows("nope", 64, {64: [2.0, 2.0], 512: [2.6, 2.7]})))
    long = Collected(pd.DataFrame(rows("nope", 512, {512: [2.3, 1.9]})))  # worse than 2.0 in seed 0
    r = headroom(short, long).iloc[0]
    assert math.isnan(r["fraction"]) and r["headroom"] == pytest.approx(-0.1)
    assert "| -0.100 | no headroom | 2 |" in markdown_table(headroom(short, long))

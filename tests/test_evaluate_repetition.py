"""The repetition probe: a passage repeated d tokens later in real text; the copy gain against a control that lacks
the earlier copy (pe_bench.evaluate.repetition)."""

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from pe_bench.cli import app
from pe_bench.config import compose
from pe_bench.data import DataError
from pe_bench.evaluate.repetition import (
    MIN_PASSAGES,
    REPETITION_COLUMNS,
    distances,
    passage_starts,
    probe_sequences,
    repetition_rows,
)
from pe_bench.report.files import read_repetition
from pe_bench.runs import Run, RunFileError

DEV = torch.device("cpu")
BASE = {"scheme": "x", "base_scheme": "x", "model": "m", "data": "d", "split": "validation", "L_train": 16, "seed": 0,
        "step": 1, "precision": "fp32"}


class LooksBack(nn.Module):
    """Predicts the token ``d`` positions before the one to come (an induction head at one distance): probability
    0.9 on it, the rest spread evenly; uniform where there is nothing that far back."""

    def __init__(self, d: int, vocab: int = 256) -> None:
        super().__init__()
        self.d, self.vocab = d, vocab

    def forward(self, x: torch.Tensor, positions=None) -> torch.Tensor:
        B, T = x.shape
        logits = torch.zeros(B, T, self.vocab)
        for t in range(self.d - 1, T):  # target x[t + 1] has its twin at t + 1 − d
            logits[torch.arange(B), t, x[:, t + 1 - self.d]] = 8.0
        return logits


class Unigram(nn.Module):
    """Ignores every token of context: the same distribution at every position."""

    def forward(self, x: torch.Tensor, positions=None) -> torch.Tensor:
        w = torch.linspace(0, 3, 256)
        return w.expand(*x.shape, 256).clone()


def test_the_distances_are_half_l_to_seven_l_and_the_passage_is_half_l():
    assert distances(64) == [32, 64, 128, 256, 448]
    assert distances(16) == [8, 16, 32, 64, 112]


def test_the_repeat_is_passage_filler_passage_and_the_control_swaps_only_the_first_copy():
    tokens = np.arange(1000)
    repeat, control = probe_sequences(tokens, [0, 100, 200], d=10, m=4)
    assert repeat.shape == control.shape == (3, 14)
    assert repeat[1].tolist() == [*range(100, 110), *range(100, 104)]  # P F P: the second copy d = 10 after the first
    assert control[1].tolist() == [*range(200, 204), *range(104, 110), *range(100, 104)]  # P' (the next passage) F P
    assert control[2, :4].tolist() == [0, 1, 2, 3]  # the last passage's P' is the first's
    assert (repeat[:, 4:] == control[:, 4:]).all()  # the same filler and the same scored copy


def test_passages_spread_over_the_split_and_a_short_split_is_refused_in_one_line():
    starts = passage_starts(100_000, 16)
    assert len(starts) == 128 and starts[0] == 0 and starts[-1] == 100_000 - (112 + 8 + 1)
    with pytest.raises(DataError, match="too few for the repetition probe at L = 16 .* leave 'repetition' out"):
        passage_starts(112 + 8 + 1 + 8 * (MIN_PASSAGES - 1), 16)


def test_a_model_that_copies_from_d_back_gains_at_d_and_one_that_ignores_context_gains_exactly_nothing():
    tokens = np.random.default_rng(0).integers(0, 256, 20_000)
    rows = {r["distance"]: r for r in repetition_rows(LooksBack(32), tokens, 16, BASE, DEV, False, 4096)}
    assert list(rows) == [8, 16, 32, 64, 112] and all(r["status"] == "ok" for r in rows.values())
    at = rows[32]
    assert at["second_loss"] < 0.5 and at["control_loss"] > 4 and at["gain"] < -4 and at["hi"] < -4
    assert at["passages"] == 128 and at["passage_tokens"] == 8 and sorted(at) == sorted(REPETITION_COLUMNS)
    flat = repetition_rows(Unigram(), tokens, 16, BASE, DEV, False, 4096)
    for r in flat:
        assert r["gain"] == 0 and r["lo"] == 0 and r["hi"] == 0
        assert r["second_loss"] == r["control_loss"] == pytest.approx(r["first_loss"], abs=0.05)


def test_a_finished_run_swept_again_with_the_probe_gets_repetition_csv_and_its_report_the_table(smoke_args,
                                                                                                  tmp_path):
    out = tmp_path / "report"
    sweep = ["sweep", "scheme=nope,alibi", "seed=0", "eval.variants=false", *smoke_args, "--out", str(out),
             "--no-progress"]
    r = CliRunner().invoke(app, [*sweep, "eval.modes=[nonoverlapping]"])
    assert r.exit_code == 0, r.output
    runs = sorted((tmp_path / "results" / "runs").iterdir())
    assert not Run(runs[0]).repetition_csv.exists()
    r = CliRunner().invoke(app, [*sweep, "eval.modes=[nonoverlapping,repetition]"])  # the same runs: not retrained
    assert r.exit_code == 0, r.output
    assert "2 points: 0 trained, 2 skipped (finished before)" in r.output and "repetition: copy gain" in r.output
    probe = read_repetition(Run(runs[0]))
    L = int(probe["L_train"].iloc[0])
    assert probe["distance"].tolist() == distances(L) and (probe["status"] == "ok").all()
    table = pd.read_csv(out / "repetition.csv")
    assert sorted(table["label"].unique()) == ["alibi", "nope"] and (table["interval"] == "1 seed: t over passages").all()
    md = (out / "repetition.md").read_text()
    assert "## Does a model reach back d tokens in real text?" in md and "(1 seed)" in md
    again = CliRunner().invoke(app, ["report", str(tmp_path / "results" / "runs"), "--out", str(tmp_path / "r2")])
    assert again.exit_code == 0, again.output
    body = lambda text: text.split("\n", 1)[1]  # noqa: E731 - after the title, which names the command
    assert body((tmp_path / "r2" / "repetition.md").read_text()) == body(md)


def test_a_damaged_repetition_csv_is_refused_naming_the_file_and_line(tmp_path):
    run = Run(tmp_path / "run")
    run.create(compose([]))
    row = {**BASE, "distance": 8, "ratio": 0.5, "passage_tokens": 8, "passages": 16, "first_loss": 1.0,
           "second_loss": 0.5, "control_loss": 0.9, "gain": -0.4, "lo": -0.5, "hi": -0.3, "status": "ok", "note": ""}
    pd.DataFrame([row, {**row, "distance": 16, "gain": "nan"}]).to_csv(run.repetition_csv, index=False)
    with pytest.raises(RunFileError, match=r"repetition.csv line 3 holds a gain that is not a finite number: 'nan'"):
        read_repetition(run)
    pd.DataFrame([row, {**row, "status": "fine"}]).to_csv(run.repetition_csv, index=False)
    with pytest.raises(RunFileError, match=r"repetition.csv line 3 has status 'fine'"):
        read_repetition(run)
    na = {**row, "status": "not_applicable", **dict.fromkeys(("first_loss", "second_loss", "control_loss", "gain",
                                                                  "lo", "hi"), "")}
    pd.DataFrame([row, na]).to_csv(run.repetition_csv, index=False)
    assert read_repetition(run)["status"].tolist() == ["ok", "not_applicable"]

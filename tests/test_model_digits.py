"""Abacus digit positions (McLeish et al. 2024): indices that count digits within each number, one random offset per
training batch (a pure function of the batch), none at evaluation, a refusal past the table; usable with any scheme
on the addition task."""

from __future__ import annotations

import pytest
import torch

from pe_bench.build import build_model
from pe_bench.config import ConfigError, compose
from pe_bench.model.digits import TABLE, DigitPositions
from pe_bench.schemes import LengthNotSupported
from pe_bench.tasks import BOS, DIGIT0, MARK, SEP, build_task

DIGITS = tuple(range(DIGIT0, DIGIT0 + 10))


def tokens(text: str) -> torch.Tensor:
    """'B 12+345=' → token ids (B: BOS, +: MARK, =: SEP, digits)."""
    ids = {"B": BOS, "+": MARK, "=": SEP, **{str(d): DIGIT0 + d for d in range(10)}}
    return torch.tensor([[ids[c] for c in text.replace(" ", "")]])


def test_indices_count_digits_within_each_number_from_one():
    d = DigitPositions(DIGITS, 8, max_offset=0)
    assert d.indices(tokens("B12+345=6789")).tolist() == [[0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4]]
    assert d.indices(tokens("B+=")).tolist() == [[0, 0, 0]]


def test_training_shifts_every_digit_by_one_offset_per_batch_and_evaluation_by_none():
    d = DigitPositions(DIGITS, 8, max_offset=100)
    x = torch.cat([tokens("B12+345=6789"), tokens("B98+765=4321")])
    d.eval()
    assert torch.equal(d(x), d.embedding(d.indices(x)))
    d.train()
    k = d.offset(x)
    assert 0 <= k <= 100 and d.offset(x) == k  # a pure function of the batch: a resumed run draws the same
    base = d.indices(x)
    assert torch.equal(d(x), d.embedding(torch.where(base > 0, base + k, 0)))
    ks = {d.offset(torch.cat([tokens(f"B{a}+{b}=")] * 2)) for a in range(10, 40) for b in range(10, 20)}
    assert len(ks) > 50 and max(ks) <= 100  # many offsets over many batches


def test_a_zero_share_sets_that_share_of_training_batches_to_the_offset_evaluation_reads():
    batches = [torch.cat([tokens(f"B{a}+{b}=")] * 2) for a in range(10, 40) for b in range(10, 20)]
    paper = DigitPositions(DIGITS, 8, max_offset=100)
    assert sum(paper.offset(x) == 0 for x in batches) < 15  # about 1 in 101 of these 300 batches
    half = DigitPositions(DIGITS, 8, max_offset=100, zero_share=0.5)
    ks = [half.offset(x) for x in batches]
    assert 120 <= sum(k == 0 for k in ks) <= 180 and len(set(ks)) > 50 and max(ks) <= 100
    assert all(half.offset(x) == k for x, k in zip(batches, ks))  # still a pure function of the batch
    assert {DigitPositions(DIGITS, 8, max_offset=100, zero_share=1.0).offset(x) for x in batches} == {0}


def test_addition_brings_abacus_positions_with_half_its_training_batches_at_the_offset_evaluation_reads():
    task = compose(["task=addition"]).task  # NoPE scored 0.5 % at L with the paper's uniform offsets, 100 % with these
    assert (task.abacus, task.abacus_max_offset, task.abacus_zero_share) == (True, 100, 0.5)


def test_a_number_longer_than_the_table_is_refused_never_clipped():
    d = DigitPositions(DIGITS, 8, max_offset=0).eval()
    with pytest.raises(LengthNotSupported, match="Abacus"):
        d(tokens("B" + "7" * TABLE))


@pytest.mark.parametrize("scheme", ["nope", "rope", "alibi", "t5"])
def test_any_scheme_on_addition_gets_digit_positions_and_they_change_the_output(scheme):
    cfg = compose(["task=addition", "task.abacus=true", f"scheme={scheme}", "model.n_layers=1", "model.d_model=32",
                   "model.n_heads=2"])
    torch.manual_seed(0)
    model = build_model(cfg, build_task(cfg.task).vocab_size).eval()
    assert model.digit_positions is not None and model.digit_positions.max_offset == 100
    x = build_task(cfg.task).heldout_set(32, 2).x
    with torch.no_grad():
        with_digits = model(x)
        model.digit_positions.embedding.weight.zero_()
        assert not torch.allclose(with_digits, model(x))
    plain = compose(["task=addition", "task.abacus=false", f"scheme={scheme}", "model.n_layers=1", "model.d_model=32", "model.n_heads=2"])
    assert build_model(plain, 14).digit_positions is None


def test_abacus_options_are_checked_by_name():
    with pytest.raises(ConfigError, match="task.abacus_max_offset is read with task.abacus=true only"):
        compose(["task=addition", "task.abacus=false", "task.abacus_max_offset=50"])
    with pytest.raises(ConfigError, match="task.abacus_zero_share is read with task.abacus=true only"):
        compose(["task=addition", "task.abacus=false", "task.abacus_zero_share=0"])
    with pytest.raises(ConfigError, match="abacus_zero_share"):
        compose(["task=addition", "task.abacus=true", "task.abacus_zero_share=1.5"])
    with pytest.raises(ConfigError, match="task.abacus=True is not read by task=copy"):
        compose(["task=copy", "task.abacus=true"])
    assert compose(["task=addition", "task.abacus=true", "task.abacus_max_offset=50"]).task.abacus_max_offset == 50


def test_abacus_needs_numbers_written_least_significant_digit_first_and_leaves_other_addition_runs_named_alone():
    with pytest.raises(ConfigError, match="keep task.reverse_digits=true"):
        compose(["task=addition", "task.abacus=true", "task.reverse_digits=false"])
    from pe_bench.runs import run_name

    plain = run_name(compose(["task=addition", "scheme=rope", "task.abacus=false"]))
    assert plain == "addition-rope-tiny_fan_in-L32-s0-" + plain.rsplit("-", 1)[1]  # the model addition brings
    assert run_name(compose(["task=addition", "scheme=rope"])) != plain
    paper = run_name(compose(["task=addition", "scheme=rope", "task.abacus_zero_share=0"]))
    assert paper not in (plain, run_name(compose(["task=addition", "scheme=rope"])))

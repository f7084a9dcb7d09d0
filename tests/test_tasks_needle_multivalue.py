"""RULER's multi-value needle in a haystack as a task: pinned examples, the answer read back from the haystack,
held-out questions never trained on, the lengths the examples fill, chance, and the config."""

from __future__ import annotations

import numpy as np
import pytest
from task_examples import check_heldout_never_trained, examples, show

from pe_bench.config import ConfigError, compose
from pe_bench.tasks import options as task_options
from pe_bench.tasks import BOS, DIGIT0, MARK, SEP, SYMBOL0, build_task

NAME = "needle_multivalue"


def task(**options):
    return build_task(task_options(NAME, **options))


def test_pinned_examples():
    t = task()
    assert [show(*e) for e in examples(t.heldout_set(32, 2))] == [
        "B * K28 9 9 c p * K28 4 9 p * K28 3 7 o b p * K28 2 3 | K28 = 9 9 4 9 3 7 2 3",
        "B l * K24 4 0 j j l * K24 0 5 e * K24 8 7 f * K24 8 3 | K24 = 4 0 0 5 8 7 8 3",
    ]
    assert [show(*e) for e in examples(t.train_batch(np.random.default_rng(0), 2, 32))] == [
        "B * K2 0 1 l * K2 8 6 k i i * K2 9 5 * K2 6 9 o | K2 = 0 1 8 6 9 5 6 9",
        "B n * K12 8 5 a * K12 0 7 * K12 7 8 * K12 1 0 i b | K12 = 8 5 0 7 7 8 1 0",
    ]


def read_answer(tokens: list[int], needles: int, symbols: int, digits: int) -> list[int]:
    """Every value of the asked key, in order, read from the needles before the question."""
    sep = tokens.index(SEP)
    assert sep == len(tokens) - 2 - needles * digits and tokens[0] == BOS
    key, values, i = tokens[sep + 1], [], 1
    while i < sep:
        if tokens[i] == MARK:
            assert tokens[i + 1] == key  # the one key of the haystack
            values += tokens[i + 2 : i + 2 + digits]
            i += 2 + digits
        else:
            assert SYMBOL0 <= tokens[i] < SYMBOL0 + symbols  # filler
            i += 1
    assert len(values) == needles * digits and all(DIGIT0 <= d < DIGIT0 + 10 for d in values)
    assert SYMBOL0 + symbols <= key
    return values


@pytest.mark.parametrize("options", [{}, {"needles": 2, "value_digits": 3, "symbols": 4}])
@pytest.mark.parametrize("n", [32, 64, 256])
def test_the_answer_is_every_value_of_the_key_in_order(options, n):
    t = task(**options)
    c = t.cfg
    for split in (examples(t.heldout_set(n, 8)), examples(t.train_batch(np.random.default_rng(n), 8, n))):
        for tokens, flags in split:
            answer = [tok for tok, f in zip(tokens, flags) if f]
            assert answer == read_answer(tokens, c.needles, c.symbols, c.value_digits)


def test_heldout_questions_never_appear_in_training():
    """Two 1-digit values of one of 2 keys, no filler (200 questions): training draws almost all of its own, never a
    held-out one; the held-out ones hash to bucket 0."""
    t = task(needles=2, needle_keys=2, value_digits=1, train_lengths="fixed")
    n = 10
    assert t.max_size(n) == 0
    check_heldout_never_trained(t, n, 150)


@pytest.mark.parametrize("n", [32, 64, 256])
def test_heldout_examples_fill_their_length_and_answer_at_the_end(n):
    t = task()
    assert t.max_size(n) == n - 2 - 4 * (2 + 2 * 2)  # BOS, filler, 4 × (MARK key 2 digits), SEP key 4 × 2 = n + 1
    assert t.filled_length(n) == n
    b = t.heldout_set(n, 4)
    assert b.x.shape == (4, n)
    for tokens, flags in examples(b):
        assert len(tokens) == n + 1
        assert flags[-8:] == [True] * 8 and not any(flags[:-8])
    for tokens, flags in examples(t.train_batch(np.random.default_rng(1), 16, n)):
        assert len(tokens) <= n + 1 and sum(flags) == 8 and flags[-8] and flags[-1]
    assert t.chance(n) == pytest.approx(1e-8)  # 4 values of 2 digits
    assert task(needles=2, value_digits=3).chance(n) == pytest.approx(1e-6)
    assert t.vocab_size == 14 + 16 + 32


def test_the_yaml_composes_and_bad_options_are_refused_by_name():
    cfg = compose(["task=needle_multivalue"], scheme=False)
    assert (cfg.task.name, cfg.task.needles, cfg.task.needle_keys, cfg.task.value_digits) == (NAME, 4, 32, 2)
    assert cfg.task.eval_examples == 400 and cfg.train.name == "task"
    with pytest.raises(ConfigError, match="task.value_digits=0 is out of range"):
        compose(["task=needle_multivalue", "task.value_digits=0"], scheme=False)
    with pytest.raises(ConfigError, match="train.seq_len=20 is too short for task=needle_multivalue: one example "
                                          "needs at least 26 tokens"):
        compose(["task=needle_multivalue", "train.seq_len=20"], scheme=False)

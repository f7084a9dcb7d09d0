"""RULER's multi-key needle in a haystack as a task: pinned examples, the answer read back from the haystack, held-out
questions never trained on, the lengths the examples fill, chance, and the config."""

from __future__ import annotations

import numpy as np
import pytest
from task_examples import check_heldout_never_trained, examples, show

from pe_bench.config import ConfigError, compose
from pe_bench.tasks import options as task_options
from pe_bench.tasks import BOS, DIGIT0, MARK, SEP, SYMBOL0, build_task

NAME = "needle_multikey"


def task(**options):
    return build_task(task_options(NAME, **options))


def test_pinned_examples():
    t = task()
    assert [show(*e) for e in examples(t.heldout_set(32, 2))] == [
        "B a m a j f e * K26 1 4 * K8 1 1 l a p a * K0 3 8 * K2 6 2 j l | K26 = 1 4",
        "B * K5 6 1 o p p * K21 5 2 p * K11 6 0 p g d f * K8 6 9 h j l k | K21 = 5 2",
    ]
    assert [show(*e) for e in examples(t.train_batch(np.random.default_rng(0), 2, 32))] == [
        "B h * K14 0 6 p m p g k * K13 5 6 p k * K12 2 6 n l * K8 7 3 l | K13 = 5 6",
        "B f l * K24 8 0 * K11 9 5 j i f * K9 3 6 m * K15 5 2 g f | K15 = 5 2",
    ]


def read_answer(tokens: list[int], needles: int, symbols: int, digits: int) -> list[int]:
    """The value of the asked key, read from the needles before the question."""
    sep = tokens.index(SEP)
    assert sep == len(tokens) - 2 - digits and tokens[0] == BOS
    found, i = {}, 1
    while i < sep:
        if tokens[i] == MARK:
            key, value = tokens[i + 1], tokens[i + 2 : i + 2 + digits]
            assert SYMBOL0 + symbols <= key and all(DIGIT0 <= d < DIGIT0 + 10 for d in value)
            assert key not in found  # keys are distinct
            found[key] = value
            i += 2 + digits
        else:
            assert SYMBOL0 <= tokens[i] < SYMBOL0 + symbols  # filler
            i += 1
    assert len(found) == needles
    return found[tokens[sep + 1]]


@pytest.mark.parametrize("options", [{}, {"needles": 2, "value_digits": 5, "symbols": 4}])
@pytest.mark.parametrize("n", [32, 64, 256])
def test_the_answer_is_the_value_of_the_asked_key(options, n):
    t = task(**options)
    c = t.cfg
    for split in (examples(t.heldout_set(n, 8)), examples(t.train_batch(np.random.default_rng(n), 8, n))):
        for tokens, flags in split:
            answer = [tok for tok, f in zip(tokens, flags) if f]
            assert answer == read_answer(tokens, c.needles, c.symbols, c.value_digits)


def test_heldout_questions_never_appear_in_training():
    """One needle, 2 keys, 1-digit values, a 2-letter filler of 1 (80 questions): training draws all of its own,
    never a held-out one; the held-out ones hash to bucket 0."""
    t = task(needles=1, needle_keys=2, value_digits=1, symbols=2, train_lengths="fixed")
    n = 7
    assert t.max_size(n) == 1
    check_heldout_never_trained(t, n, 50)


@pytest.mark.parametrize("n", [32, 64, 256])
def test_heldout_examples_fill_their_length_and_answer_at_the_end(n):
    t = task()
    assert t.max_size(n) == n - 2 - 4 * 4 - 2  # BOS, filler, 4 × (MARK key 2 digits), SEP key 2 digits = n + 1
    assert t.filled_length(n) == n
    b = t.heldout_set(n, 4)
    assert b.x.shape == (4, n)
    for tokens, flags in examples(b):
        assert len(tokens) == n + 1
        assert flags[-2:] == [True, True] and not any(flags[:-2])
    for tokens, flags in examples(t.train_batch(np.random.default_rng(1), 16, n)):
        assert len(tokens) <= n + 1 and sum(flags) == 2 and flags[-2:] == [True, True]
    assert t.chance(n) == 1e-2  # two digits
    assert task(value_digits=5).chance(n) == 1e-5
    assert t.vocab_size == 14 + 16 + 32


def test_the_yaml_composes_and_bad_options_are_refused_by_name():
    cfg = compose(["task=needle_multikey"], scheme=False)
    assert (cfg.task.name, cfg.task.needles, cfg.task.needle_keys, cfg.task.value_digits) == (NAME, 4, 32, 2)
    assert cfg.task.eval_examples == 400 and (cfg.train.name, cfg.model.name) == ("task_low_lr", "tiny_fan_in")
    with pytest.raises(ConfigError, match="task.needles=0 is out of range"):
        compose(["task=needle_multikey", "task.needles=0"], scheme=False)
    with pytest.raises(ConfigError, match="task.needle_keys=3 is fewer than task.needles=4"):
        compose(["task=needle_multikey", "task.needle_keys=3"], scheme=False)
    with pytest.raises(ConfigError, match="task.needles=2 is not read by task=copy"):
        compose(["task=copy", "task.needles=2"], scheme=False)

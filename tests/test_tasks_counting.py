"""Counting (after Chang & Bisk 2025) as a task: pinned examples, the answer read back by counting the string,
held-out questions never trained on, the lengths the examples fill (and those the answer's digits refuse), chance,
and the config."""

from __future__ import annotations

import numpy as np
import pytest
from task_examples import check_heldout_never_trained, examples

from pe_bench.config import ConfigError, compose
from pe_bench.tasks import options as task_options
from pe_bench.tasks import BOS, DIGIT0, SEP, SYMBOL0, TaskLengthError, build_task

NAME = "counting"


def task(**options):
    return build_task(task_options(NAME, **{"symbols": 10, **options}))  # configs/task/counting.yaml's alphabet


def show(tokens: list[int], flags: list[bool]) -> str:
    """B, |, digits, letters a…; `=` before the answer."""
    def word(t: int) -> str:
        if t < DIGIT0:
            return {BOS: "B", SEP: "|"}[t]
        return str(t - DIGIT0) if t < SYMBOL0 else chr(ord("a") + t - SYMBOL0)

    k = flags.index(True)
    assert all(flags[k:]) and not any(flags[:k])
    return " ".join(map(word, tokens[:k])) + " = " + " ".join(map(word, tokens[k:]))


def test_pinned_examples():
    t = task()
    assert [show(*e) for e in examples(t.heldout_set(32, 2))] == [
        "B i f b b c d h a a c b f d d b g i g b b h f e c d d d | a = 2 0 0",
        "B i g j f h h h g g g a d d e g b i c d d i b i b a c c | a = 2 0 0",
    ]
    assert [show(*e) for e in examples(t.train_batch(np.random.default_rng(0), 2, 32))] == [
        "B a a b i g j f g j h g f f j c i g a d i f a h | h = 2 0 0",
        "B i b a i a f a c e e e a a b a g f g | c = 1 0 0",
    ]


def read_answer(tokens: list[int], cfg) -> list[int]:
    """The occurrences of the asked letter in the string, in count_digits digits (least significant first unless
    reverse_digits is off)."""
    sep = tokens.index(SEP)
    assert tokens[0] == BOS and sep == len(tokens) - 2 - cfg.count_digits
    string, asked = tokens[1:sep], tokens[sep + 1]
    assert all(SYMBOL0 <= t < SYMBOL0 + cfg.symbols for t in [*string, asked])
    count = sum(t == asked for t in string)
    digits = f"{count:0{cfg.count_digits}d}"
    return [DIGIT0 + int(d) for d in (digits[::-1] if cfg.reverse_digits else digits)]


@pytest.mark.parametrize("options", [{}, {"symbols": 2, "count_digits": 4}, {"reverse_digits": False}])
@pytest.mark.parametrize("n", [32, 64, 256])
def test_the_answer_is_the_count_of_the_asked_letter(options, n):
    t = task(**options)
    for split in (examples(t.heldout_set(n, 8)), examples(t.train_batch(np.random.default_rng(n), 8, n))):
        for tokens, flags in split:
            answer = [tok for tok, f in zip(tokens, flags) if f]
            assert answer == read_answer(tokens, t.cfg)


def test_the_count_grows_with_the_length():
    """About m / symbols: counts at 8L lie beyond those of training at L (what the task measures)."""
    t = task()

    def value(e: tuple[list[int], list[bool]]) -> int:
        return int("".join(str(x - DIGIT0) for x, f in zip(*e) if f)[::-1])

    train = [value(e) for seed in range(4) for e in examples(t.train_batch(np.random.default_rng(seed), 64, 32))]
    far = [value(e) for e in examples(t.heldout_set(256, 64))]
    assert max(train) < min(far) and np.mean(far) == pytest.approx(t.max_size(256) / 10, rel=0.15)


def test_heldout_questions_never_appear_in_training():
    """Strings of 3 of 3 letters, one asked (81 questions): training draws almost all of its own, never a held-out
    one; the held-out ones hash to bucket 0."""
    t = task(symbols=3, count_digits=1, train_lengths="fixed")
    n = 6
    assert t.max_size(n) == 3
    check_heldout_never_trained(t, n, 60)


@pytest.mark.parametrize("n", [32, 64, 256])
def test_heldout_examples_fill_their_length_and_answer_at_the_end(n):
    t = task()
    assert t.max_size(n) == n - 5  # BOS, m letters, SEP, the asked letter, 3 digits = n + 1
    assert t.filled_length(n) == n
    b = t.heldout_set(n, 4)
    assert b.x.shape == (4, n)
    for tokens, flags in examples(b):
        assert len(tokens) == n + 1
        assert flags[-3:] == [True] * 3 and not any(flags[:-3])
    for tokens, flags in examples(t.train_batch(np.random.default_rng(1), 16, n)):
        assert len(tokens) <= n + 1 and sum(flags) == 3 and flags[-3] and flags[-1]
    assert t.chance(n) == 1 / (n - 4)  # a count in 0..n-5
    assert t.vocab_size == 14 + 10


def test_counts_beyond_the_digits_are_refused_naming_them():
    t = task(count_digits=2)
    assert t.length_problem(101) is None  # strings of 96 letters: counts up to 96
    assert "raise task.count_digits to at least 3" in t.length_problem(104)
    with pytest.raises(TaskLengthError, match="raise task.count_digits"):
        t.heldout_set(104, 1)


def test_the_yaml_composes_and_bad_options_are_refused_by_name():
    cfg = compose(["task=counting"], scheme=False)
    assert (cfg.task.name, cfg.task.symbols, cfg.task.count_digits, cfg.task.reverse_digits) == (NAME, 10, 3, True)
    assert cfg.task.eval_examples == 400 and (cfg.train.name, cfg.train.lr, cfg.model.name) == ("task_long", 1e-3,
                                                                                      "tiny_fan_in")
    with pytest.raises(ConfigError, match="task.count_digits=0 is out of range"):
        compose(["task=counting", "task.count_digits=0"], scheme=False)
    with pytest.raises(ConfigError, match="task.count_digits=2 is too few for task=counting at length 256"):
        compose(["task=counting", "task.count_digits=2"], scheme=False)

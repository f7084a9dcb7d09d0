"""RULER's variable tracking as a task: pinned examples, the answer read back by following the assignments,
held-out questions never trained on, the lengths the examples fill, chance, and the config."""

from __future__ import annotations

import numpy as np
import pytest
import task_examples
from task_examples import check_heldout_never_trained, examples

from pe_bench.config import ConfigError, compose
from pe_bench.tasks import options as task_options
from pe_bench.tasks import BOS, DIGIT0, MARK, SEP, SYMBOL0, build_task

NAME = "variable_tracking"


def task(**options):
    return build_task(task_options(NAME, **options))


def show(tokens: list[int], flags: list[bool], symbols: int = 16) -> str:
    """Variables as x0, x1, …"""
    return task_examples.show(tokens, flags, symbols, names="x")


def test_pinned_examples():
    t = task()
    assert [show(*e) for e in examples(t.heldout_set(32, 2))] == [
        "B a k * x30 5 8 * x15 1 3 g f * x27 x15 * x0 x30 j h * x5 x0 * x26 x27 | 5 8 = x30 x0 x5",
        "B k * x8 0 2 a * x6 5 9 * x27 x6 * x26 x8 * x4 x26 c b o * x30 x27 j | 0 2 = x8 x26 x4",
    ]
    assert [show(*e) for e in examples(t.train_batch(np.random.default_rng(0), 2, 32))] == [
        "B * x2 5 5 * x0 x2 * x20 9 2 i * x29 x20 a m * x5 x0 l n * x24 x29 | 5 5 = x2 x0 x5",
        "B * x8 2 3 * x21 x8 e * x11 7 5 d * x14 x11 l * x2 x14 j * x27 x21 | 2 3 = x8 x21 x27",
    ]


def read_answer(tokens: list[int], cfg) -> list[int]:
    """The variables bound to the asked value, in the order they are bound, by following the assignments."""
    d, names = cfg.value_digits, SYMBOL0 + cfg.symbols
    sep = tokens.index(SEP)
    assert sep == len(tokens) - 1 - d - (cfg.hops + 1) and tokens[0] == BOS
    bound, order, i = {}, [], 1
    while i < sep:
        if tokens[i] == MARK:
            var, rhs = tokens[i + 1], tokens[i + 2]
            assert var >= names and var not in bound  # each variable is assigned once
            if rhs >= names:  # x = y: y is bound before
                bound[var] = bound[rhs]
                i += 3
            else:  # x = digits
                assert all(DIGIT0 <= t < DIGIT0 + 10 for t in tokens[i + 2 : i + 2 + d])
                bound[var] = tuple(tokens[i + 2 : i + 2 + d])
                i += 2 + d
            order.append(var)
        else:
            assert SYMBOL0 <= tokens[i] < names  # filler
            i += 1
    assert len(order) == cfg.chains * (cfg.hops + 1)
    assert len(set(bound.values())) == cfg.chains  # each chain has its own value
    asked = tuple(tokens[sep + 1 : sep + 1 + d])
    return [v for v in order if bound[v] == asked]


@pytest.mark.parametrize("options", [{}, {"hops": 4, "chains": 1}, {"hops": 1, "chains": 4, "value_digits": 1}])
@pytest.mark.parametrize("n", [32, 64, 256])
def test_the_answer_is_every_variable_bound_to_the_asked_value(options, n):
    t = task(**options)
    for split in (examples(t.heldout_set(n, 8)), examples(t.train_batch(np.random.default_rng(n), 8, n))):
        for tokens, flags in split:
            answer = [tok for tok, f in zip(tokens, flags) if f]
            assert answer == read_answer(tokens, t.cfg)


def test_heldout_questions_never_appear_in_training():
    """One chain of one hop over 2 names, 1-digit values, a 2-letter filler of 1 (120 questions): training draws
    almost all of its own, never a held-out one; the held-out ones hash to bucket 0."""
    t = task(hops=1, chains=1, variable_names=2, value_digits=1, symbols=2, train_lengths="fixed")
    n = 11
    assert t.max_size(n) == 1
    check_heldout_never_trained(t, n, 90)


@pytest.mark.parametrize("n", [32, 64, 256])
def test_heldout_examples_fill_their_length_and_answer_at_the_end(n):
    t = task()
    # BOS, filler, 2 chains × (MARK x 2 digits + 2 × MARK x y), SEP 2 digits, 3 variables = n + 1
    assert t.max_size(n) == n - 1 - 2 * (4 + 2 * 3) - 1 - 2 - 3 + 1
    assert t.filled_length(n) == n
    b = t.heldout_set(n, 4)
    assert b.x.shape == (4, n)
    for tokens, flags in examples(b):
        assert len(tokens) == n + 1
        assert flags[-3:] == [True] * 3 and not any(flags[:-3])
    for tokens, flags in examples(t.train_batch(np.random.default_rng(1), 16, n)):
        assert len(tokens) <= n + 1 and sum(flags) == 3 and flags[-3] and flags[-1]
    assert t.chance(n) == 32.0**-3  # 3 names of 32
    assert task(hops=4, variable_names=10).chance(n) == pytest.approx(1e-5)
    assert t.vocab_size == 14 + 16 + 32


def test_the_yaml_composes_and_bad_options_are_refused_by_name():
    cfg = compose(["task=variable_tracking"], scheme=False)
    assert (cfg.task.name, cfg.task.hops, cfg.task.chains, cfg.task.variable_names) == (NAME, 2, 2, 32)
    assert cfg.task.eval_examples == 400 and (cfg.train.name, cfg.model.name) == ("task_xlong", "tiny_fan_in")
    with pytest.raises(ConfigError, match="task.hops=0 is out of range"):
        compose(["task=variable_tracking", "task.hops=0"], scheme=False)
    with pytest.raises(ConfigError, match=r"task.variable_names=5 is too few for task.chains=2 × \(task.hops=2 \+ 1\)"):
        compose(["task=variable_tracking", "task.variable_names=5"], scheme=False)
    with pytest.raises(ConfigError, match="task.chains=11 needs distinct values"):
        compose(["task=variable_tracking", "task.chains=11", "task.value_digits=1", "task.hops=1",
                 "train.seq_len=128"], scheme=False)

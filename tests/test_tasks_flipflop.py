"""The flip-flop language (Liu et al. 2023) as a task: a write first, a read last, each read's bit the last written
one, the ignore probability p of FFL(p) the share of ignores, every read scored."""

from __future__ import annotations

import numpy as np
import pytest

from pe_bench.config import ConfigError, TaskConfig, compose
from pe_bench.tasks import BOS, DIGIT0, PAD, SYMBOL0, build_task

WRITE, IGNORE, READ = SYMBOL0, SYMBOL0 + 1, SYMBOL0 + 2


def sequences(p: float, n: int = 129, count: int = 32) -> list[tuple[list[int], list[bool]]]:
    """(tokens, scored flags) of held-out examples at length n, without the padding (an odd n leaves one token)."""
    b = build_task(TaskConfig(name="flipflop", ignore_prob=p)).heldout_set(n, count)
    out = []
    for i in range(count):
        tokens, scored = [int(b.x[i, 0])] + b.y[i].tolist(), [False] + b.mask[i].tolist()
        end = max(j for j, t in enumerate(tokens) if t != PAD) + 1
        out.append((tokens[:end], scored[:end]))
    return out


@pytest.mark.parametrize("p", [0.1, 0.8, 0.98])
def test_every_read_returns_the_last_written_bit_and_is_scored(p):
    for tokens, scored in sequences(p):
        assert tokens[0] == BOS and tokens[1] == WRITE and tokens[-2] == READ
        last = None
        for i in range(1, len(tokens), 2):
            kind, bit = tokens[i], tokens[i + 1] - DIGIT0
            assert kind in (WRITE, IGNORE, READ) and bit in (0, 1)
            if kind == WRITE:
                last = bit
            assert scored[i + 1] == (kind == READ) and not scored[i]
            if kind == READ:
                assert bit == last


@pytest.mark.parametrize("p", [0.1, 0.8, 0.98])
def test_the_ignore_probability_is_the_share_of_ignores_and_writes_and_reads_share_the_rest(p):
    kinds = np.array([t[i] for t, _ in sequences(p, n=513) for i in range(3, len(t) - 2, 2)])  # first/last fixed
    assert abs(np.mean(kinds == IGNORE) - p) < 0.02
    writes, reads = np.mean(kinds == WRITE), np.mean(kinds == READ)
    assert abs(writes - reads) < 0.02 and abs(writes + reads - (1 - p)) < 0.02


def test_flipflop_composes_with_its_option_and_refuses_an_ignore_probability_of_one():
    cfg = compose(["task=flipflop", "task.ignore_prob=0.98", "scheme=rope"])
    assert cfg.task.name == "flipflop" and cfg.task.ignore_prob == 0.98 and cfg.train.steps == compose(
        ["task=copy"]).train.steps  # the tasks' recipe
    with pytest.raises(ConfigError, match="task.ignore_prob"):
        compose(["task=flipflop", "task.ignore_prob=1"])
    with pytest.raises(ConfigError, match="task.ignore_prob=0.5 is not read by task=copy; it is an option of task=flipflop"):
        compose(["task=copy", "task.ignore_prob=0.5"])

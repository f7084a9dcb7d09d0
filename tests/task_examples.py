"""What the task tests share: the examples of a batch without their padding, the question bytes a task hashes, and
the check that held-out questions are never trained on."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np

from pe_bench.tasks import BOS, DIGIT0, HELDOUT_BUCKETS, MARK, PAD, SEP, SYMBOL0


def examples(b) -> list[tuple[list[int], list[bool]]]:
    """(tokens, answer flags) of each example of a batch, without its padding."""
    out = []
    for i in range(len(b.x)):
        tokens, flags = [int(b.x[i, 0])] + b.y[i].tolist(), [False] + b.mask[i].tolist()
        end = max(j for j, t in enumerate(tokens) if t != PAD) + 1
        out.append((tokens[:end], flags[:end]))
    return out


def questions(b) -> set[bytes]:
    """The question of each example as the tasks hash it: the tokens before the answer, as uint16."""
    return {np.asarray(tokens[: flags.index(True)], dtype=np.uint16).tobytes() for tokens, flags in examples(b)}


def check_heldout_never_trained(task, n: int, min_train: int,
                                question_of: Callable[[object], set[bytes]] = questions) -> None:
    """At a length n with few distinct questions, 40 training batches draw at least ``min_train`` of their own and
    never a held-out one; every held-out question hashes to bucket 0, every training one elsewhere."""
    train = set()
    for seed in range(40):
        train |= question_of(task.train_batch(np.random.default_rng(seed), 64, n))
    heldout = question_of(task.heldout_set(n, 200))
    assert heldout and len(train) > min_train
    assert not train & heldout
    assert all(zlib.crc32(q) % HELDOUT_BUCKETS == 0 for q in heldout)
    assert all(zlib.crc32(q) % HELDOUT_BUCKETS for q in train)


def show(tokens: list[int], flags: list[bool], symbols: int = 16, names: str = "K") -> str:
    """An example as text: B (BOS), | (SEP), * (MARK), digits, the first ``symbols`` task symbols as letters a…, the
    next ones as ``names`` 0, 1, …; `=` before the answer (which must be the example's last tokens)."""
    def word(t: int) -> str:
        if t < DIGIT0:
            return {BOS: "B", SEP: "|", MARK: "*"}[t]
        if t < SYMBOL0:
            return str(t - DIGIT0)
        return chr(ord("a") + t - SYMBOL0) if t < SYMBOL0 + symbols else f"{names}{t - SYMBOL0 - symbols}"

    k = flags.index(True)
    assert all(flags[k:]) and not any(flags[:k])
    return " ".join(map(word, tokens[:k])) + " = " + " ".join(map(word, tokens[k:]))

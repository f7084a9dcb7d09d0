"""RULER's common words extraction as a task: pinned examples, the answer read back by counting the list, held-out
questions never trained on, the lengths the examples fill (and those the vocabulary refuses), chance, and the
config."""

from __future__ import annotations

import math
import zlib
from collections import Counter

import numpy as np
import pytest
from task_examples import examples, questions

from pe_bench.config import ConfigError, compose
from pe_bench.tasks import options as task_options
from pe_bench.tasks import BOS, HELDOUT_BUCKETS, SEP, SYMBOL0, TaskLengthError, build_task

NAME = "common_words"


def task(**options):
    return build_task(task_options(NAME, **options))


def show(tokens: list[int], flags: list[bool]) -> str:
    """B, |, words w0…; `=` before the answer."""
    def word(t: int) -> str:
        return {BOS: "B", SEP: "|"}[t] if t < SYMBOL0 else f"w{t - SYMBOL0}"

    k = flags.index(True)
    assert all(flags[k:]) and not any(flags[:k])
    return " ".join(map(word, tokens[:k])) + " = " + " ".join(map(word, tokens[k:]))


def test_pinned_examples():
    t = task()
    assert [show(*e) for e in examples(t.heldout_set(32, 2))] == [
        ("B w145 w44 w100 w62 w49 w203 w23 w40 w162 w244 w62 w160 w157 w111 w85 w30 w246 w223 w241 w145 w46 "
         "w229 w44 w145 w62 w45 w44 w177 | = w44 w62 w145"),
        ("B w205 w107 w172 w83 w205 w147 w205 w70 w147 w86 w87 w47 w29 w225 w147 w169 w183 w134 w179 w195 "
         "w8 w148 w71 w197 w35 w47 w47 w25 | = w47 w147 w205"),
    ]
    assert [show(*e) for e in examples(t.train_batch(np.random.default_rng(0), 2, 32))] == [
        ("B w173 w65 w12 w77 w186 w56 w179 w220 w21 w220 w136 w122 w157 w81 w157 w213 w157 w220 w143 w254 "
         "w60 w12 w82 w159 w12 w96 | = w12 w157 w220"),
        ("B w58 w125 w134 w233 w150 w102 w201 w147 w106 w134 w114 w114 w84 w207 w134 w189 w4 w233 w242 w114 "
         "w233 | = w114 w134 w233"),
    ]


def read_answer(tokens: list[int], cfg) -> list[int]:
    """The words that appear common_freq times, in ascending order; every other word appears uncommon_freq times."""
    sep = tokens.index(SEP)
    assert tokens[0] == BOS and sep == len(tokens) - 1 - cfg.common_words
    counts = Counter(tokens[1:sep])
    assert all(SYMBOL0 <= w < SYMBOL0 + cfg.word_vocab for w in counts)
    common = sorted(w for w, k in counts.items() if k == cfg.common_freq)
    assert len(common) == cfg.common_words
    assert all(k == cfg.uncommon_freq for w, k in counts.items() if w not in common)
    return common


@pytest.mark.parametrize("options", [{}, {"common_words": 5, "common_freq": 4, "uncommon_freq": 2}])
@pytest.mark.parametrize("n", [32, 64, 256])
def test_the_answer_is_the_common_words_in_ascending_order(options, n):
    t = task(**options)
    for split in (examples(t.heldout_set(n, 8)), examples(t.train_batch(np.random.default_rng(n), 8, n))):
        for tokens, flags in split:
            answer = [tok for tok, f in zip(tokens, flags) if f]
            assert answer == read_answer(tokens, t.cfg)


def test_heldout_questions_never_appear_in_training():
    """One common word twice and 2 others once, of 3 words (36 lists): training draws almost all of its own, never
    a held-out one; the held-out ones hash to bucket 0."""
    t = task(common_words=1, common_freq=2, word_vocab=3, train_lengths="fixed")
    n = 6
    assert t.max_size(n) == 2
    train = set()
    for seed in range(40):
        train |= questions(t.train_batch(np.random.default_rng(seed), 64, n))
    heldout = questions(t.heldout_set(n, 200))
    assert heldout and len(train | heldout) == 36
    assert not train & heldout
    assert all(zlib.crc32(q) % HELDOUT_BUCKETS == 0 for q in heldout)
    assert all(zlib.crc32(q) % HELDOUT_BUCKETS for q in train)


@pytest.mark.parametrize("n", [32, 64, 256])
def test_heldout_examples_fill_their_length_and_answer_at_the_end(n):
    t = task()
    assert t.max_size(n) == n + 1 - 1 - 3 * 3 - 1 - 3  # BOS, 3 common × 3, uncommon × 1, SEP, 3 answers = n + 1
    assert t.filled_length(n) == n
    b = t.heldout_set(n, 4)
    assert b.x.shape == (4, n)
    for tokens, flags in examples(b):
        assert len(tokens) == n + 1
        assert flags[-3:] == [True] * 3 and not any(flags[:-3])
    for tokens, flags in examples(t.train_batch(np.random.default_rng(1), 16, n)):
        assert len(tokens) <= n + 1 and sum(flags) == 3 and flags[-3] and flags[-1]
    assert t.chance(n) == 1 / (256 * 255 * 254 / 6)  # a set of 3 of 256 words
    assert t.vocab_size == 14 + 256


def test_two_occurrences_per_uncommon_word_grow_the_examples_in_steps_of_two():
    t = task(common_freq=4, uncommon_freq=2)
    assert t.length_step == 2
    assert [t.max_size(n) for n in (32, 33, 34)] == [(n - 1 - 3 * 5) // 2 for n in (32, 33, 34)]
    assert t.filled_length(33) == 32
    assert t.chance(64) == 1 / math.comb(256, 3)


def test_lengths_beyond_the_vocabulary_are_refused_naming_it():
    t = task()
    assert t.max_size(256) + 3 == 246 and t.length_problem(256) is None  # 8L at L = 32 fits 256 words
    with pytest.raises(TaskLengthError, match="raise task.word_vocab"):
        t.heldout_set(512, 1)
    assert "raise task.word_vocab to at least 502" in t.length_problem(512)
    assert task(word_vocab=502).length_problem(512) is None


def test_the_yaml_composes_and_bad_options_are_refused_by_name():
    cfg = compose(["task=common_words"], scheme=False)
    assert (cfg.task.name, cfg.task.common_words, cfg.task.common_freq, cfg.task.uncommon_freq,
            cfg.task.word_vocab) == (NAME, 3, 3, 1, 256)
    assert cfg.task.eval_examples == 400 and (cfg.train.name, cfg.model.name) == ("task_xlong", "tiny_fan_in")
    with pytest.raises(ConfigError, match="task.common_freq=1 is out of range"):
        compose(["task=common_words", "task.common_freq=1"], scheme=False)
    with pytest.raises(ConfigError, match="task.common_freq=2 must be above task.uncommon_freq=2"):
        compose(["task=common_words", "task.common_freq=2", "task.uncommon_freq=2"], scheme=False)
    with pytest.raises(ConfigError, match="task.word_vocab=200 is too few for task=common_words at length 256: its "
                                          "examples hold 246 distinct words; raise task.word_vocab to at least 246"):
        compose(["task=common_words", "task.word_vocab=200"], scheme=False)
    with pytest.raises(ConfigError, match="raise task.word_vocab to at least 502"):
        compose(["task=common_words", "train.seq_len=64"], scheme=False)

"""Each task's own options and sizes, read as the spec: the options a task refuses (exactly at the boundary), the
parts of a run's identity a task drops, the digits that get Abacus positions, passkey's depths and text filler, and
the size of an example at length n (the largest that fits n + 1 tokens, and no larger)."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from pe_bench import tasks
from pe_bench.tasks.base import DIGIT0, MARK, SYMBOL0, TaskLengthError


@pytest.mark.parametrize("name, fits, refused, says", [
    ("needle_multikey", {"needle_keys": 4, "needles": 4}, {"needle_keys": 3, "needles": 4},
     "task.needle_keys=3 is fewer than task.needles=4 (the keys of an example are distinct); raise task.needle_keys"),
    ("common_words", {"word_vocab": 10, "common_words": 10}, {"word_vocab": 9, "common_words": 10},
     "task.word_vocab=9 is fewer than task.common_words=10; raise task.word_vocab"),
    ("variable_tracking", {"variable_names": 8, "chains": 2, "hops": 3}, {"variable_names": 7, "chains": 2, "hops": 3},
     "task.variable_names=7 is too few for task.chains=2 × (task.hops=3 + 1) = 8 distinct variables; raise "
     "task.variable_names"),
    ("variable_tracking", {"chains": 10, "value_digits": 1, "variable_names": 64},
     {"chains": 11, "value_digits": 1, "variable_names": 64},
     "task.chains=11 needs distinct values, more than task.value_digits=1 digits give; raise task.value_digits"),
    ("variable_tracking", {"chains": 100, "value_digits": 2, "hops": 0, "variable_names": 128},
     {"chains": 101, "value_digits": 2, "hops": 0, "variable_names": 128},
     "task.chains=101 needs distinct values, more than task.value_digits=2 digits give; raise task.value_digits"),
    ("addition", {"abacus": True, "abacus_max_offset": 7}, {"abacus_max_offset": 7},
     "task.abacus_max_offset is read with task.abacus=true only; set task.abacus=true or remove it"),
    ("addition", {"abacus": True}, {"abacus": True, "reverse_digits": False},
     "task.abacus=true counts digits from each number's first token, which must be its least significant digit; "
     "keep task.reverse_digits=true"),
])
def test_a_task_refuses_options_it_cannot_draw_examples_for_and_only_those(name, fits, refused, says):
    cls = tasks.get(name)
    assert cls.options_problem(tasks.options(name, **fits)) is None
    assert cls.options_problem(tasks.options(name, **refused)) == says


def test_addition_without_abacus_positions_keeps_the_identity_it_had_before_they_existed():
    base = {"name": "addition", "reverse_digits": True, "abacus": False, "abacus_max_offset": 7,
            "abacus_zero_share": 0.5}
    cls = tasks.get("addition")
    assert cls.identity(base) == {"name": "addition", "reverse_digits": True}
    assert cls.identity({**base, "abacus": True}) == {**base, "abacus": True}
    assert cls.digit_positions(tasks.options("addition")) is None
    assert cls.digit_positions(tasks.options("addition", abacus=True, abacus_max_offset=9, abacus_zero_share=0.25)) \
        == (tuple(range(DIGIT0, DIGIT0 + 10)), 9, 0.25)
    assert tasks.get("copy").digit_positions(tasks.options("copy")) is None
    # the task options of a run made before Abacus positions existed have no abacus key: none
    assert cls.digit_positions(OmegaConf.create({"name": "addition", "reverse_digits": True})) is None


def test_a_multikey_candidate_is_a_whole_needle_value_and_a_needle_the_window_cuts_off_names_none():
    task = tasks.build_task(tasks.options("needle_multikey"))
    d, key, digit = task.cfg.value_digits, SYMBOL0 + 3, DIGIT0 + 5
    whole = np.array([0, MARK, key, *[digit] * d])  # its value ends where x ends
    assert task.candidates(whole, whole, whole > 0) == [(digit,) * d]
    cut = np.concatenate([whole, [MARK, key, *[digit] * (d - 1)]])  # a second needle one digit short
    assert task.candidates(cut, cut, cut > 0) == [(digit,) * d]


@pytest.mark.parametrize("depths, expected", [(1, [0.5]), (2, [0.0, 1.0]), (4, [0.0, 0.3333, 0.6667, 1.0])])
def test_passkey_is_evaluated_at_evenly_spaced_depths_or_in_the_middle(depths, expected):
    assert tasks.build_task(tasks.options("passkey", depths=depths)).eval_depths() == expected


def test_passkeys_text_filler_is_a_window_of_the_splits_bytes_and_needs_text():
    with pytest.raises(ValueError, match=r"task.filler=text needs the corpus's tokens \(data=...\)"):
        tasks.get("passkey")(tasks.options("passkey", filler="text"), None)
    tasks.get("passkey")(tasks.options("passkey", filler="random"), None)  # symbols: no text needed
    text = {"train": np.arange(40) % 256, "validation": 100 + np.arange(41) % 100}
    task = tasks.build_task(tasks.options("passkey", filler="text"), text)
    rng = np.random.default_rng(0)
    starts = set()
    for _ in range(200):
        window = task._filler(rng, 30, "train") - SYMBOL0
        assert window.dtype == np.int64 and len(window) == 30
        starts.add(int(window[0]))
        assert window.tolist() == list(range(window[0], window[0] + 30))  # a contiguous window
    assert starts == set(range(10))  # every start that leaves 30 tokens but the last, none past it
    held = task._filler(rng, 40, "heldout") - SYMBOL0  # the held-out examples read the validation split
    assert held[0] >= 100
    byte_text = {"train": text["train"], "validation": np.full(41, 250, dtype=np.uint8)}  # bytes near the top
    held = tasks.build_task(tasks.options("passkey", filler="text"), byte_text)._filler(rng, 40, "heldout")
    assert held.tolist() == [SYMBOL0 + 250] * 40  # shifted past the task's symbols, never wrapped round
    with pytest.raises(TaskLengthError):
        task._filler(rng, 40, "train")  # the split must be longer than the filler


@pytest.mark.parametrize("name", [n for n in tasks.names() if n != "lm"])
def test_an_example_of_the_largest_size_fits_n_plus_one_tokens_and_one_size_more_does_not(name):
    task = tasks.build_task(tasks.options(name))
    rng = np.random.default_rng(0)
    for n in range(task.min_length(), task.min_length() + 7):
        size = task.max_size(n)
        assert len(task.example(rng, size, 0.5, "heldout")[0]) <= n + 1 < len(
            task.example(rng, size + 1, 0.5, "heldout")[0]), (name, n)
    shortest = task.min_length()
    assert task.max_size(shortest) >= task.min_size > task.max_size(shortest - 1)
    assert task.filled_length(shortest) <= shortest


def test_assoc_recall_holds_exactly_as_many_pairs_as_it_has_keys():
    pairs = tasks.build_task(tasks.options("assoc_recall")).max_size(64)
    just = tasks.build_task(tasks.options("assoc_recall", n_keys=pairs))
    just.check_length(64)
    assert just.length_problem(64) is None
    tokens, _, _ = just.example(np.random.default_rng(0), pairs, 0.5, "heldout")
    assert len(set(tokens[1: 2 * pairs: 2])) == pairs  # every key once
    short = tasks.build_task(tasks.options("assoc_recall", n_keys=pairs - 1))
    with pytest.raises(TaskLengthError, match=f"length 64 holds {pairs} pairs, more than task.n_keys={pairs - 1}"):
        short.check_length(64)
    assert short.length_problem(64).startswith(f"task.n_keys={pairs - 1} is too few for task=assoc_recall at length 64")
    with pytest.raises(TaskLengthError):
        short.example(np.random.default_rng(0), pairs, 0.5, "heldout")


def test_common_words_refuses_an_example_with_more_distinct_words_than_its_vocabulary():
    task = tasks.build_task(tasks.options("common_words", word_vocab=12, common_words=4))
    task.example(np.random.default_rng(0), 8, 0.5, "heldout")  # 4 + 8 words: all of them
    with pytest.raises(TaskLengthError, match="13 distinct words need more than task.word_vocab=12"):
        task.example(np.random.default_rng(0), 9, 0.5, "heldout")


@pytest.mark.parametrize("name, longest, says", [
    ("counting", 100000, "task.count_digits=3 is too few for task=counting at length 100000: its strings of 99995 "
                         "letters can hold a count of 99995; raise task.count_digits to at least 5, or use shorter "
                         "lengths"),
    ("assoc_recall", 5000, "task.n_keys=512 is too few for task=assoc_recall at length 5000: its examples hold 2495 "
                           "key-value pairs with distinct keys; raise task.n_keys to at least 2495, or use shorter "
                           "lengths"),
    ("common_words", 5000, "task.word_vocab=256 is too few for task=common_words at length 5000: its examples hold "
                           "4990 distinct words; raise task.word_vocab to at least 4990, or use shorter lengths"),
])
def test_a_length_a_task_cannot_reach_is_one_line_naming_the_option_to_raise(name, longest, says):
    assert tasks.build_task(tasks.options(name)).length_problem(longest) == says


def test_passkey_on_text_refuses_a_symbol_count_it_would_not_read():
    cls = tasks.get("passkey")
    assert cls.options_problem(tasks.options("passkey", filler="text", symbols=8)) == (
        "task.symbols is not read by task.filler=text (the filler is the corpus's bytes); remove it or use "
        "task.filler=random")
    assert cls.options_problem(tasks.options("passkey", filler="text")) is None
    assert cls.options_problem(tasks.options("passkey", symbols=8)) is None

"""Development examples and trivial baselines: recipes are tuned on examples the tables never report, and an
accuracy counts only above what an answer that ignores the question scores."""

import numpy as np
import pytest

from pe_bench.config import compose
from pe_bench.tasks import build_task
from pe_bench.tasks.base import MARK


def task_of(name: str, *overrides: str):
    cfg = compose([f"task={name}", *overrides])
    return build_task(cfg.task, {"train": np.zeros(1), "validation": np.zeros(1)})


def rows_of(batch) -> set[bytes]:
    return {x.tobytes() + y.tobytes() for x, y in zip(batch.x.numpy(), batch.y.numpy())}


@pytest.mark.parametrize("name", ["passkey", "counting", "copy", "needle_multikey"])
def test_development_examples_are_held_out_fixed_and_disjoint_from_the_test_examples(name):
    t = task_of(name)
    dev, test = t.dev_set(64, 50), t.heldout_set(64, 50)
    assert dev.x.shape == test.x.shape == (50, 64)
    assert not rows_of(dev) & rows_of(test)  # no development example is a test example
    assert rows_of(t.dev_set(64, 50)) == rows_of(dev)  # the same every time: a fixed stream
    assert rows_of(t.dev_set(128, 50)).isdisjoint(rows_of(dev))  # per length


def test_a_task_with_few_distinct_questions_refuses_rather_than_repeat_test_examples():
    t = task_of("copy")
    with pytest.raises(Exception, match="development examples"):
        t.dev_set(t.min_length(), 2000)


def test_the_trivial_baseline_is_the_most_frequent_dev_answer_scored_on_the_test_examples():
    t = task_of("counting")
    dev, test = t.dev_set(128, 400), t.heldout_set(128, 400)
    def answers(b):
        return [tuple(y[m].tolist()) for y, m in zip(b.y.numpy(), b.mask.numpy())]

    dev_answers, test_answers = answers(dev), answers(test)
    common = max(set(dev_answers), key=dev_answers.count)
    want = sum(a == common for a in test_answers) / 400
    assert t.trivial_baseline(128, 400) == pytest.approx(want)
    assert t.trivial_baseline(128, 400) > t.chance(128)  # counts are not uniform: a constant beats guessing


def test_on_the_multikey_needle_naming_any_needles_value_scores_one_in_needles():
    t = task_of("needle_multikey")
    test = t.heldout_set(64, 20)
    x, y, m = test.x.numpy()[0], test.y.numpy()[0], test.mask.numpy()[0]
    cands = t.candidates(x, y, m)
    assert len(cands) == t.cfg.needles and tuple(y[m].tolist()) in cands
    assert all(x[i] == MARK for i in np.flatnonzero(x == MARK))
    assert t.trivial_baseline(64, 200) == pytest.approx(1 / t.cfg.needles)
    assert task_of("passkey").candidates(x, y, m) is None  # a task without distractors names none

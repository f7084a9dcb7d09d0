"""The flip-flop language (Liu et al. 2023) as a task: a write first, a read last, each read's bit the last written
one, the ignore probability p of FFL(p) the share of ignores, every read scored; pinned examples, held-out sequences
never trained on, the lengths the examples fill, chance, and the config."""

from __future__ import annotations

import numpy as np
import pytest
from task_examples import check_heldout_never_trained, examples

from pe_bench.config import ConfigError, compose
from pe_bench.tasks import options as task_options
from pe_bench.tasks import BOS, DIGIT0, PAD, SYMBOL0, build_task

WRITE, IGNORE, READ = SYMBOL0, SYMBOL0 + 1, SYMBOL0 + 2


def sequences(p: float, n: int = 129, count: int = 32) -> list[tuple[list[int], list[bool]]]:
    """(tokens, scored flags) of held-out examples at length n, without the padding (an odd n leaves one token)."""
    b = build_task(task_options("flipflop", ignore_prob=p)).heldout_set(n, count)
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
        ["task=passkey"]).train.steps  # the tasks' recipe
    with pytest.raises(ConfigError, match="task.ignore_prob"):
        compose(["task=flipflop", "task.ignore_prob=1"])
    with pytest.raises(ConfigError, match="task.ignore_prob=0.5 is not read by task=copy; it is an option of task=flipflop"):
        compose(["task=copy", "task.ignore_prob=0.5"])


def show(tokens: list[int], flags: list[bool]) -> str:
    """B, then each instruction w/i/r with its bit; a scored bit in brackets."""
    assert tokens[0] == BOS
    words = ["B"]
    for i in range(1, len(tokens), 2):
        bit = str(tokens[i + 1] - DIGIT0)
        words.append("wir"[tokens[i] - WRITE] + (f"[{bit}]" if flags[i + 1] else bit))
    return " ".join(words)


def test_pinned_examples():
    t = build_task(task_options("flipflop"))
    assert [show(*e) for e in examples(t.heldout_set(32, 2))] == [
        "B w1 i1 i1 i1 w0 r[0] i1 i0 i0 i1 i1 i0 i0 i0 r[0] r[0]",
        "B w0 i1 r[0] i0 r[0] i1 w0 i1 i0 r[0] i0 i1 i0 i1 i1 r[0]",
    ]
    assert [show(*e) for e in examples(t.train_batch(np.random.default_rng(0), 2, 32))] == [
        "B w0 i1 r[0] i0 i0 i0 r[0] i0 w0 i0 w0 i1 i1 r[0]",
        "B w0 i0 r[0] r[0] i1 i1 i0 i1 i1 i0 r[0]",
    ]


def test_heldout_sequences_never_appear_in_training():
    """Sequences of 5 instructions (a few hundred): training draws almost all of its own, never a held-out one; the
    held-out ones hash to bucket 0."""
    t = build_task(task_options("flipflop", ignore_prob=0.4, train_lengths="fixed"))
    n = 10
    assert t.max_size(n) == 5

    def seq(b) -> set[bytes]:
        return {np.asarray(tokens, dtype=np.uint8).tobytes() for tokens, _ in examples(b)}

    check_heldout_never_trained(t, n, 100, seq)


@pytest.mark.parametrize("n", [32, 64, 256])
def test_heldout_examples_fill_their_length_and_chance_is_a_guessed_bit_per_read(n):
    t = build_task(task_options("flipflop"))
    assert t.max_size(n) == n // 2 and t.filled_length(n) == n  # BOS + 2 tokens per instruction = n + 1
    b = t.heldout_set(n, 64)
    reads = []
    for tokens, flags in examples(b):
        assert len(tokens) == n + 1 and flags[-1] and tokens[-2] == READ  # the last read ends the example
        reads.append(sum(flags))
    for tokens, flags in examples(t.train_batch(np.random.default_rng(1), 16, n)):
        assert len(tokens) <= n + 1 and len(tokens) % 2 == 1 and flags[-1]
    # the first instruction a write, the last a read, each of the n/2 - 2 others a read with probability 0.1:
    # E[2^-reads] = 1/2 × (0.9 + 0.1/2)^(n/2 - 2)
    assert t.chance(n) == pytest.approx(0.5 * 0.95 ** (n // 2 - 2))
    assert t.chance(32) == pytest.approx(0.2438375, abs=1e-7)
    assert np.mean([2.0**-r for r in reads]) == pytest.approx(t.chance(n), rel=0.5)
    assert t.vocab_size == SYMBOL0 + 3


def test_a_run_is_also_scored_on_sparse_and_dense_sequences_as_their_own_rows(tmp_path):
    """The paper's out-of-distribution tests: FFL(0.98) and FFL(0.1) beside the training FFL(0.8), each its own
    table (the task column), its own chance, a diverged run's rows for every one of them."""
    import json

    import pandas as pd
    from typer.testing import CliRunner

    from pe_bench.cli import app
    from pe_bench.report import collect_accuracy
    from pe_bench.runs import Run

    r = CliRunner().invoke(app, ["train", "task=flipflop", "scheme=rope", "train=smoke", "model.n_layers=1",
                                 "model.d_model=16", "model.n_heads=2", "task.eval_examples=4",
                                 "eval.variants=false", f"results_dir={tmp_path}", "--no-progress"])
    assert r.exit_code == 0, r.output
    run = Run(next((tmp_path / "runs").iterdir()))
    rows = pd.read_csv(run.accuracy_csv)
    assert sorted(set(rows["task"])) == ["flipflop", "flipflop[ignore_prob=0.1]", "flipflop[ignore_prob=0.98]"]
    assert (rows.groupby("task").size() == 4).all()  # L…8L each
    assert len(set(rows["heldout"])) == 12  # other examples for every density and length
    acc = collect_accuracy([run])
    chance = acc.df.set_index(["task", "L_eval"])["chance"]
    dense = build_task(task_options("flipflop", ignore_prob=0.1))
    assert chance[("flipflop[ignore_prob=0.1]", 64)] == dense.chance(64)
    assert chance[("flipflop", 64)] == build_task(task_options("flipflop")).chance(64)
    run.meta_path.write_text(json.dumps({**run.meta().to_json(), "status": "diverged", "diverged_step": 3}))
    diverged = collect_accuracy([run]).df
    assert sorted(set(diverged["task"])) == sorted(set(rows["task"])) and set(diverged["status"]) == {"diverged"}

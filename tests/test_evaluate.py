"""The evaluation protocols: token bookkeeping, sliding vs nonoverlapping, per-position curves, short splits."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pe_bench.build import build_model
from pe_bench.config import compose
from pe_bench.data import DataError
from pe_bench.evaluate import eval_lengths, evaluate, score_windows, scored_span

DEV = torch.device("cpu")


@pytest.fixture(scope="module")
def setup():
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke"])
    torch.manual_seed(0)
    model = build_model(cfg, 256).eval()
    tokens = np.random.default_rng(0).integers(0, 256, 5000).astype(np.uint8)
    return cfg, model, tokens, np.ones(256, dtype=np.int64)


def test_scores_do_not_depend_on_the_batching(setup):
    _, model, tokens, tb = setup
    a = score_windows(model, tokens, tb, 32, 32, 1024, 512, DEV, False)
    b = score_windows(model, tokens, tb, 32, 32, 1024, 10_000, DEV, False)  # other batching, same numbers
    assert a.tokens == b.tokens == 1024
    assert a.nll == pytest.approx(b.nll, rel=1e-6)


def test_sliding_rows_with_S_equal_to_the_length_reproduce_the_nonoverlapping_rows(setup):
    cfg, model, tokens, tb = setup
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.lengths=[32]", "eval.stride=32", "eval.sliding_max_tokens=2048",
                   "eval.modes=[nonoverlapping,sliding]"])
    rows, _, windows = evaluate(model, cfg, tokens, tb, DEV, quiet=True)
    by_mode = {r["mode"]: r for r in rows}
    assert by_mode["sliding"]["stride"] == 32 and by_mode["sliding"]["tokens_scored"] == 2048
    for k in ("loss", "ppl", "bpb", "tokens_scored"):
        assert by_mode["sliding"][k] == by_mode["nonoverlapping"][k]
    per_mode = {m: [w["nll"] for w in windows if w["mode"] == m] for m in by_mode}
    assert per_mode["sliding"] == per_mode["nonoverlapping"]  # window for window


def test_nonoverlapping_is_the_token_weighted_mean_over_blocks(setup):
    _, model, tokens, tb = setup
    s = score_windows(model, tokens, tb, 32, 32, 256, 512, DEV, False)
    x = torch.from_numpy(tokens[:257].astype(np.int64))
    blocks_in, blocks_out = x[:-1].view(8, 32), x[1:].view(8, 32)
    with torch.no_grad():
        ref = F.cross_entropy(model(blocks_in).flatten(0, 1), blocks_out.flatten()).item()
    assert s.loss == pytest.approx(ref, rel=1e-5)
    assert s.bpb == pytest.approx(ref / math.log(2), rel=1e-5)  # byte tokenizer: one byte per token


@pytest.mark.parametrize("stride", [1, 5, 8, 32])
def test_sliding_scores_every_token_once_with_full_context(setup, stride):
    _, model, tokens, tb = setup
    s = score_windows(model, tokens, tb, 32, stride, 300, 512, DEV, False)
    assert s.tokens == 300
    # after the first window, only the last `stride` positions (or fewer, at the end) are scored
    assert s.pos_count[: 32 - stride].sum() == 32 - stride
    if stride == 1:  # S = 1 is exact: each token after the first window sees 31 tokens of context
        assert s.pos_count[-1] == 300 - 31


def test_sliding_differs_from_nonoverlapping_for_small_strides(setup):
    _, model, tokens, tb = setup
    a = score_windows(model, tokens, tb, 32, 32, 512, 512, DEV, False)
    b = score_windows(model, tokens, tb, 32, 4, 512, 512, DEV, False)
    assert a.tokens == b.tokens and a.nll != b.nll


def test_evaluate_rows_and_position_curves(setup):
    cfg, model, tokens, tb = setup
    rows, pos, windows = evaluate(model, cfg, tokens, tb, DEV)
    assert [r["L_eval"] for r in rows if r["mode"] == "nonoverlapping"] == [16, 32, 64, 128]
    for r in rows:  # the per-window losses recompute every row exactly: uncertainty can be computed afterwards
        w = [x for x in windows if all(x[k] == r[k] for k in ("scheme", "L_eval", "mode", "stride", "S", "budget"))]
        assert sum(x["tokens"] for x in w) == r["tokens_scored"]
        assert sum(x["nll"] for x in w) / r["tokens_scored"] == pytest.approx(r["loss"], abs=1e-5)
        assert len(w) == (2048 // r["L_eval"] if r["mode"] == "nonoverlapping" else 1 + (512 - r["L_eval"]) // 16)
    assert {r["mode"] for r in rows} == {"nonoverlapping", "sliding"}
    for r in rows:
        assert r["status"] == "ok" and r["ppl"] == pytest.approx(math.exp(r["loss"]), rel=1e-4)
        assert r["tokens_scored"] == (2048 if r["mode"] == "nonoverlapping" else 512)
        assert r["stride"] == (r["L_eval"] if r["mode"] == "nonoverlapping" else 16)
    for length in (16, 128):  # every scored token lands in exactly one position bucket
        assert sum(p["tokens"] for p in pos if p["L_eval"] == length) == 2048
        assert max(p["pos_end"] for p in pos if p["L_eval"] == length) == length


def test_learned_lengths_past_the_table_are_reported_not_applicable():
    cfg = compose(["scheme=learned", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke"])
    model = build_model(cfg, 256).eval()
    tokens = np.random.default_rng(0).integers(0, 256, 5000).astype(np.uint8)
    rows, _, _ = evaluate(model, cfg, tokens, np.ones(256, dtype=np.int64), DEV)
    na = [r for r in rows if r["status"] == "not_applicable"]
    assert {r["L_eval"] for r in na} == {32, 64, 128}
    assert all("16 rows" in r["note"] and r["ppl"] == "" for r in na)


def test_scored_span_is_a_multiple_of_the_longest_length_and_refuses_short_splits():
    assert scored_span(10_000, 4096, 512) == 4096
    assert scored_span(3_000, 65_536, 512) == 2560
    with pytest.raises(DataError, match="needs at least 2049"):
        scored_span(2_000, 65_536, 512)


def test_eval_lengths_from_ratios_or_explicit():
    cfg = compose(["train.seq_len=64"])
    assert eval_lengths(cfg.eval, 64) == [64, 128, 256, 512]
    cfg = compose(["eval.lengths=[100,50]"])
    assert eval_lengths(cfg.eval, 64) == [50, 100]


def test_a_stop_request_ends_scoring_at_the_next_batch_of_windows(setup):
    """SIGTERM sets the stop flag; scoring checks it between batches (not once per length), so an evaluation ends
    within one batch of windows. Perplexity and accuracy alike."""
    from pe_bench.accuracy import _score
    from pe_bench.distributed import StopRequested, clear_stop, request_stop
    from pe_bench.tasks import build_task
    from pe_bench.config import TaskConfig

    _, model, tokens, tb = setup
    batches = []

    def stop_after_first(windows, scored):
        batches.append(windows)
        request_stop()

    try:
        with pytest.raises(StopRequested):
            score_windows(model, tokens, tb, 32, 32, 4096, 64, DEV, False, on_batch=stop_after_first)
        assert batches == [2]  # 64 tokens per batch: two windows of 32, then the stop; 126 more batches not scored
        heldout = build_task(TaskConfig(name="copy")).heldout_set(16, 8)
        with pytest.raises(StopRequested):
            _score(model, heldout, None, DEV, False, 32)
    finally:
        clear_stop()


class Uniform(torch.nn.Module):
    """A model whose next-token distribution is uniform over the vocabulary: every target costs exactly ln V."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, x: torch.Tensor, positions=None) -> torch.Tensor:  # x: (B, T) → logits (B, T, V)
        return torch.zeros(*x.shape, self.vocab)


def test_bits_per_byte_divides_by_the_utf8_bytes_of_the_targets_not_their_count():
    tokens = np.random.default_rng(1).integers(0, 256, 2000).astype(np.uint8)
    token_bytes = np.arange(256) % 4 + 1  # 1..4 bytes per token, as a BPE vocabulary has
    s = score_windows(Uniform(256), tokens, token_bytes, 32, 32, 256, 512, DEV, False)
    targets = tokens[1:257].astype(np.int64)
    assert s.loss == pytest.approx(math.log(256))
    assert s.bpb == pytest.approx(256 * 8 / token_bytes[targets].sum())  # ln 256 nats = 8 bits per target
    assert s.bpb != pytest.approx(8.0)  # what counting tokens as bytes would give


@pytest.mark.parametrize("stride", [32, 5])
def test_per_position_loss_is_the_token_weighted_mean_of_its_bucket(stride):
    from pe_bench.evaluate import _position_rows

    tokens = np.random.default_rng(2).integers(0, 256, 2000).astype(np.uint8)
    s = score_windows(Uniform(256), tokens, np.ones(256, dtype=np.int64), 32, stride, 512, 512, DEV, False)
    rows = _position_rows({"scheme": "u"}, s, buckets=4)
    assert [(r["pos_start"], r["pos_end"]) for r in rows] == [(0, 8), (8, 16), (16, 24), (24, 32)]
    assert sum(r["tokens"] for r in rows) == s.tokens == 512
    for r in rows:  # every target costs ln 256, whatever the bucket's width or count of scored tokens
        assert r["loss"] == pytest.approx(math.log(256), abs=1e-6)
        assert r["tokens"] == s.pos_count[r["pos_start"]:r["pos_end"]].sum()


class Recording(torch.nn.Module):
    """A model's forward, recording the (windows, tokens) of every batch it is given."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model, self.shapes = model, []

    def forward(self, x, positions=None):
        self.shapes.append(tuple(x.shape))
        return self.model(x, positions)

    def label(self):
        return self.model.label()

    @property
    def scheme(self):
        return self.model.scheme


@pytest.mark.parametrize("tokens_per_batch", [64, 200])
def test_windows_are_batched_up_to_eval_tokens_per_batch_tokens_per_forward(setup, tokens_per_batch):
    cfg, model, tokens, tb = setup
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   f"eval.tokens_per_batch={tokens_per_batch}"])
    rec = Recording(model)
    rows, _, _ = evaluate(rec, cfg, tokens, tb, DEV, quiet=True)
    # at most tokens_per_batch tokens per forward (one window at least: 128 > 64 goes alone), and full batches of as
    # many windows as fit (the last batch of a pass may be short)
    assert rec.shapes and all(b * t <= max(tokens_per_batch, t) for b, t in rec.shapes), rec.shapes
    for length in (16, 32, 64, 128):
        assert max(b for b, t in rec.shapes if t == length) == max(1, tokens_per_batch // length)
    plain, _, _ = evaluate(model, cfg, tokens, tb, DEV, quiet=True)
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in plain], rel=1e-5)


def test_per_position_rows_are_eval_position_buckets_from_the_nonoverlapping_pass(setup):
    """positions.csv's rows at each length: eval.position_buckets buckets covering the window, from the
    non-overlapping pass — its tokens, and their token-weighted mean is that pass's loss."""
    cfg, model, tokens, tb = setup
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.position_buckets=8"])
    rows, pos, _ = evaluate(model, cfg, tokens, tb, DEV, quiet=True)
    for r in (r for r in rows if r["mode"] == "nonoverlapping"):
        p = [x for x in pos if x["L_eval"] == r["L_eval"]]
        n = r["L_eval"]
        assert [(x["pos_start"], x["pos_end"]) for x in p] == [(k * n // 8, (k + 1) * n // 8) for k in range(8)]
        assert sum(x["tokens"] for x in p) == r["tokens_scored"]
        assert sum(x["loss"] * x["tokens"] for x in p) / r["tokens_scored"] == pytest.approx(r["loss"], abs=1e-5)

"""The evaluation protocols: token bookkeeping, sliding vs nonoverlapping, per-position curves, short splits."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from pe_bench.build import build_model
from pe_bench.config import compose, eval_lengths
from pe_bench.data import DataError
from pe_bench.evaluate.perplexity import (
    RANDOM_POSITIONS_SEED,
    Pass,
    Score,
    _row,
    check_feasible,
    context_ranges,
    eval_positions,
    evaluate,
    passes,
    score_windows,
    scored_span,
    sliding_segments,
    window_ends,
)
from pe_bench.schemes.base import LengthNotSupported

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


def test_sliding_with_S_equal_to_the_length_is_nonoverlapping_after_the_warm_up(setup):
    cfg, model, tokens, tb = setup
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.lengths=[16,32]", "eval.stride=32", "eval.sliding_max_tokens=2048",
                   "eval.modes=[nonoverlapping,sliding]"])
    ev = evaluate(model, cfg, tokens, tb, DEV, quiet=True)
    sliding = {r["L_eval"]: r for r in ev.rows if r["mode"] == "sliding"}
    assert sliding[32]["stride"] == 32 and sliding[32]["tokens_scored"] == 2048 and sliding[32]["warmup"] == 32
    # 16 segments of 128 targets (4 windows of the longest length) spread over the 5000 tokens, each after 32 tokens
    # of context only: in each, blocks of 32 as nonoverlapping from there
    free = 4999 - 16 * (32 + 128)
    starts = [j * 160 + j * free // 15 for j in range(16)]
    assert sliding_segments(5000, 2048, 32) == (2048, tuple(starts))
    want = [score_windows(model, tokens, tb, 32, 32, 128, 4096, DEV, False, start=s + 32) for s in starts]
    assert sliding[32]["loss"] == round(sum(w.nll for w in want) / 2048, 6)
    assert [w["nll"] for w in ev.windows if w["mode"] == "sliding" and w["L_eval"] == 32] == \
        [round(n, 6) for w in want for n in w.window_nll]


def test_sliding_segments_spread_over_the_split_and_fit_it():
    assert sliding_segments(303_600, 16384, 512) == (16384, tuple(j * 2560 + j * (303_599 - 8 * 2560) // 7
                                                                  for j in range(8)))
    n, starts = sliding_segments(3000, 2048, 512)  # room for one segment only: its warm-up, then the span
    assert starts == (0,) and n == 2048
    n, starts = sliding_segments(600, 64, 16)  # one segment of 64 targets
    assert (n, starts) == (64, (0,))


def test_sliding_scores_the_same_tokens_at_every_length_each_with_at_least_length_minus_S_context(setup):
    _, model, tokens, tb = setup
    for length in (8, 16, 32):
        s = score_windows(model, tokens, tb, length, 4, 256, 512, DEV, False, start=32)
        assert s.tokens == 256 and all(t == 4 for t in s.window_tokens)
        assert s.pos_count[: length - 4].sum() == 0  # nothing scored with fewer than length − S tokens before it
        ends = window_ends(length, 4, 256, start=32)
        assert ends[0] == (36, 4) and ends[-1][0] == 32 + 256  # targets 33..288 at every length


def test_context_ranges_are_the_half_before_L_and_the_doublings_past_it():
    assert context_ranges(16, 16) == [(8, 16)]
    assert context_ranges(16, 8) == []
    assert context_ranges(16, 32) == [(16, 32)]
    assert context_ranges(16, 128) == [(16, 32), (32, 64), (64, 128), (16, 128)]
    assert context_ranges(16, 48) == [(16, 32), (32, 48), (16, 48)]


def test_context_gain_is_the_loss_past_L_minus_the_loss_of_the_last_half_of_L_windows(setup):
    _, model, tokens, tb = setup
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.lengths=[16,64]", "eval.max_tokens=1024", "eval.modes=[nonoverlapping]"])
    ev = evaluate(model, cfg, tokens, tb, DEV, quiet=True)
    x = torch.from_numpy(tokens[:1025].astype(np.int64))
    with torch.no_grad():
        nll16 = F.cross_entropy(model(x[:-1].view(64, 16)).flatten(0, 1), x[1:].view(64, 16).flatten(),
                                reduction="none").view(64, 16)
        nll64 = F.cross_entropy(model(x[:-1].view(16, 64)).flatten(0, 1), x[1:].view(16, 64).flatten(),
                                reduction="none").view(16, 64)
    ref = nll16[:, 8:].mean().item()
    got = {(r["pos_start"], r["pos_end"]): r for r in ev.context}
    assert set(got) == {(16, 32), (32, 64), (16, 64)}
    for (a, b), r in got.items():
        assert r["ref_loss"] == pytest.approx(ref, abs=2e-6)
        assert r["gain"] == pytest.approx(nll64[:, a:b].mean().item() - ref, abs=2e-6)
        assert r["lo"] < r["gain"] < r["hi"] and r["blocks"] == 16 and r["tokens"] == 16 * (b - a)
        assert r["budget"] == 1024


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
    ev = evaluate(model, cfg, tokens, tb, DEV)
    rows, pos, windows = ev.rows, ev.positions, ev.windows
    assert [r["L_eval"] for r in rows if r["mode"] == "nonoverlapping"] == [16, 32, 64, 128]
    for r in rows:  # the per-window losses recompute every row exactly: uncertainty can be computed afterwards
        w = [x for x in windows if all(x[k] == r[k] for k in ("scheme", "L_eval", "mode", "stride", "S", "budget"))]
        assert sum(x["tokens"] for x in w) == r["tokens_scored"]
        assert sum(x["nll"] for x in w) / r["tokens_scored"] == pytest.approx(r["loss"], abs=1e-5)
        assert len(w) == (2048 // r["L_eval"] if r["mode"] == "nonoverlapping" else 512 // 4)  # S = L/4
    assert {r["mode"] for r in rows} == {"nonoverlapping", "sliding"}
    for r in rows:
        assert r["status"] == "ok" and r["ppl"] == pytest.approx(math.exp(r["loss"]), rel=1e-4)
        assert r["tokens_scored"] == (2048 if r["mode"] == "nonoverlapping" else 512)
        assert r["stride"] == (r["L_eval"] if r["mode"] == "nonoverlapping" else 4)  # S = L/4
    for length in (16, 128):  # every scored token lands in exactly one position bucket
        assert sum(p["tokens"] for p in pos if p["L_eval"] == length) == 2048
        assert max(p["pos_end"] for p in pos if p["L_eval"] == length) == length


def test_learned_lengths_past_the_table_are_reported_not_applicable():
    cfg = compose(["scheme=learned", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke"])
    model = build_model(cfg, 256).eval()
    tokens = np.random.default_rng(0).integers(0, 256, 5000).astype(np.uint8)
    ev = evaluate(model, cfg, tokens, np.ones(256, dtype=np.int64), DEV)
    rows = ev.rows
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
    from pe_bench.tasks import options as task_options
    from pe_bench.distributed import StopRequested, clear_stop, request_stop
    from pe_bench.evaluate.accuracy import _score
    from pe_bench.tasks import build_task

    _, model, tokens, tb = setup
    batches = []

    def stop_after_first(windows, scored):
        batches.append(windows)
        request_stop()

    try:
        with pytest.raises(StopRequested):
            score_windows(model, tokens, tb, 32, 32, 4096, 64, DEV, False, on_batch=stop_after_first)
        assert batches == [2]  # 64 tokens per batch: two windows of 32, then the stop; 126 more batches not scored
        heldout = build_task(task_options("copy")).heldout_set(16, 8)
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
    from pe_bench.evaluate.perplexity import _position_rows

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
    ev = evaluate(rec, cfg, tokens, tb, DEV, quiet=True)
    rows = ev.rows
    # at most tokens_per_batch tokens per forward (one window at least: 128 > 64 goes alone), and full batches of as
    # many windows as fit (the last batch of a pass may be short)
    assert rec.shapes and all(b * t <= max(tokens_per_batch, t) for b, t in rec.shapes), rec.shapes
    for length in (16, 32, 64, 128):
        assert max(b for b, t in rec.shapes if t == length) == max(1, tokens_per_batch // length)
    ev = evaluate(model, cfg, tokens, tb, DEV, quiet=True)
    plain = ev.rows
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in plain], rel=1e-5)


def test_per_position_rows_are_eval_position_buckets_from_the_nonoverlapping_pass(setup):
    """positions.csv's rows at each length: eval.position_buckets buckets covering the window, from the
    non-overlapping pass — its tokens, and their token-weighted mean is that pass's loss."""
    cfg, model, tokens, tb = setup
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.position_buckets=8"])
    ev = evaluate(model, cfg, tokens, tb, DEV, quiet=True)
    rows, pos = ev.rows, ev.positions
    for r in (r for r in rows if r["mode"] == "nonoverlapping"):
        p = [x for x in pos if x["L_eval"] == r["L_eval"]]
        n = r["L_eval"]
        assert [(x["pos_start"], x["pos_end"]) for x in p] == [(k * n // 8, (k + 1) * n // 8) for k in range(8)]
        assert sum(x["tokens"] for x in p) == r["tokens_scored"]
        assert sum(x["loss"] * x["tokens"] for x in p) / r["tokens_scored"] == pytest.approx(r["loss"], abs=1e-5)


def _expected_row(common: dict, mode: str, stride: int, S, budget: int, s, warmup: int = 0) -> dict:
    """An evaluation row as the eval.csv columns of docs/evaluation.md describe it, from a Score computed by
    score_windows."""
    return {**common, "mode": mode, "stride": stride, "S": S, "budget": budget, "warmup": warmup,
            "tokens_scored": s.tokens,
            "loss": round(s.nll / s.tokens, 6), "ppl": round(math.exp(s.nll / s.tokens), 4),
            "bpb": round(s.nll / math.log(2) / s.bytes, 5), "status": "ok", "note": ""}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_evaluation_row_is_exactly_its_settings_and_its_numbers(setup, precision, capsys):
    """Every field of every row — eval rows (both modes), per-window rows and per-position rows — and the one plain
    progress line per length × mode, for lengths that are not multiples of L (ratio rounded to 4 decimals)."""
    _, model, tokens, _ = setup
    tb = np.random.default_rng(1).integers(1, 5, 256)  # 1–4 bytes per token
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=24", "eval=smoke",
                   "eval.lengths=[16,56]", "eval.stride=8", "eval.max_tokens=512", "eval.sliding_max_tokens=256",
                   "eval.modes=[nonoverlapping,sliding,per_position]", "eval.position_buckets=4",
                   f"train.precision={precision}", "seed=3"])
    ev = evaluate(model, cfg, tokens, tb, DEV, step=7, name="RUN")
    rows, pos, windows = ev.rows, ev.positions, ev.windows
    bf16 = precision == "bf16"
    base = {"scheme": model.label(), "base_scheme": "alibi", "model": cfg.model.name, "data": cfg.data.name,
            "split": cfg.eval.split, "L_train": 24, "seed": 3, "step": 7, "precision": precision}
    want, want_pos, lines = [], [], []
    for length, ratio in ((16, 0.6667), (56, 2.3333)):
        common = {**base, "L_eval": length, "ratio": ratio}
        s = score_windows(model, tokens, tb, length, length, 504, cfg.eval.tokens_per_batch, DEV, bf16)
        want.append(_expected_row(common, "nonoverlapping", length, "", 512, s))
        for a, b in ((0, length // 4), (length // 4, length // 2), (length // 2, 3 * length // 4),
                     (3 * length // 4, length)):
            n = s.pos_count[a:b].sum()
            want_pos.append({**common, "budget": 512, "pos_start": a, "pos_end": b,
                             "loss": round(s.pos_nll[a:b].sum() / n, 6), "tokens": int(n)})
        t = score_windows(model, tokens, tb, length, 8, 224, cfg.eval.tokens_per_batch, DEV, bf16, start=56)
        want.append(_expected_row(common, "sliding", 8, 8, 256, t, warmup=56))  # warm-up: the longest length
        lines += [f"RUN eval L={length} nonoverlapping: ppl {math.exp(s.loss):.2f} ({len(s.window_tokens):,} windows",
                  f"RUN eval L={length} sliding: ppl {math.exp(t.loss):.2f} ({len(t.window_tokens):,} windows"]
    assert rows == want
    assert pos == want_pos
    for r in rows:
        mine = [w for w in windows if all(w[k] == r[k] for k in ("L_eval", "mode"))]
        assert [w["window"] for w in mine] == list(range(len(mine)))
        assert set(mine[0]) == {"scheme", "split", "L_eval", "mode", "stride", "S", "budget", "step", "precision",
                                "warmup", "tokens_scored", "window", "nll", "tokens"}
        assert all(w[k] == r[k] for w in mine for k in ("scheme", "split", "stride", "S", "budget", "step",
                                                         "precision", "warmup", "tokens_scored"))
        assert all(w["nll"] == round(w["nll"], 6) for w in mine)
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" tokens,")[0].rsplit(",", 1)[0] for line in out] == lines


def test_rows_of_lengths_a_scheme_cannot_evaluate_are_not_applicable_with_the_reason(capsys):
    cfg = compose(["scheme=rope", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.lengths=[16,24]", "eval.stride=8", "train.random_positions=20",
                   "eval.modes=[nonoverlapping,sliding,per_position]"])
    torch.manual_seed(0)
    model = build_model(cfg, 256).eval()
    tokens = np.random.default_rng(0).integers(0, 256, 3000).astype(np.uint8)
    ev = evaluate(model, cfg, tokens, np.ones(256, dtype=np.int64), DEV, name="RUN")
    rows, pos = ev.rows, ev.positions
    na = [r for r in rows if r["L_eval"] == 24]
    reason = ("trained with randomized positions in [0, 20), which cannot hold 24 distinct positions; raise "
              "train.random_positions")
    common = {"scheme": "rope", "base_scheme": "rope", "model": cfg.model.name, "data": cfg.data.name,
              "split": cfg.eval.split, "L_train": 16, "seed": cfg.seed, "step": cfg.train.steps, "precision": "fp32",
              "L_eval": 24, "ratio": 1.5}
    assert na == [{**common, "mode": mode, "stride": stride, "S": S, "budget": budget, "warmup": warmup, "loss": "",
                   "ppl": "", "bpb": "", "tokens_scored": 0, "status": "not_applicable", "note": reason}
                  for mode, stride, S, budget, warmup in (("nonoverlapping", 24, "", cfg.eval.max_tokens, 0),
                                                          ("sliding", 8, 8, cfg.eval.sliding_max_tokens, 24))]
    assert {p["L_eval"] for p in pos} == {16}
    assert [r["status"] for r in rows if r["L_eval"] == 16] == ["ok", "ok"]
    # the lengths it can evaluate are scored at the run's randomized positions, not at 0..L−1
    at = score_windows(model, tokens, np.ones(256, dtype=np.int64), 16, 16, rows[0]["tokens_scored"], 4096, DEV,
                       positions=eval_positions(cfg, 16, DEV))
    plain = score_windows(model, tokens, np.ones(256, dtype=np.int64), 16, 16, rows[0]["tokens_scored"], 4096, DEV)
    assert rows[0]["mode"] == "nonoverlapping" and rows[0]["loss"] == round(at.loss, 6) != round(plain.loss, 6)
    [_, p] = passes(cfg, 16, len(tokens))
    slid = [score_windows(model, tokens, np.ones(256, dtype=np.int64), 16, 8, n, 4096, DEV,
                          positions=eval_positions(cfg, 16, DEV), start=a) for a, n in p.segments()]
    assert rows[1]["mode"] == "sliding" and rows[1]["loss"] == round(sum(x.nll for x in slid) / p.span, 6)
    assert f"RUN eval L=24: not applicable ({reason})" in capsys.readouterr().out.splitlines()


def test_randomized_positions_at_evaluation_are_a_fixed_sorted_subset_per_length():
    cfg = compose(["scheme=rope", "train.seq_len=16", "train.random_positions=40"])
    a, b = eval_positions(cfg, 16, DEV), eval_positions(cfg, 16, DEV)
    assert torch.equal(a, b) and a.dtype == torch.int64 and len(a) == 16  # fixed per length
    assert bool((a[1:] > a[:-1]).all()) and 0 <= int(a[0]) and int(a[-1]) < 40
    want = torch.randperm(40, generator=torch.Generator().manual_seed(RANDOM_POSITIONS_SEED + 16))[:16].sort().values
    assert torch.equal(a, want)
    assert not torch.equal(eval_positions(cfg, 17, DEV)[:16], a)  # another length, another subset
    assert torch.equal(eval_positions(cfg, 40, DEV), torch.arange(40))  # as many positions as trained: all of them
    with pytest.raises(LengthNotSupported):
        eval_positions(cfg, 41, DEV)
    assert eval_positions(compose(["scheme=rope"]), 16, DEV) is None


def test_a_loss_too_large_for_exp_is_a_nonfinite_row_never_ok():
    common = {"scheme": "x", "L_eval": 8}
    for loss, status in ((699.0, "ok"), (700.0, "nonfinite"), (float("inf"), "nonfinite"), (float("nan"), "nonfinite")):
        s = Score(nll=loss * 4, tokens=4, bytes=4)
        row = _row(common, Pass("sliding", 2, 8, 4, 64, 2), s)
        assert row["status"] == status, loss
        assert {k: row[k] for k in ("scheme", "L_eval", "mode", "stride", "S", "budget", "tokens_scored")} == \
            {"scheme": "x", "L_eval": 8, "mode": "sliding", "stride": 2, "S": 2, "budget": 64, "tokens_scored": 4}
    assert _row(common, Pass("sliding", 2, 8, 4, 64, 2), Score(nll=float("nan"), tokens=4, bytes=4)) == {
        **common, "mode": "sliding", "stride": 2, "S": 2, "budget": 64, "warmup": 8, "tokens_scored": 4, "loss": "nan",
        "ppl": "nan", "bpb": "nan", "status": "nonfinite",
        "note": "non-finite loss: the model overflowed or its weights are not finite"}


def test_the_scored_span_and_the_feasibility_check_at_their_boundaries():
    assert scored_span(33, 10_000, 8) == 32  # exactly MIN_WINDOWS windows: 32 targets need 33 tokens
    with pytest.raises(DataError):
        scored_span(32, 10_000, 8)
    assert scored_span(41, 10_000, 8) == 40 and scored_span(40, 10_000, 8) == 32  # targets = tokens − 1
    assert scored_span(1000, 50, 8) == 48  # the budget, rounded down to whole windows of the longest length
    cfg = compose(["eval.lengths=[8,16]", "eval.max_tokens=64", "eval.modes=[nonoverlapping]"])
    check_feasible(cfg, 65)
    with pytest.raises(DataError):
        check_feasible(cfg, 64)
    sliding = compose(["eval.lengths=[8,16]", "eval.max_tokens=64", "eval.modes=[nonoverlapping,sliding]"])
    check_feasible(sliding, 81)  # sliding: the warm-up of 16 tokens, then 4 windows of 16
    with pytest.raises(DataError, match="after 16 tokens of warm-up"):
        check_feasible(sliding, 80)
    assert scored_span(1000, None, 8) == 992  # no budget: the whole split, in whole windows of the longest length


@pytest.mark.parametrize("modes", ["[nonoverlapping,sliding]", "[sliding]"])
def test_each_pass_reports_its_windows_to_its_progress_bar(setup, monkeypatch, modes):
    """One progress display per length × mode, named after the run and the pass, sized by the pass's windows and
    advanced to exactly that count (no pass a mode did not ask for); bars only where use_bar says so (a terminal),
    nothing at all when quiet."""
    from pe_bench.evaluate import perplexity as evaluate_mod

    shown = []

    class Recorder(evaluate_mod.EvalProgress):
        def __init__(self, name, total_windows, bar, quiet=False):
            super().__init__(name, total_windows, bar=False, quiet=quiet)
            self.record = {"name": name, "total": total_windows, "bar": bar, "quiet": quiet, "done": 0}
            shown.append(self.record)

        def update(self, windows, tokens_so_far):
            self.record["done"] += windows

    _, model, tokens, tb = setup
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.lengths=[16,32]", "eval.stride=8", f"eval.modes={modes}"])
    monkeypatch.setattr(evaluate_mod, "EvalProgress", Recorder)
    for bar in (True, False):
        monkeypatch.setattr(evaluate_mod, "use_bar", lambda progress, bar=bar: progress and bar)
        shown.clear()
        ev = evaluate(model, cfg, tokens, tb, DEV, name="RUN", progress=True)
        rows, windows = ev.rows, ev.windows
        assert [r["name"] for r in shown] == [f"RUN eval L={r['L_eval']} {r['mode']}" for r in rows]
        counts = [sum(1 for w in windows if (w["L_eval"], w["mode"]) == (r["L_eval"], r["mode"])) for r in rows]
        assert [r["total"] for r in shown] == [r["done"] for r in shown] == counts
        assert all(r["bar"] is bar and r["quiet"] is False for r in shown)
    shown.clear()
    evaluate(model, cfg, tokens, tb, DEV, quiet=True)
    assert all(r["quiet"] is True and r["bar"] is False for r in shown)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(length=st.integers(1, 64), stride_frac=st.floats(0.0, 1.0), windows=st.integers(1, 12))
def test_windows_score_every_target_once_with_as_much_context_as_the_stride_allows(length, stride_frac, windows):
    """For any length, stride ≤ length and span ≥ length: the windows' scored targets tile 1..span without gap or
    overlap, each window ends at most `length` tokens after it starts, and every scored target but the first
    window's has at least length − stride tokens of context."""
    stride = max(1, round(stride_frac * length))
    span = length + (windows - 1) * stride - (windows > 1) * (stride // 2)  # a last window that is cut short too
    ends = window_ends(length, stride, span)
    covered = [t for e, n in ends for t in range(e - n + 1, e + 1)]
    assert covered == list(range(1, span + 1))
    assert ends[0] == (length, length) and ends[-1][0] == span
    assert all(0 < n <= stride for _, n in ends[1:]) and all(e >= length for e, _ in ends)


def test_a_stop_before_a_length_says_where_it_stopped(setup):
    from pe_bench.distributed import StopRequested, clear_stop, request_stop

    cfg, model, tokens, tb = setup
    request_stop()
    try:
        with pytest.raises(StopRequested, match="^stopped before evaluating at length 16$"):
            evaluate(model, cfg, tokens, tb, DEV, quiet=True)
    finally:
        clear_stop()


def test_per_position_alone_makes_its_own_pass_and_no_perplexity_rows(setup, capsys):
    _, model, tokens, tb = setup
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.lengths=[16]", "eval.modes=[per_position]", "eval.position_buckets=2"])
    ev = evaluate(model, cfg, tokens, tb, DEV)  # no name: the lines start at "eval"
    rows, pos, windows = ev.rows, ev.positions, ev.windows
    assert rows == [] and windows == []
    s = score_windows(model, tokens, tb, 16, 16, scored_span(len(tokens), cfg.eval.max_tokens, 16),
                      cfg.eval.tokens_per_batch, DEV)
    assert [p["loss"] for p in pos] == [round(s.pos_nll[:8].sum() / s.pos_count[:8].sum(), 6),
                                        round(s.pos_nll[8:].sum() / s.pos_count[8:].sum(), 6)]
    assert capsys.readouterr().out.startswith(f"eval L=16 per_position: ppl {math.exp(s.loss):.2f} (")


def test_the_progress_bar_follows_the_progress_flag_and_quiet_silences_not_applicable_lengths(monkeypatch, capsys):
    from pe_bench.evaluate import perplexity as evaluate_mod

    asked = []
    monkeypatch.setattr(evaluate_mod, "use_bar", lambda progress: asked.append(progress) or False)
    cfg = compose(["scheme=learned", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.lengths=[16,32]", "eval.modes=[nonoverlapping]"])
    model = build_model(cfg, 256).eval()
    tokens = np.random.default_rng(0).integers(0, 256, 3000).astype(np.uint8)
    evaluate(model, cfg, tokens, np.ones(256, dtype=np.int64), DEV)
    assert asked == [True]  # progress defaults to on (a bar when on a terminal)
    out, err = capsys.readouterr()
    assert "eval L=32: not applicable (" in out and err == ""  # a skipped length draws no bar
    evaluate(model, cfg, tokens, np.ones(256, dtype=np.int64), DEV, quiet=True)
    assert capsys.readouterr() == ("", "")


def test_an_eval_time_variants_lines_name_it_and_the_base_schemes_do_not(capsys):
    """The lines of an evaluation say which model they score: `RUN eval rope+yarn×8 L=…` for an eval-time variant,
    `RUN eval L=…` for the trained scheme itself."""
    tokens = np.random.default_rng(0).integers(0, 256, 3000).astype(np.uint8)
    for options, head in (([], "RUN eval L=16"), (["scheme.scaling.type=yarn", "scheme.scaling.factor=8"],
                                                  "RUN eval rope+yarn×8 L=16")):
        cfg = compose(["scheme=rope", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                       "eval.lengths=[16]", "eval.modes=[nonoverlapping]", *options])
        torch.manual_seed(0)
        evaluate(build_model(cfg, 256).eval(), cfg, tokens, np.ones(256, dtype=np.int64), DEV, name="RUN",
                 progress=False)
        assert capsys.readouterr().out.startswith(f"{head} nonoverlapping: ppl "), head


SLIDING = {(10000, 2000, 64): (1995, (0, 1608, 3216, 4825, 6433, 8041, 9650)),
           (3000, 100000, 100): (2495, (0, 600, 1200, 1800, 2400)),
           (100000, 3000, 64): (2992, (0, 9966, 19932, 29898, 39865, 49831, 59797, 69764, 79730, 89696, 99663))}


@pytest.mark.parametrize("args", list(SLIDING))
def test_sliding_segments_each_warm_up_then_score_and_spread_to_the_end_of_the_split(args):
    n_tokens, span, longest = args
    targets, starts = sliding_segments(n_tokens, span, longest)
    assert (targets, starts) == SLIDING[args] and isinstance(targets, int)
    n, per = len(starts), targets // len(starts)
    assert targets == n * per and per >= 4 * longest and targets <= span
    ends = [s + longest + per for s in starts]  # warm-up of `longest`, then `per` scored targets
    assert all(b >= a for a, b in zip(ends, starts[1:]))  # no token scored twice
    assert starts[0] == 0 and ends[-1] == n_tokens - 1  # from the start of the split to its end


def test_the_sliding_stride_is_a_quarter_of_l_and_at_least_one_token():
    from pe_bench.evaluate.perplexity import sliding_stride

    assert sliding_stride(compose(["train.seq_len=64"])) == 16
    assert sliding_stride(compose(["train.seq_len=4", "eval.lengths=[4, 8]"])) == 1
    assert sliding_stride(compose(["train.seq_len=64", "eval.stride=5"])) == 5


def test_the_end_of_evaluation_lines_name_each_mode_and_what_each_length_gave():
    from pe_bench.evaluate.perplexity import summary_lines

    rows = [{"mode": "nonoverlapping", "L_eval": 64, "ppl": "6.734", "status": "ok"},
            {"mode": "sliding", "L_eval": 64, "ppl": "6.5", "status": "ok"},
            {"mode": "nonoverlapping", "L_eval": 256, "ppl": "", "status": "not_applicable"}]
    assert summary_lines("rope eval", rows) == ["rope eval nonoverlapping: ppl 6.73 at 64, not_applicable at 256",
                                                "rope eval sliding: ppl 6.50 at 64"]
    assert summary_lines("x", []) == []


def test_the_accuracy_line_pools_the_depths_of_each_length_and_says_n_a_without_a_scored_row():
    from pe_bench.evaluate.accuracy import summary

    rows = [{"L_eval": 32, "status": "ok", "solved": 9, "examples": 10},
            {"L_eval": 32, "status": "ok", "solved": 10, "examples": 10},
            {"L_eval": 96, "status": "ok", "solved": 1, "examples": 8},
            {"L_eval": 64, "status": "not_applicable", "solved": "", "examples": 10}]
    assert summary(rows, 32) == "exact match at L 95.0%, 2L n/a, 3L 12.5%"
    assert summary([], 32) == "no accuracy rows"


@pytest.mark.parametrize("heldout", ["test", "dev"])
def test_an_accuracy_row_is_scored_on_the_asked_examples_at_the_asked_depth(heldout):
    from pe_bench.evaluate.accuracy import _row, heldout_digest
    from pe_bench.tasks import build_task

    cfg = compose(["task=passkey", "task.eval_examples=3", f"eval.heldout={heldout}"])
    task = build_task(cfg.task)
    model = build_model(cfg, task.vocab_size).eval()
    row = _row(model, cfg, task, {"L_eval": 64}, 0.3, torch.device("cpu"), False)
    expected = task.dev_set(64, 3, 0.3) if heldout == "dev" else task.heldout_set(64, 3, 0.3)
    assert row["status"] == "ok" and row["heldout"] == heldout_digest(expected)
    assert len(row["outcomes"]) == 3 and row["answer_tokens"] == 3 * cfg.task.key_digits


def test_an_accuracy_row_holds_exact_match_and_token_accuracy_of_the_models_greedy_answers():
    from pe_bench.evaluate.accuracy import MISSED, SOLVED, _row, heldout_digest

    from pe_bench.tasks import build_task
    from pe_bench.tasks.base import DIGIT0

    torch.manual_seed(0)  # one-digit passkeys: an untrained model solves some; two examples per forward pass
    cfg = compose(["task=passkey", "task.key_digits=1", "task.eval_examples=20", "train.random_positions=256",
                   "scheme=learned", "eval.tokens_per_batch=128"])
    task = build_task(cfg.task)
    model = build_model(cfg, task.vocab_size).eval()
    with torch.no_grad():  # answers that depend on the positions, always a digit (the other tokens' logits are 0)
        model.scheme.table.normal_(0, 3.0)
        digits = torch.zeros(task.vocab_size, dtype=torch.bool)
        digits[DIGIT0:DIGIT0 + 10] = True
        model.tok_emb.weight[~digits] = 0.0
    at = {"L_eval": 64, "depth": 0.5}
    row = _row(model, cfg, task, at, 0.5, torch.device("cpu"), False)
    batch = task.heldout_set(64, 20, 0.5)
    positions = eval_positions(cfg, 64, torch.device("cpu"))
    with torch.no_grad():
        right = model(batch.x, positions).argmax(-1) == batch.y
        unplaced = model(batch.x).argmax(-1) == batch.y
    assert not torch.equal(right, unplaced)  # the randomized positions change the answers: the row must use them
    solved = int((right | ~batch.mask).all(1).sum())
    correct, scored = int((right & batch.mask).sum()), int(batch.mask.sum())
    assert 0 < solved < 20
    assert row == {**at, "exact_match": round(solved / 20, 6), "token_accuracy": round(correct / scored, 6),
                   "solved": solved, "answer_tokens": scored, "status": "ok", "note": "",
                   "outcomes": "".join(SOLVED if ok else MISSED for ok in (right | ~batch.mask).all(1).tolist()),
                   "heldout": heldout_digest(batch)}


def test_an_accuracy_row_says_not_applicable_or_nonfinite_with_no_number():
    from pe_bench.evaluate.accuracy import _row
    from pe_bench.tasks import build_task

    torch.manual_seed(0)
    cfg = compose(["task=copy", "task.eval_examples=6"])
    task = build_task(cfg.task)
    model = build_model(cfg, task.vocab_size).eval()
    at = {"L_eval": 2, "depth": ""}
    row = _row(model, cfg, task, at, None, torch.device("cpu"), False)
    assert row == {**at, "exact_match": "", "token_accuracy": "", "solved": "", "answer_tokens": 0,
                   "status": "not_applicable", "note": f"task=copy needs inputs of at least {task.min_length()} "
                   "tokens, got 2", "outcomes": "", "heldout": ""}
    batch = task.heldout_set(64, 6)
    poisoned = next(t for t in batch.x[0].tolist() if t not in batch.x[-1].tolist())
    with torch.no_grad():
        model.tok_emb.weight[poisoned] = float("nan")  # only the examples holding this token overflow
    cfg = compose(["task=copy", "task.eval_examples=6", "eval.tokens_per_batch=64"])  # one example per batch
    row = _row(model, cfg, task, {"L_eval": 64}, None, torch.device("cpu"), False)
    assert row == {"L_eval": 64, "exact_match": "nan", "token_accuracy": "nan", "solved": "",
                   "answer_tokens": int(batch.mask.sum()), "status": "nonfinite",
                   "note": "non-finite logits: the model overflowed or its weights are not finite", "outcomes": "",
                   "heldout": ""}


def test_a_held_out_digest_is_the_hash_of_the_inputs_the_last_targets_and_the_answer_flags():
    import hashlib

    from pe_bench.evaluate.accuracy import heldout_digest
    from pe_bench.tasks import build_task

    batch = build_task(compose(["task=copy"]).task).heldout_set(64, 5)
    h = hashlib.sha256(batch.x.numpy().tobytes())
    h.update(batch.y[:, -1:].numpy().tobytes())
    h.update(batch.mask.numpy().tobytes())
    assert heldout_digest(batch) == h.hexdigest()[:16]


def test_the_length_line_pools_the_ok_rows_or_names_why_there_is_no_number():
    from pe_bench.evaluate.accuracy import _length_line

    rows = [{"status": "ok", "solved": 3, "examples": 4, "token_accuracy": 0.5, "answer_tokens": 10, "note": ""},
            {"status": "ok", "solved": 1, "examples": 4, "token_accuracy": 1.0, "answer_tokens": 30, "note": ""},
            {"status": "nonfinite", "solved": "", "examples": 4, "token_accuracy": "nan", "answer_tokens": 5,
             "note": "overflow"}]
    assert _length_line(rows) == "exact match 50.0%, token accuracy 87.5% (8 held-out examples)"
    assert _length_line(rows[2:] + [{"status": "not_applicable", "note": "too short"}]) == "nonfinite (overflow)"


def test_context_rows_pair_each_range_past_l_with_the_last_half_of_l_and_leave_out_empty_ranges():
    from types import SimpleNamespace

    from pe_bench import stats
    from pe_bench.evaluate.perplexity import context_rows

    rng = np.random.default_rng(0)
    ref_count = np.full((16, 1), 8.0)  # 16 windows of L = 16: [8, 16) scored
    ref = SimpleNamespace(loss=2.0, tokens=256, range_nll=ref_count * 2.0, range_count=ref_count)
    counts = np.tile([0.0, 32.0, 48.0], (4, 1))  # 4 windows of 64: [16, 32) scored nothing, [32, 64), [16, 64)
    nll = counts * (1.5 + rng.random((4, 3)))
    long = SimpleNamespace(loss=1.9, tokens=256, range_nll=nll, range_count=counts)
    rows = context_rows({"scheme": "x"}, 16, {16: ref, 64: long}, 1024)
    assert [(r["pos_start"], r["pos_end"]) for r in rows] == [(32, 64), (16, 64)]
    for r, j in zip(rows, (1, 2)):
        g = stats.context_gain(nll[:, j], counts[:, j], np.add.reduceat(ref.range_nll[:, 0], range(0, 16, 4)),
                               np.add.reduceat(ref_count[:, 0], range(0, 16, 4)))
        assert r == {"scheme": "x", "L_eval": 64, "ratio": 4.0, "pos_start": r["pos_start"], "pos_end": 64,
                     "loss": round(g.loss, 6), "ref_loss": round(g.ref_loss, 6), "gain": round(g.gain, 6),
                     "lo": round(g.interval.lo, 6), "hi": round(g.interval.hi, 6), "blocks": 4,
                     "tokens": int(counts[:, j].sum()), "budget": 1024, "tokens_scored": 256}
    silent = SimpleNamespace(loss=2.0, tokens=256, range_nll=0 * ref_count, range_count=0 * ref_count)
    assert context_rows({}, 16, {16: silent, 64: long}, 1024) == []  # L scored nothing in [L/2, L): no reference


def test_sliding_bits_per_byte_count_the_bytes_of_every_segment(setup):
    _, model, tokens, tb = setup
    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke",
                   "eval.lengths=[16,64]", "eval.sliding_max_tokens=1024", "eval.modes=[sliding]"])
    assert len(passes(cfg, 64, len(tokens))[0].starts) > 1  # several segments, each its own pass
    for r in evaluate(model, cfg, tokens, tb, DEV, quiet=True).rows:
        assert float(r["bpb"]) == pytest.approx(float(r["loss"]) / math.log(2), rel=1e-4)  # bytes: one per token


def test_a_whole_split_budget_is_labelled_all():
    from pe_bench.evaluate.perplexity import budget_label

    assert budget_label(None) == "all" and budget_label(4096) == 4096

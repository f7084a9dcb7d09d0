"""Perplexity and bits per byte at each evaluation length, in three modes.

- ``nonoverlapping``: the token stream is cut into blocks of ``L_eval`` tokens, every token scored once (the ALiBi
  paper's headline protocol). Early tokens of each block see little context (the "early-token curse").
- ``sliding``: windows of ``L_eval`` tokens advance by stride S and score only their last S tokens (the first window
  scores all of its tokens), so every scored token after the first window sees at least ``L_eval − S`` tokens of
  context. S = L_eval reproduces nonoverlapping exactly.
- ``per_position``: mean loss by position inside the window (bucketed), from the nonoverlapping pass, showing where
  extrapolation breaks.

All means are token-weighted; every row records how many tokens it scored. All lengths of one run score the same
span of tokens (a multiple of the longest length), so the numbers are comparable across lengths.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from pe_bench.config import Config, reference_length, run_lengths
from pe_bench.data import DataError
from pe_bench.device import bf16_autocast, use_bf16
from pe_bench.distributed import check_stop
from pe_bench.model.decoder import Decoder, random_positions
from pe_bench.progress import EvalProgress, per_length_lines, say, use_bar
from pe_bench.schemes import LengthNotSupported

EVAL_COLUMNS = ["scheme", "base_scheme", "model", "data", "split", "L_train", "L_eval", "ratio", "mode", "stride",
                "loss", "ppl", "bpb", "tokens_scored", "seed", "status", "note", "S", "budget", "step", "precision"]
POSITION_COLUMNS = ["scheme", "base_scheme", "model", "data", "split", "L_train", "L_eval", "ratio", "pos_start",
                    "pos_end", "loss", "tokens", "seed", "budget", "step", "precision"]
WINDOW_COLUMNS = ["scheme", "split", "L_eval", "mode", "stride", "S", "budget", "step", "precision", "tokens_scored",
                  "window", "nll", "tokens"]
# An evaluation row is identified by every setting that changes its number: a new setting adds rows, never replaces.
# S: the sliding stride setting (stride = min(S, L_eval)); empty for nonoverlapping rows.
# precision: fp32 or bf16 (autocast on CUDA): the same weights give slightly different numbers in each.
# tokens_scored: the span, a multiple of the evaluation's longest length, so other length sets score other spans.
EVAL_KEY = ("scheme", "split", "L_eval", "mode", "stride", "S", "budget", "step", "precision", "tokens_scored")
# Per-position rows are replaced a whole curve at a time (another eval.position_buckets makes other buckets).
POSITION_KEY = ("scheme", "split", "L_eval", "budget", "step", "precision")
WINDOW_KEY = EVAL_KEY
MIN_WINDOWS = 4  # the longest eval length must fit this many times in the scored span
RANDOM_POSITIONS_SEED = 9176


@dataclass
class Score:
    nll: float = 0.0  # summed, nats
    tokens: int = 0
    bytes: int = 0
    pos_nll: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (L_eval,) summed nll by position
    pos_count: np.ndarray = field(default_factory=lambda: np.zeros(0))
    window_nll: list[float] = field(default_factory=list)  # per window: summed nll of its scored tokens
    window_tokens: list[int] = field(default_factory=list)  # per window: its scored tokens

    @property
    def loss(self) -> float:
        return self.nll / self.tokens

    @property
    def bpb(self) -> float:
        return self.nll / math.log(2) / self.bytes


def scored_span(n_tokens: int, budget: int, longest: int) -> int:
    """Targets scored: the largest multiple of the longest length within budget and the split (≥ MIN_WINDOWS)."""
    available = n_tokens - 1
    need = MIN_WINDOWS * longest
    if available < need:
        raise DataError(f"the evaluation split has {n_tokens} tokens, but evaluating at length {longest} needs at "
                        f"least {need + 1} ({MIN_WINDOWS} windows); use a longer split or shorter eval.lengths")
    return max(need, (min(budget, available) // longest) * longest)


def check_feasible(cfg: Config, n_tokens: int) -> None:
    """Fail before training, not after, when the evaluation split is too short for the requested lengths."""
    scored_span(n_tokens, cfg.eval.max_tokens, max(run_lengths(cfg)))


@torch.inference_mode()
def score_windows(model: Decoder, tokens: np.ndarray, token_bytes: np.ndarray, length: int, stride: int,
                  span: int, tokens_per_batch: int, device: torch.device, bf16: bool = False,
                  positions: torch.Tensor | None = None,
                  on_batch: Callable[[int, int], None] | None = None) -> Score:
    """Score targets 1..span of `tokens` with windows of `length` advancing by `stride`.

    Window k ends at e_k = length + k·stride (the last one capped at span) and scores its last e_k − e_{k−1} targets
    (all `length` of them for the first window). ``on_batch(windows, tokens scored so far)`` after each batch."""
    ends = window_ends(length, stride, span)
    score = Score(pos_nll=np.zeros(length), pos_count=np.zeros(length))
    per_batch = max(1, tokens_per_batch // length)
    tb = torch.as_tensor(token_bytes, device=device)
    ctx = bf16_autocast(device, bf16)
    for i in range(0, len(ends), per_batch):
        check_stop(f"while evaluating at length {length}")  # a signal: stop within a batch, not after the length
        chunk = ends[i : i + per_batch]
        block = torch.from_numpy(np.stack([np.asarray(tokens[e - length : e + 1], dtype=np.int64) for e, _ in chunk]))
        block = block.to(device)
        x, y = block[:, :-1], block[:, 1:]
        with ctx:
            logits = model(x, positions)
        nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
        nll = nll.view(len(chunk), length)
        n_scored = torch.tensor([n for _, n in chunk], device=device)
        keep = torch.arange(length, device=device)[None, :] >= (length - n_scored)[:, None]
        nll = nll * keep
        score.window_nll += nll.double().sum(1).tolist()
        score.window_tokens += keep.sum(1).tolist()
        score.nll += float(nll.double().sum())
        score.tokens += int(keep.sum())
        score.bytes += int((tb[y] * keep).sum())
        score.pos_nll += nll.double().sum(0).cpu().numpy()
        score.pos_count += keep.sum(0).cpu().numpy()
        if on_batch is not None:
            on_batch(len(chunk), score.tokens)
    return score


def window_ends(length: int, stride: int, span: int) -> list[tuple[int, int]]:
    """(end, targets scored) of each window: see score_windows."""
    ends, prev = [], 0
    e = length
    while prev < span:
        e = min(e, span)
        ends.append((e, e - prev))
        prev, e = e, e + stride
    return ends


def evaluate(model: Decoder, cfg: Config, tokens: np.ndarray, token_bytes: np.ndarray, device: torch.device,
             step: int | None = None, name: str = "", progress: bool = True,
             quiet: bool = False) -> tuple[list[dict], list[dict], list[dict]]:
    """Evaluate one model (one scheme variant, its weights from optimizer step ``step``) at every configured length
    and mode. Returns (eval rows, per-position rows, per-window rows).

    Progress: a bar per length × mode on a terminal (``progress``), and one plain line per finished length × mode,
    headed ``name`` (the run's), e.g. ``NAME eval L=512 nonoverlapping: ppl 6.62 (12 windows, …)``; ``quiet``:
    none of it."""
    ecfg, L = cfg.eval, reference_length(cfg)
    lengths = run_lengths(cfg)
    longest = max(lengths)
    span = scored_span(len(tokens), ecfg.max_tokens, longest)
    sliding_span = scored_span(len(tokens), ecfg.sliding_max_tokens, longest)
    stride = ecfg.stride or L
    bf16 = use_bf16(cfg.train, device)
    step = cfg.train.steps if step is None else step
    label = model.label()
    base = {"scheme": label, "base_scheme": model.scheme.name, "model": cfg.model.name,
            "data": cfg.data.name, "split": ecfg.split, "L_train": L, "seed": cfg.seed, "step": step,
            "precision": "bf16" if bf16 else "fp32"}
    budgets = {"nonoverlapping": ecfg.max_tokens, "sliding": ecfg.sliding_max_tokens}
    rows: list[dict] = []
    pos_rows: list[dict] = []
    win_rows: list[dict] = []
    model.eval()
    bar = use_bar(progress)
    head = " ".join(x for x in (name, "eval", label if label != cfg.scheme.get("name") else "") if x)
    each = quiet or not per_length_lines()  # no line per length: a summary per mode at the end (unless quiet)

    def scored(mode: str, length: int, advance: int, targets: int, positions: torch.Tensor | None) -> Score:
        shown = EvalProgress(f"{head} L={length} {mode}", len(window_ends(length, advance, targets)), bar, each)
        try:
            s = score_windows(model, tokens, token_bytes, length, advance, targets, ecfg.tokens_per_batch, device,
                              bf16, positions, shown.update)
        finally:
            shown.close()
        shown.finish(s.loss, len(s.window_tokens), s.tokens)
        return s

    spans = {"nonoverlapping": span, "sliding": sliding_span}
    for length in lengths:
        check_stop(f"before evaluating at length {length}")  # a signal (e.g. Slurm's): the rerun evaluates again
        common = {**base, "L_eval": length, "ratio": round(length / L, 4)}
        strides = {"nonoverlapping": length, "sliding": min(stride, length)}
        try:
            r, p, w = _at_length(scored, cfg, common, length, eval_positions(cfg, length, device), spans, budgets,
                                  stride)
            rows += r
            pos_rows += p
            win_rows += w
        except LengthNotSupported as e:
            EvalProgress(f"{head} L={length}", 0, bar=False, quiet=each).skip(str(e))
            rows += [{**common, "mode": mode, "stride": strides[mode], "S": stride if mode == "sliding" else "",
                      "budget": budgets[mode], "loss": "", "ppl": "",
                      "bpb": "", "tokens_scored": 0, "status": "not_applicable", "note": str(e)}
                     for mode in ecfg.modes if mode in strides]
    if not quiet and each:  # one summary line per mode
        say("\n".join(summary_lines(head, rows)))
    return rows, pos_rows, win_rows


def summary_lines(head: str, rows: list[dict]) -> list[str]:
    """One line per mode: ``NAME eval nonoverlapping: ppl 6.73 at 64, 6.66 at 128, n/a at 256 (…)``."""
    out = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        cells = [f"{float(r['ppl']):.2f} at {r['L_eval']}" if r["status"] == "ok" else f"{r['status']} at {r['L_eval']}"
                 for r in rows if r["mode"] == mode]
        out.append(f"{head} {mode}: ppl {', '.join(cells)}")
    return out


def _at_length(scored: Callable[..., Score], cfg: Config, common: dict, length: int, positions: torch.Tensor | None,
               spans: dict[str, int], budgets: dict[str, int],
               stride: int) -> tuple[list[dict], list[dict], list[dict]]:
    """(eval rows, per-position rows, per-window rows) of one eval length in every configured mode: one pass in
    non-overlapping blocks serves ``nonoverlapping`` and ``per_position``, one sliding pass ``sliding``.
    ``scored(mode, length, advance, targets, positions)`` scores the windows of one pass; ``stride``: the sliding
    stride setting S."""
    ecfg = cfg.eval
    rows: list[dict] = []
    pos_rows: list[dict] = []
    win_rows: list[dict] = []
    if {"nonoverlapping", "per_position"} & set(ecfg.modes):
        s = scored("nonoverlapping" if "nonoverlapping" in ecfg.modes else "per_position", length, length,
                   spans["nonoverlapping"], positions)
        if "nonoverlapping" in ecfg.modes:
            rows.append(_row(common, "nonoverlapping", length, "", budgets["nonoverlapping"], s))
            win_rows += _window_rows(rows[-1], s)
        if "per_position" in ecfg.modes:
            pos_rows.extend(_position_rows({**common, "budget": budgets["nonoverlapping"]}, s, ecfg.position_buckets))
    if "sliding" in ecfg.modes:
        s = scored("sliding", length, min(stride, length), spans["sliding"], positions)
        rows.append(_row(common, "sliding", min(stride, length), stride, budgets["sliding"], s))
        win_rows += _window_rows(rows[-1], s)
    return rows, pos_rows, win_rows


def eval_positions(cfg: Config, length: int, device: torch.device) -> torch.Tensor | None:
    """Positions of every window at this length: None (0..length-1), or for a run trained with randomized
    positions a sorted random subset of the same range, fixed per length (Ruoss et al. sample at test time too)."""
    n = cfg.train.random_positions
    if not n:
        return None
    if length > n:
        raise LengthNotSupported(f"trained with randomized positions in [0, {n}), which cannot hold {length} "
                                 f"distinct positions; raise train.random_positions")
    return random_positions(n, length, torch.Generator().manual_seed(RANDOM_POSITIONS_SEED + length)).to(device)


def _row(common: dict, mode: str, stride: int, S: int | str, budget: int, s: Score) -> dict:
    """One evaluation row. A non-finite loss (overflow, a broken model) is status ``nonfinite``, never ``ok``."""
    row = {**common, "mode": mode, "stride": stride, "S": S, "budget": budget, "tokens_scored": s.tokens}
    if not math.isfinite(s.loss) or s.loss >= 700:  # exp overflows float64 past ~709
        return {**row, "loss": "nan", "ppl": "nan", "bpb": "nan", "status": "nonfinite",
                "note": "non-finite loss: the model overflowed or its weights are not finite"}
    return {**row, "loss": round(s.loss, 6), "ppl": round(math.exp(s.loss), 4), "bpb": round(s.bpb, 5),
            "status": "ok", "note": ""}


def _window_rows(row: dict, s: Score) -> list[dict]:
    """Per-window summed nll and scored tokens, enough to recompute the row and its uncertainty afterwards."""
    key = {k: row[k] for k in WINDOW_COLUMNS[:10]}
    return [{**key, "window": i, "nll": round(n, 6), "tokens": t}
            for i, (n, t) in enumerate(zip(s.window_nll, s.window_tokens))]


def _position_rows(common: dict, s: Score, buckets: int) -> list[dict]:
    length = len(s.pos_nll)
    edges = np.unique(np.linspace(0, length, min(buckets, length) + 1).round().astype(int))
    out = []
    for a, b in itertools.pairwise(edges):
        n = s.pos_count[a:b].sum()
        if n:
            out.append({**common, "pos_start": int(a), "pos_end": int(b), "loss": round(s.pos_nll[a:b].sum() / n, 6),
                        "tokens": int(n)})
    return out

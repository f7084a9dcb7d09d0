"""Perplexity and bits per byte at each evaluation length, in three modes, and how much a model gains from the
context past its training length.

- ``nonoverlapping``: the token stream is cut into blocks of ``L_eval`` tokens, every token scored once (the ALiBi
  paper's headline protocol). Early tokens of each block see little context (the "early-token curse"): a longer
  block lowers the mean loss by diluting them, even for a model that ignores the extra context.
- ``sliding``: in segments spread evenly over the split, the first ``warmup`` tokens (the longest evaluation
  length) are context only; then windows of ``L_eval`` tokens advance by stride S and score only their last S
  tokens, so every scored token sees at least ``L_eval − S`` tokens of context, and every length scores the same
  tokens (Press et al. 2022, Appendix B).
- ``per_position``: mean loss by position inside the window (bucketed), from the nonoverlapping pass, showing where
  extrapolation breaks.
- ``repetition``: the repetition probe (:mod:`pe_bench.evaluate.repetition`): a passage repeated d tokens later in
  real text, d = L/2 … 7L; whether the model uses the copy d tokens back.

Context use (:func:`context_rows`): from the nonoverlapping pass, the mean loss at positions [L, 2L), [2L, 4L), …
and [L, L_eval) of the longer windows minus the mean loss at positions [L/2, L) of the L windows: negative = the
context past L helps; about 0 = the model does not break but does not use it either; positive = it breaks. Its
interval is a moving-block bootstrap over blocks of the longest length (each block holds the long window and the L
windows over the same tokens, so the difference is paired).

All means are token-weighted; every row records how many tokens it scored. All lengths of one run score the same
span of tokens (a multiple of the longest length; by default the whole split), so the numbers are comparable across
lengths.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from pe_bench import stats
from pe_bench.config import Config, reference_length, run_lengths
from pe_bench.data import DataError
from pe_bench.device import bf16_autocast, use_bf16
from pe_bench.distributed import check_stop
from pe_bench.evaluate.nll import token_nll
from pe_bench.evaluate.repetition import passage_starts, repetition_rows
from pe_bench.model.decoder import Decoder, random_positions
from pe_bench.progress import EvalProgress, per_length_lines, say, use_bar
from pe_bench.schemes import LengthNotSupported

EVAL_COLUMNS = ["scheme", "base_scheme", "model", "data", "split", "L_train", "L_eval", "ratio", "mode", "stride",
                "loss", "ppl", "bpb", "tokens_scored", "seed", "status", "note", "S", "budget", "step", "precision",
                "warmup"]
POSITION_COLUMNS = ["scheme", "base_scheme", "model", "data", "split", "L_train", "L_eval", "ratio", "pos_start",
                    "pos_end", "loss", "tokens", "seed", "budget", "step", "precision"]
WINDOW_COLUMNS = ["scheme", "split", "L_eval", "mode", "stride", "S", "budget", "step", "precision", "warmup",
                  "tokens_scored", "window", "nll", "tokens"]
CONTEXT_COLUMNS = ["scheme", "base_scheme", "model", "data", "split", "L_train", "L_eval", "ratio", "pos_start",
                   "pos_end", "loss", "ref_loss", "gain", "lo", "hi", "blocks", "tokens", "seed", "budget", "step",
                   "precision", "tokens_scored"]
# An evaluation row is identified by every setting that changes its number: a new setting adds rows, never replaces.
# S: the sliding stride setting (stride = min(S, L_eval)); empty for nonoverlapping rows.
# precision: fp32 or bf16 (autocast on CUDA): the same weights give slightly different numbers in each.
# tokens_scored: the span, a multiple of the evaluation's longest length, so other length sets score other spans.
# warmup: tokens of context before the first scored one (sliding); 0: the first window scored all of its tokens.
EVAL_KEY = ("scheme", "split", "L_eval", "mode", "stride", "S", "budget", "step", "precision", "warmup",
            "tokens_scored")
# Per-position rows are replaced a whole curve at a time (another eval.position_buckets makes other buckets).
POSITION_KEY = ("scheme", "split", "L_eval", "budget", "step", "precision")
WINDOW_KEY = EVAL_KEY
KEY_DEFAULTS = {"warmup": "0"}  # a key column that older files lack: the value that their rows had
CONTEXT_KEY = ("scheme", "split", "L_eval", "pos_start", "pos_end", "budget", "step", "precision", "tokens_scored")
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
    range_nll: list[np.ndarray] = field(default_factory=list)  # per window: (R,) summed nll in each position range
    range_count: list[np.ndarray] = field(default_factory=list)  # per window: (R,) scored tokens in each range

    @property
    def loss(self) -> float:
        return self.nll / self.tokens

    def extend(self, other: Score) -> None:
        """Add the windows of another pass at the same length after this one's."""
        self.nll += other.nll
        self.tokens += other.tokens
        self.bytes += other.bytes
        self.pos_nll = self.pos_nll + other.pos_nll
        self.pos_count = self.pos_count + other.pos_count
        for f in ("window_nll", "window_tokens", "range_nll", "range_count"):
            getattr(self, f).extend(getattr(other, f))

    @property
    def bpb(self) -> float:
        return self.nll / math.log(2) / self.bytes


def scored_span(n_tokens: int, budget: int | None, longest: int, warmup: int = 0) -> int:
    """Targets scored: the largest multiple of the longest length within budget (None: the whole split) and the
    split after ``warmup`` context-only tokens (≥ MIN_WINDOWS of the longest length)."""
    available = n_tokens - 1 - warmup
    need = MIN_WINDOWS * longest
    if available < need:
        raise DataError(f"the evaluation split has {n_tokens} tokens, but evaluating at length {longest} needs at "
                        f"least {need + warmup + 1} ({MIN_WINDOWS} windows"
                        f"{f' after {warmup} tokens of warm-up' if warmup else ''}); use a longer split or shorter "
                        "eval.lengths")
    return max(need, (min(available if budget is None else budget, available) // longest) * longest)


def sliding_stride(cfg: Config) -> int:
    """The sliding stride setting S: eval.stride, or L/4 (every scored token then sees ≥ 3/4 of its window)."""
    return cfg.eval.stride or max(1, reference_length(cfg) // 4)


def check_feasible(cfg: Config, n_tokens: int) -> None:
    """Fail before training, not after, when the evaluation split is too short for the requested lengths."""
    longest = max(run_lengths(cfg))
    scored_span(n_tokens, cfg.eval.max_tokens, longest)
    if "sliding" in cfg.eval.modes:
        scored_span(n_tokens, cfg.eval.sliding_max_tokens, longest, warmup=longest)
    if "repetition" in cfg.eval.modes:
        passage_starts(n_tokens, reference_length(cfg))


def context_ranges(L: int, length: int) -> list[tuple[int, int]]:
    """Position ranges of a window of ``length`` whose loss measures context use: [L/2, L) in an L window (the
    reference: the last half of what training saw); in a longer one [L, 2L), [2L, 4L), … (capped at ``length``),
    then [L, length) whole. Shorter windows: none."""
    if length == L:
        return [(L // 2, L)]
    if length < L:
        return []
    out, a = [], L
    while a < length:
        out.append((a, min(2 * a, length)))
        a *= 2
    return out + ([(L, length)] if len(out) > 1 else [])


@torch.inference_mode()
def score_windows(model: Decoder, tokens: np.ndarray, token_bytes: np.ndarray, length: int, stride: int,
                  span: int, tokens_per_batch: int, device: torch.device, bf16: bool = False,
                  positions: torch.Tensor | None = None,
                  on_batch: Callable[[int, int], None] | None = None, start: int = 0,
                  ranges: Sequence[tuple[int, int]] = ()) -> Score:
    """Score targets start+1..start+span of `tokens` with windows of `length` advancing by `stride`.

    Window k ends at e_k = max(length, start + stride) + k·stride (the last one capped at start + span) and scores
    its last e_k − e_{k−1} targets (e_{−1} = start: with start = 0 the first window scores all `length` of them).
    ``ranges``: position ranges [a, b) whose summed nll and scored count are kept per window (Score.range_nll).
    ``on_batch(windows, tokens scored so far)`` after each batch."""
    ends = window_ends(length, stride, span, start)
    score = Score(pos_nll=np.zeros(length), pos_count=np.zeros(length))
    in_range = torch.zeros(len(ranges), length, device=device)  # (R, length): 1 inside each range
    for j, (a, b) in enumerate(ranges):
        in_range[j, a:b] = 1
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
            nll = token_nll(model, x, y, positions)  # (windows, length)
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
        if ranges:
            score.range_nll += list((nll.double() @ in_range.T.double()).cpu().numpy())  # (windows, R)
            score.range_count += list((keep.double() @ in_range.T.double()).cpu().numpy())
        if on_batch is not None:
            on_batch(len(chunk), score.tokens)
    return score


def window_ends(length: int, stride: int, span: int, start: int = 0) -> list[tuple[int, int]]:
    """(end, targets scored) of each window: see score_windows."""
    ends, prev, last = [], start, start + span
    e = max(length, start + stride)
    while prev < last:
        e = min(e, last)
        ends.append((e, e - prev))
        prev, e = e, e + stride
    return ends


@dataclass
class Evaluation:
    """What one evaluation of one model writes: eval.csv, positions.csv, windows.csv, context.csv and
    repetition.csv rows."""

    rows: list[dict] = field(default_factory=list)
    positions: list[dict] = field(default_factory=list)
    windows: list[dict] = field(default_factory=list)
    context: list[dict] = field(default_factory=list)
    repetition: list[dict] = field(default_factory=list)

    def __iadd__(self, other: Evaluation) -> Evaluation:
        for f in ("rows", "positions", "windows", "context", "repetition"):
            getattr(self, f).extend(getattr(other, f))
        return self


@dataclass(frozen=True)
class Pass:
    """One way of scoring a length: in each segment starting at token ``starts[j]``, ``warmup`` tokens of context
    only, then windows advancing by ``advance`` over the next span / len(starts) targets."""

    mode: str
    advance: int
    warmup: int  # context-only tokens before each segment's first scored target
    span: int  # targets scored in all
    budget: int | str  # the setting that chose the span ("all": the whole split)
    S: int | str  # the sliding stride setting; "" for nonoverlapping
    starts: tuple[int, ...] = (0,)

    def segments(self) -> list[tuple[int, int]]:
        """(first target − 1, targets) of each segment."""
        per = self.span // len(self.starts)
        return [(s + self.warmup, per) for s in self.starts]

    def windows(self, length: int) -> int:
        return sum(len(window_ends(length, self.advance, n, a)) for a, n in self.segments())


def sliding_segments(n_tokens: int, span: int, longest: int) -> tuple[int, tuple[int, ...]]:
    """(targets scored, segment starts) of the sliding evaluation: segments of MIN_WINDOWS·longest targets or more,
    each after its own warm-up of ``longest`` tokens, spread evenly over the split (so that a token budget smaller
    than the split samples all of it, not its first pages)."""
    available, seg = n_tokens - 1, MIN_WINDOWS * longest
    n = max(1, min(span // seg, available // (longest + seg)))
    per = min(span // n, available // n - longest)
    free = available - n * (longest + per)
    return n * per, tuple(j * (longest + per) + (j * free) // (n - 1 if n > 1 else 1) for j in range(n))


def passes(cfg: Config, length: int, n_tokens: int) -> list[Pass]:
    """The passes that one eval length takes under ``cfg.eval``: nonoverlapping (it also serves per_position and
    context use) and sliding."""
    ecfg, longest = cfg.eval, max(run_lengths(cfg))
    out = []
    if {"nonoverlapping", "per_position"} & set(ecfg.modes):
        out.append(Pass("nonoverlapping", length, 0, scored_span(n_tokens, ecfg.max_tokens, longest), budget_label(
            ecfg.max_tokens), ""))
    if "sliding" in ecfg.modes:
        S = sliding_stride(cfg)
        span, starts = sliding_segments(n_tokens, scored_span(n_tokens, ecfg.sliding_max_tokens, longest,
                                                              warmup=longest), longest)
        out.append(Pass("sliding", min(S, length), longest, span, budget_label(ecfg.sliding_max_tokens), S, starts))
    return out


def budget_label(budget: int | None) -> int | str:
    """The ``budget`` column: the token budget, or "all" for the whole split."""
    return "all" if budget is None else budget


def evaluate(model: Decoder, cfg: Config, tokens: np.ndarray, token_bytes: np.ndarray, device: torch.device,
             step: int | None = None, name: str = "", progress: bool = True, quiet: bool = False) -> Evaluation:
    """Evaluate one model (one scheme variant, its weights from optimizer step ``step``) at every configured length
    and mode: eval rows, per-position rows, per-window rows and context-use rows (:func:`context_rows`).

    Progress: a bar per length × mode on a terminal (``progress``), and one plain line per finished length × mode,
    headed ``name`` (the run's), e.g. ``NAME eval L=512 nonoverlapping: ppl 6.62 (12 windows, …)``; ``quiet``:
    none of it."""
    L = reference_length(cfg)
    bf16 = use_bf16(cfg.train, device)
    step = cfg.train.steps if step is None else step
    label = model.label()
    base = {"scheme": label, "base_scheme": model.scheme.name, "model": cfg.model.name,
            "data": cfg.data.name, "split": cfg.eval.split, "L_train": L, "seed": cfg.seed, "step": step,
            "precision": "bf16" if bf16 else "fp32"}
    out, blocks = Evaluation(), {}
    model.eval()
    bar = use_bar(progress)
    head = " ".join(x for x in (name, "eval", label if label != cfg.scheme.get("name") else "") if x)
    each = quiet or not per_length_lines()  # no line per length: a summary per mode at the end (unless quiet)

    def scored(p: Pass, length: int, positions: torch.Tensor | None) -> Score:
        ranges = context_ranges(L, length) if p.mode == "nonoverlapping" else []
        what = p.mode if p.mode in cfg.eval.modes else "per_position"  # a pass made for the curves alone
        shown = EvalProgress(f"{head} L={length} {what}", p.windows(length), bar, each)
        s = Score(pos_nll=np.zeros(length), pos_count=np.zeros(length))
        def update(done: int) -> Callable[[int, int], None]:  # tokens scored in earlier segments
            return lambda w, t: shown.update(w, done + t)

        try:
            for start, n in p.segments():
                s.extend(score_windows(model, tokens, token_bytes, length, p.advance, n, cfg.eval.tokens_per_batch,
                                       device, bf16, positions, update(s.tokens), start, ranges))
        finally:
            shown.close()
        shown.finish(s.loss, len(s.window_tokens), s.tokens)
        if ranges:
            blocks[length] = s
        return s

    for length in run_lengths(cfg):
        check_stop(f"before evaluating at length {length}")  # a signal (e.g. Slurm's): the rerun evaluates again
        common = {**base, "L_eval": length, "ratio": round(length / L, 4)}
        todo = passes(cfg, length, len(tokens))
        try:
            out += _at_length(scored, cfg, common, length, eval_positions(cfg, length, device), todo)
        except LengthNotSupported as e:
            EvalProgress(f"{head} L={length}", 0, bar=False, quiet=each).skip(str(e))
            out.rows += _not_applicable(common, [p for p in todo if p.mode in cfg.eval.modes], str(e))
    if "nonoverlapping" in cfg.eval.modes:
        out.context = context_rows(base, L, blocks, budget_label(cfg.eval.max_tokens))
    if "repetition" in cfg.eval.modes:
        check_stop("before the repetition probe")
        out.repetition = repetition_rows(model, tokens, L, base, device, bf16, cfg.eval.tokens_per_batch,
                                         lambda n: eval_positions(cfg, n, device))
        if not quiet:
            say(repetition_line(head, out.repetition))
    if not quiet and each:  # one summary line per mode
        say("\n".join(summary_lines(head, out.rows)))
    return out


def _not_applicable(common: dict, todo: list[Pass], note: str) -> list[dict]:
    """The eval rows of the passes a scheme cannot run at this length (e.g. past a learned table), each saying why."""
    return [{**common, "mode": p.mode, "stride": p.advance, "S": p.S, "budget": p.budget, "warmup": p.warmup,
             "loss": "", "ppl": "", "bpb": "", "tokens_scored": 0, "status": "not_applicable", "note": note}
            for p in todo]

def repetition_line(head: str, rows: list[dict]) -> str:
    """``NAME eval repetition: copy gain -0.412 at 32, … (128 passages of 32 tokens)``."""
    cells = [f"{float(r['gain']):+.3f} at {r['distance']}" if r["status"] == "ok" else f"{r['status']} at "
             f"{r['distance']}" for r in rows]
    return (f"{head} repetition: copy gain {', '.join(cells)} ({rows[0]['passages']} passages of "
            f"{rows[0]['passage_tokens']} tokens)")


def summary_lines(head: str, rows: list[dict]) -> list[str]:
    """One line per mode: ``NAME eval nonoverlapping: ppl 6.73 at 64, 6.66 at 128, n/a at 256 (…)``."""
    out = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        cells = [f"{float(r['ppl']):.2f} at {r['L_eval']}" if r["status"] == "ok" else f"{r['status']} at {r['L_eval']}"
                 for r in rows if r["mode"] == mode]
        out.append(f"{head} {mode}: ppl {', '.join(cells)}")
    return out


def _at_length(scored: Callable[[Pass, int, torch.Tensor | None], Score], cfg: Config, common: dict, length: int,
               positions: torch.Tensor | None, todo: list[Pass]) -> Evaluation:
    """Rows of one eval length in every configured mode: the nonoverlapping pass serves ``nonoverlapping`` and
    ``per_position``, the sliding pass ``sliding``. ``scored(pass, length, positions)`` scores one pass."""
    modes, out = cfg.eval.modes, Evaluation()
    for p in todo:
        s = scored(p, length, positions)
        if p.mode in modes:
            out.rows.append(_row(common, p, s))
            out.windows += _window_rows(out.rows[-1], s)
        if p.mode == "nonoverlapping" and "per_position" in modes:
            out.positions += _position_rows({**common, "budget": p.budget}, s, cfg.eval.position_buckets)
    return out


def context_rows(base: dict, L: int, scores: dict[int, Score], budget: int | str) -> list[dict]:
    """Context use (see the module's docstring) at every length longer than L, from the nonoverlapping passes'
    per-window range sums (``scores``: length → its Score, every length on the same span). A pair of ranges one of
    whose sides scored nothing, or is not finite (its eval row says ``nonfinite``), is left out. Empty when L itself
    was not evaluated."""
    if L not in scores or not math.isfinite(scores[L].loss):
        return []
    longest = max(scores)
    ref = _per_block(scores[L], L, longest)  # (blocks, 2): nll and count of [L/2, L)
    out = []
    for length, s in sorted(scores.items()):
        if length <= L or not math.isfinite(s.loss):
            continue
        sums = _per_block(s, length, longest)  # (blocks, 2·R)
        for j, (a, b) in enumerate(context_ranges(L, length)):
            part = sums[:, 2 * j : 2 * j + 2]
            if part[:, 1].sum() == 0 or ref[:, 1].sum() == 0:
                continue
            g = stats.context_gain(part[:, 0], part[:, 1], ref[:, 0], ref[:, 1])
            out.append({**base, "L_eval": length, "ratio": round(length / L, 4), "pos_start": a, "pos_end": b,
                        "loss": round(g.loss, 6), "ref_loss": round(g.ref_loss, 6), "gain": round(g.gain, 6),
                        "lo": round(g.interval.lo, 6), "hi": round(g.interval.hi, 6), "blocks": g.interval.n,
                        "tokens": int(part[:, 1].sum()), "budget": budget, "tokens_scored": s.tokens})
    return out


def _per_block(s: Score, length: int, longest: int) -> np.ndarray:
    """(blocks, 2·R): per block of ``longest`` tokens, each range's summed nll and count, interleaved, from the
    per-window sums of a nonoverlapping pass at ``length`` (window w lies in block w·length // longest)."""
    nll, count = np.asarray(s.range_nll, dtype=np.float64), np.asarray(s.range_count, dtype=np.float64)
    block = np.arange(len(nll)) * length // longest
    out = np.zeros((int(block[-1]) + 1, 2 * nll.shape[1]))
    np.add.at(out[:, 0::2], block, nll)
    np.add.at(out[:, 1::2], block, count)
    return out


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


def _row(common: dict, p: Pass, s: Score) -> dict:
    """One evaluation row. A non-finite loss (overflow, a broken model) is status ``nonfinite``, never ``ok``."""
    row = {**common, "mode": p.mode, "stride": p.advance, "S": p.S, "budget": p.budget, "warmup": p.warmup,
           "tokens_scored": s.tokens}
    if not math.isfinite(s.loss) or s.loss >= 700:  # exp overflows float64 past ~709
        return {**row, "loss": "nan", "ppl": "nan", "bpb": "nan", "status": "nonfinite",
                "note": "non-finite loss: the model overflowed or its weights are not finite"}
    return {**row, "loss": round(s.loss, 6), "ppl": round(math.exp(s.loss), 4), "bpb": round(s.bpb, 5),
            "status": "ok", "note": ""}


def _window_rows(row: dict, s: Score) -> list[dict]:
    """Per-window summed nll and scored tokens, enough to recompute the row and its uncertainty afterwards."""
    key = {k: row[k] for k in WINDOW_KEY}
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

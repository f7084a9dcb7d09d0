"""Causal attention for a positional scheme, by one of three backends (``attention.backend``):

- ``sdpa``: SDPA ``is_causal`` when the scheme adds nothing to the scores (flash kernels), SDPA with an additive float
  mask when it adds a bias — outside autograd at long lengths one block of query rows at a time (``BiasRows``);
- ``explicit``: softmax(q·k/√d + bias + terms) written out, the reference every backend is tested against and the
  only one for schemes whose logits depend on q or k (Shaw, Transformer-XL, CoPE); outside autograd at long lengths
  one block of query rows at a time, so that no (B, H, T, T) tensor exists;
- ``flex``: FlexAttention with the scheme's ``score_mod`` and a causal block mask: no mask is materialised. On the CPU
  it has no backward (torch 2.13): evaluation only.

``auto`` picks sdpa, explicit for schemes with score terms, and flex for a score bias evaluated on CUDA (measured
faster there; training keeps sdpa: see ``choose_backend``).
Attention never asks which scheme it runs: only what its hooks return.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable, Iterator
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from pe_bench.schemes.base import RowBias, lean_inference

BACKENDS = ("auto", "sdpa", "flex", "explicit")

# Outside autograd, a bias mask larger than this is never built whole: attention goes one block of query rows at a
# time (BiasRows), each against its causal prefix of keys (bytes; the rows per block follow from H and T).
MASK_BUDGET = 4 * 2**20
# Outside autograd, explicit attention goes by blocks of query rows whose (B, H, rows, T) fp32 logits fit this (bytes;
# score terms make several tensors of that size per block: CoPE about twenty).
EXPLICIT_BUDGET = 2**20
# On a GPU memory is plentiful and every block costs a round of kernel launches: both budgets are this there.
CUDA_BUDGET = 256 * 2**20


def increasing(positions: torch.Tensor) -> bool:
    """Whether positions (T,) strictly increase: then a block of query rows i.. has its causal keys in [0, j)."""
    return bool((positions[1:] > positions[:-1]).all())


def budget(cpu_budget: int, device: torch.device) -> int:
    """The bytes a block of query rows may take on ``device``: ``cpu_budget`` except on CUDA (CUDA_BUDGET)."""
    return CUDA_BUDGET if device.type == "cuda" else cpu_budget

TermsFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], "torch.Tensor | None"]
ValueTermsFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "torch.Tensor | None"]
WeightsFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "torch.Tensor | None"]


def backend_problem(backend: str, scheme, cpu_training: bool = False) -> str | None:
    """One line saying why ``backend`` cannot run ``scheme`` (``cpu_training``: to train on the CPU), or None."""
    if backend not in BACKENDS:
        return f"attention.backend={backend!r} is not a backend; choose from {', '.join(BACKENDS)}"
    if backend == "sdpa" and scheme.has_score_terms():
        return (f"attention.backend=sdpa cannot add {scheme.name}'s q/k-dependent score terms (SDPA takes a "
                "content-independent mask); use attention.backend=auto or explicit")
    if backend == "flex":
        if cpu_training:
            return ("attention.backend=flex has no backward on the CPU in this torch; train with "
                    "attention.backend=auto and evaluate with flex (pe-bench eval RUN attention.backend=flex)")
        reason = scheme.flex_problem()
        if reason:
            return f"attention.backend=flex cannot express {scheme.name}: {reason}; use attention.backend=auto"
    return None


def choose_backend(backend: str, scheme, probe: bool, positions: torch.Tensor | None = None,
                   on_cuda: bool = False) -> str:
    """The backend a forward pass uses: the requested one, auto resolved; a probe needs the weights (explicit).
    ``auto``: explicit for score terms; flex on CUDA outside autograd (evaluation) at the forward's own positions
    (``positions`` None: 0..T−1) for a score bias that flex expresses — at 8L its forward took 0.33–0.44× the time
    of SDPA with the mask by blocks for every bias scheme (H200, results/benchmarks/NVIDIA-H200-2026-11-27-gpu-
    session.md); sdpa otherwise (training: flex was not faster for every bias scheme; NoPE/RoPE-like schemes run
    flash; randomized positions would compile a flex kernel per batch)."""
    if probe or backend == "explicit" or (backend == "auto" and scheme.has_score_terms()):
        return "explicit"
    if backend != "auto":
        return backend
    if on_cuda and positions is None and not torch.is_grad_enabled() and scheme.flex_problem() is None:
        held = next(itertools.chain(scheme.parameters(), scheme.buffers()), None)  # ask on the scheme's device
        zero = torch.zeros(1, dtype=torch.long, device=held.device if held is not None else "cpu")
        if scheme.score_bias(zero, zero, 0) is not None:
            return "flex"
    return "sdpa"


def causal_bias_mask(bias: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """bias: (H, Tq, Tk) -> (1, H, Tq, Tk) additive mask: the bias where k_pos <= q_pos, −inf elsewhere.
    Built once per forward pass and shared by every layer; broadcast over the batch, never expanded. A bias outside
    autograd is masked in place (``score_bias`` returns a tensor of its own), so the mask costs one (H, T, T)
    tensor, not two."""
    future = k_pos[None, :] > q_pos[:, None]
    if not bias.requires_grad and bias.is_contiguous() and bias._base is None:
        return bias.masked_fill_(future[None], float("-inf"))[None]
    return bias.masked_fill(future[None], float("-inf"))[None]


def with_input_bias(mask: torch.Tensor | BiasRows | None, extra: torch.Tensor | RowBias,
                    positions: torch.Tensor) -> torch.Tensor | BiasRows:
    """A scheme's data-dependent bias (B, H, T, T) added to the mask (or to the causal mask when there is none):
    (B, H, T, T), −inf where the key is in the query's future. A RowBias stays by blocks of query rows
    (:class:`InputBiasRows`) where positions increase."""
    if isinstance(extra, RowBias):
        if positions.shape[0] > 1 and increasing(positions):
            return InputBiasRows(extra, mask, positions)
        extra = extra.full()
    if mask is None:
        return extra.masked_fill(positions[None, :] > positions[:, None], float("-inf"))
    return extra + (mask.full() if isinstance(mask, BiasRows) else mask)


def mask_future_(logits: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor, first: int) -> torch.Tensor:
    """logits: (..., Tq, Tk) -> the same tensor, −inf in place where k_pos > q_pos, checking keys from ``first`` on
    (a block of query rows i.. against its causal prefix: keys before i are in every row's past)."""
    future = k_pos[first:][None, :] > q_pos[:, None]
    logits[..., first:].masked_fill_(future, float("-inf"))
    return logits


def row_blocks(T: int, rows: int) -> Iterator[tuple[int, int]]:
    """(i, j): blocks of ``rows`` query rows; each attends to keys [0, j), its causal prefix (positions increase)."""
    for i in range(0, T, max(1, rows)):
        yield i, min(T, i + max(1, rows))


class BiasRows:
    """A score bias built one block of query rows at a time: rows [i, j) against keys [0, j), the causal prefix
    (positions increase along the sequence). ``score_bias`` is a function of each (query, key) position pair, so a
    block's bias is the same numbers as those rows of the whole one. ``full()``: the whole mask (1, H, T, T).

    ``by_distance`` (positions 0..T−1 and a bias that is a function of i − j): the bias is computed once per
    distance, (H, T), followed by −inf for the future, and each block is a window of that row — block[r, c] =
    f(i + r − c), a Toeplitz matrix, read as an unfold of the row and its query rows taken in reverse: one copy per
    block, causal mask included, whatever the scheme's math."""

    def __init__(self, scheme, positions: torch.Tensor, layer: int, rows: int, by_distance: bool = False) -> None:
        self.scheme, self.positions, self.layer, self.rows = scheme, positions, layer, max(1, rows)
        self.by_distance = by_distance
        self._row: torch.Tensor | None = None

    def _distance_row(self) -> torch.Tensor:
        """(H, T + rows): the bias at distance T − 1 − c for column c < T, then −inf for ``rows`` columns: the
        negative distances, a block's future keys."""
        if self._row is None:
            p = self.positions
            row = self.scheme.score_bias(p[-1:], p, self.layer)[:, 0]  # (H, T): distance T − 1 − c
            self._row = torch.cat([row, row.new_full((row.shape[0], self.rows), float("-inf"))], 1)
        return self._row

    def reversed_block(self, i: int, j: int) -> torch.Tensor:
        """``by_distance`` only: the mask of query rows j − 1, j − 2, …, i (in that order) against keys [0, j), a
        view of the distance row (no copy): (1, H, j − i, j), [row, c] = F[row + c] = f(j − 1 − row − c)."""
        T, r = self.positions.shape[0], j - i
        window = self._distance_row()[:, T - i - r: T + r - 1]  # F[s] = f(i + r − 1 − s), s < r + j − 1
        return window.unfold(1, j, 1)[None]

    def block(self, i: int, j: int) -> torch.Tensor:
        """The mask of query rows [i, j) against keys [0, j): (1, H, j − i, j)."""
        q_pos, k_pos = self.positions[i:j], self.positions[:j]
        if self.by_distance:  # the reversed block's rows put back in order: one copy
            reverse = torch.arange(j - i - 1, -1, -1, device=self.positions.device)
            return self.reversed_block(i, j).index_select(2, reverse)
        else:
            bias = self.scheme.score_bias(q_pos, k_pos, self.layer)
        if bias.requires_grad or not bias.is_contiguous() or bias._base is not None:
            return causal_bias_mask(bias, q_pos, k_pos)
        return mask_future_(bias, q_pos, k_pos, i)[None]

    def full(self) -> torch.Tensor:
        p = self.positions
        return causal_bias_mask(self.scheme.score_bias(p, p, self.layer), p, p)


class InputBiasRows(BiasRows):
    """A data-dependent bias (RowBias) plus the scheme's own mask (None, a tensor or BiasRows), as BiasRows: blocks of
    query rows [i, j) against keys [0, j), (B, H, j − i, j), −inf for future keys; as many rows a block as
    MASK_BUDGET (:func:`budget`) holds for the whole batch."""

    def __init__(self, extra: RowBias, mask: torch.Tensor | BiasRows | None, positions: torch.Tensor) -> None:
        B, H = extra.block(0, 1).shape[:2]
        T = positions.shape[0]
        super().__init__(None, positions, 0, budget(MASK_BUDGET, positions.device) // (B * H * T * 4))
        self.extra, self.mask = extra, mask

    def block(self, i: int, j: int) -> torch.Tensor:
        bias = self.extra.block(i, j).float()
        if self.mask is None:
            return mask_future_(bias, self.positions[i:j], self.positions[:j], i)
        return bias + mask_block(self.mask, i, j, j)

    def full(self) -> torch.Tensor:
        return with_input_bias(self.mask, self.extra.full(), self.positions)


def mask_block(mask: torch.Tensor | BiasRows | None, i: int, j: int, keys: int) -> torch.Tensor | None:
    """Rows [i, j) × keys [0, keys) of a mask, whole or by blocks (a BiasRows block needs keys == j)."""
    if mask is None:
        return None
    if isinstance(mask, BiasRows):
        return mask.block(i, j)
    return mask[:, :, i:j, :keys]


def attend_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: BiasRows) -> torch.Tensor:
    """q, k, v: (B, H, T, D) -> (B, H, T, D): :func:`attend` one block of query rows at a time (BiasRows), so that
    the mask of one block, not of all T × T pairs, is in memory; it also skips every block's future keys."""
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))  # (B, H, T, Dv): q·k may be wider than v (PoPE)
    for i, j in row_blocks(q.shape[2], bias.rows):
        if bias.by_distance:  # the block's query rows in reverse order meet the mask as a view: no mask copy
            out[:, :, i:j] = attend(q[:, :, i:j].flip(2), k[:, :, :j], v[:, :, :j], bias.reversed_block(i, j)).flip(2)
        else:
            out[:, :, i:j] = attend(q[:, :, i:j], k[:, :, :j], v[:, :, :j], bias.block(i, j))
    return out


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q, k, v: (B, H, T, D); mask: (1, H, T, T) additive, or None for plain causal. -> (B, H, T, D)."""
    wider = q.shape[-1] - v.shape[-1]
    if wider > 0 and lean_inference():
        # SDPA's fused kernels need v as wide as q·k (PoPE's q·k is twice as wide); otherwise it falls back to the
        # math kernel, which builds (B, H, T, T) scores. Zero columns in v, dropped from the output: the same numbers.
        return attend(q, k, F.pad(v, (0, wider)), mask)[..., :v.shape[-1]]
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # On CUDA keep the bias off cuDNN: it misreads an fp32 mask under bf16 q and gives NaN grads when T % 128 == 64
    # (pytorch #191612, #196678). The mask is cast to q's dtype for the same reason.
    ctx = sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]) if q.is_cuda else nullcontext()
    with ctx:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))


def explicit_blocks(q: torch.Tensor, positions: torch.Tensor) -> tuple[int, int]:
    """(sequences, query rows) per block of explicit attention: everything at once under autograd (the backward
    keeps every block's tensors anyway) or when positions do not increase; else as many rows of one sequence as the
    budget allows (:func:`budget`), then as many sequences of those rows. Rows of one sequence first: each block
    reads its keys once for all its rows, so many rows of few sequences read the keys least often."""
    B, H, T, _ = q.shape
    if not lean_inference() or T < 2 or not increasing(positions):
        return B, T
    room = budget(EXPLICIT_BUDGET, q.device)
    rows = max(1, min(T, room // (H * T * 4)))
    return max(1, min(B, room // (H * rows * T * 4))), rows


def attend_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | BiasRows | None,
                    positions: torch.Tensor, terms: TermsFn | None = None, value_terms: ValueTermsFn | None = None,
                    probe: Callable[[torch.Tensor], None] | None = None,
                    weights: WeightsFn | None = None) -> torch.Tensor:
    """Attention written out: the reference of every backend, the path of schemes whose logits depend on q or k
    (Shaw, Transformer-XL, CoPE), and of every scheme when a ``probe`` wants the attention weights (pe-bench
    analyze: then in one block).

    q, k, v: (B, H, T, D); mask: additive (1 or B, H, T, T) (bias + causal), BiasRows, or None for plain causal;
    terms(q_rows, k_rows, q_pos, k_pos) -> extra logits (b, H, r, c) or None; value_terms(probs, q_pos, k_pos) ->
    (b, H, r, D) or None, added to the output; probe(probs) sees the weights (B, H, T, T); weights(logits, q_pos,
    k_pos) -> the weights in place of the softmax, or None. Softmax in float32.
    Outside autograd the work goes by blocks of sequences and query rows (:func:`explicit_blocks`), each block of
    rows against its causal prefix of keys."""
    B, T = q.shape[0], q.shape[2]
    seqs, rows = (B, T) if probe is not None else explicit_blocks(q, positions)
    if seqs >= B and rows >= T:
        return explicit_block(q, k, v, mask_block(mask, 0, T, T), positions, positions, 0, terms, value_terms, probe,
                              weights)
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))  # (B, H, T, Dv)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # transposed views: each block's matmuls would copy
    for i, j in row_blocks(T, rows):
        m = mask_block(mask, i, j, j)  # once for every chunk of sequences
        for b in range(0, B, seqs):
            s = slice(b, b + seqs)
            ms = m[s] if m is not None and m.shape[0] > 1 else m  # a mask of the data (FoX): its sequences' own
            out[s, :, i:j] = explicit_block(q[s, :, i:j], k[s, :, :j], v[s, :, :j], ms, positions[i:j],
                                            positions[:j], i, terms, value_terms, None, weights)
    return out


def explicit_block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                   q_pos: torch.Tensor, k_pos: torch.Tensor, first: int, terms: TermsFn | None,
                   value_terms: ValueTermsFn | None, probe: Callable[[torch.Tensor], None] | None,
                   weights: WeightsFn | None) -> torch.Tensor:
    """One block of :func:`attend_explicit`: query rows at ``q_pos`` (the first is row ``first``) against the keys at
    ``k_pos``; ``mask``: that block's additive mask (None: causal by position)."""
    # The scheme's terms first: autograd sums q's and k's gradients in the order of the operations, and the
    # committed runs of CoPE were trained with this one (another order changes the low bits, then a whole run).
    extra = None if terms is None else terms(q, k, q_pos, k_pos)
    logits = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5
    if extra is not None:
        logits += extra.float()
    if mask is None:
        mask_future_(logits, q_pos, k_pos, first)
    else:
        logits += mask.float()
    probs = None if weights is None else weights(logits, q_pos, k_pos)
    if probs is None:
        probs = logits.softmax(-1)
    if probe is not None:
        probe(probs)
    y = probs.to(v.dtype) @ v
    added = None if extra is None or value_terms is None else value_terms(probs, q_pos, k_pos)
    return y if added is None else y + added.to(y.dtype)


# FlexAttention's kernel options per GPU generation (compute capability) and head dimension, where torch's defaults
# fail. On sm90 (H100/H200) at head dimension 64, torch.compile of a training step fuses the q/k/v projection's
# split, views and casts into the flex forward kernel; its default tiles (BLOCK_M 128, BLOCK_N 64, 3 stages) then need
# 245,760 bytes of shared memory, over the 232,448 an SM has, and every bias scheme's step failed to compile (torch
# 2.11). Searched by scripts/bench_gpu.py (results/benchmarks/*2026-11-26*): backward tiles alone left it at 245,760,
# two forward stages raised it to 278,528; 64-row forward tiles compile for ALiBi, T5 and KERPLE-power.
FLEX_KERNEL_OPTIONS: dict[tuple[int, int, int], dict] = {
    (9, 0, 64): {"fwd_BLOCK_M": 64},
}


def flex_kernel_options(q: torch.Tensor) -> dict | None:
    """q: (B, H, T, D) -> the kernel options of :data:`FLEX_KERNEL_OPTIONS` for its GPU and head dimension, or None
    (torch's defaults; always on the CPU)."""
    if not q.is_cuda:
        return None
    major, minor = torch.cuda.get_device_capability(q.device)
    options = FLEX_KERNEL_OPTIONS.get((major, minor, q.shape[-1]))
    return dict(options) if options else None


@functools.lru_cache(maxsize=8)
def causal_block_mask(T: int, device: str):
    """FlexAttention's causal BlockMask for length T (positions increase: causal by index), kept per length."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, T, T, device=device)


def attend_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score_mod) -> torch.Tensor:
    """q, k, v: (B, H, T, D) -> (B, H, T, D) by FlexAttention: ``score_mod(score, b, h, q_idx, kv_idx)`` (the
    scheme's, or None) adds the scheme's bias/terms to each scaled score; the causal block mask skips future
    blocks. Compiled on CUDA (the fused kernel); eager elsewhere (a reference implementation)."""
    from torch.nn.attention.flex_attention import flex_attention

    if q.is_cuda:
        return _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=causal_block_mask(q.shape[2], str(q.device)),
                                kernel_options=flex_kernel_options(q))
    with warnings.catch_warnings():  # "called without torch.compile": eager is the point here (a reference)
        warnings.simplefilter("ignore", UserWarning)
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=causal_block_mask(q.shape[2], str(q.device)))


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)

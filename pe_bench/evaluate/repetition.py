"""The repetition probe: can a model reach back d tokens in real text?

A passage P of m = L/2 tokens from the evaluation split is followed by the text that follows it in the corpus up to
d tokens after its start (the filler F, d − m tokens), then by P again, so that every token of the second copy has
its twin exactly d tokens back. The same second copy is also scored after a control sequence whose first m tokens
are another passage P' (the next passage of the probe) instead of P: the same filler, the same tokens scored, only
the earlier copy missing::

    repeat:  P  F  P        control:  P'  F  P
             |<-d->|                  |<-d->|

The copy gain at distance d is the mean over passages of loss(second copy | repeat) − loss(second copy | control),
in nats per token over P[1:] (the first token of a copy cannot be foreseen): 0 means the model does not use the copy
d tokens back, negative means it does (an induction-style copy lowers it towards −loss). Its interval is a t interval
over the passages (paired: both sequences score the same tokens). Distances d ∈ {L/2, L, 2L, 4L, 7L}: the longest
sequence, 7L + L/2 tokens, fits in 8L. The first copy's loss (P scored from the start of the sequence) is reported
beside, as what the passage costs with no context.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pe_bench import stats
from pe_bench.data import DataError
from pe_bench.device import bf16_autocast
from pe_bench.evaluate.nll import token_nll
from pe_bench.model.decoder import Decoder
from pe_bench.schemes import LengthNotSupported

REPETITION_COLUMNS = ["scheme", "base_scheme", "model", "data", "split", "L_train", "distance", "ratio",
                      "passage_tokens", "passages", "first_loss", "second_loss", "control_loss", "gain", "lo", "hi",
                      "seed", "step", "precision", "status", "note"]
# A row is identified by every setting that changes its number.
REPETITION_KEY = ("scheme", "split", "distance", "passage_tokens", "passages", "step", "precision")
DISTANCE_RATIOS = (0.5, 1, 2, 4, 7)  # d / L
PASSAGES = 128  # passages per distance; fewer only when the split is short (never below MIN_PASSAGES)
MIN_PASSAGES = 16


def distances(L: int) -> list[int]:
    """The probe's distances d = L/2, L, 2L, 4L, 7L (distinct, >= the passage length)."""
    m = passage_tokens(L)
    return sorted({max(m, int(r * L)) for r in DISTANCE_RATIOS})


def passage_tokens(L: int) -> int:
    return max(2, L // 2)


def passage_starts(n_tokens: int, L: int) -> list[int]:
    """Starts of the probe's passages, spread evenly over the split; each needs 7L + L/2 tokens from its start."""
    need = max(distances(L)) + passage_tokens(L) + 1
    room = n_tokens - need
    n = min(PASSAGES, room // passage_tokens(L) if room > 0 else 0)
    if n < MIN_PASSAGES:
        raise DataError(f"the evaluation split has {n_tokens} tokens, too few for the repetition probe at L = {L} "
                        f"({MIN_PASSAGES} passages of {need} tokens); use a longer split or leave 'repetition' out "
                        "of eval.modes")
    return [j * room // (n - 1) for j in range(n)]


def probe_sequences(tokens: np.ndarray, starts: list[int], d: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(repeat, control), each (N, d + m) int64: row j is P F P, resp. P' F P, with P = tokens[s_j : s_j + m],
    F = tokens[s_j + m : s_j + d] and P' the next passage's first m tokens (the last passage's P' is the first's)."""
    seq = np.stack([np.asarray(tokens[s : s + d], dtype=np.int64) for s in starts])
    passage = seq[:, :m]
    repeat = np.concatenate([seq, passage], axis=1)
    control = repeat.copy()
    control[:, :m] = np.roll(passage, -1, axis=0)
    return repeat, control


@torch.inference_mode()
def copy_losses(model: Decoder, seqs: np.ndarray, m: int, device: torch.device, bf16: bool,
                tokens_per_batch: int, positions: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
    """seqs: (N, d + m) -> (first, second), each (N,): the mean nll of P[1:] at the start of each sequence and at
    its end (the second copy)."""
    length = seqs.shape[1]
    per_batch = max(1, tokens_per_batch // length)
    first, second = [], []
    for i in range(0, len(seqs), per_batch):
        block = torch.from_numpy(seqs[i : i + per_batch]).to(device)
        x, y = block[:, :-1], block[:, 1:]
        with bf16_autocast(device, bf16):
            nll = token_nll(model, x, y, positions)  # (B, d + m − 1)
        first.append(nll[:, : m - 1].double().mean(1).cpu().numpy())  # targets P[1:] of the first copy
        second.append(nll[:, length - m :].double().mean(1).cpu().numpy())  # targets P[1:] of the second copy
    return np.concatenate(first), np.concatenate(second)


def repetition_rows(model: Decoder, tokens: np.ndarray, L: int, base: dict, device: torch.device, bf16: bool,
                    tokens_per_batch: int, positions_at=None) -> list[dict]:
    """One row per distance (REPETITION_COLUMNS): the copy gain with its t interval over passages. ``base``: the
    identifying columns (scheme, model, data, split, L_train, seed, step, precision). ``positions_at(length)``: the
    positions of a window of that length (None: 0..length−1); a LengthNotSupported from it or the model makes the
    row ``not_applicable``."""
    m = passage_tokens(L)
    starts = passage_starts(len(tokens), L)
    out = []
    for d in distances(L):
        row = {**base, "distance": d, "ratio": round(d / L, 4), "passage_tokens": m, "passages": len(starts)}
        try:
            positions = positions_at(d + m - 1) if positions_at else None
            repeat, control = probe_sequences(tokens, starts, d, m)
            first, second = copy_losses(model, repeat, m, device, bf16, tokens_per_batch, positions)
            _, unseen = copy_losses(model, control, m, device, bf16, tokens_per_batch, positions)
        except LengthNotSupported as e:
            out.append({**row, **dict.fromkeys(("first_loss", "second_loss", "control_loss", "gain", "lo", "hi"), ""),
                        "status": "not_applicable", "note": str(e)})
            continue
        gain = second - unseen
        if not (np.isfinite(gain).all() and np.isfinite(first).all()):
            out.append({**row, **dict.fromkeys(("first_loss", "second_loss", "control_loss", "gain", "lo", "hi"),
                                               "nan"), "status": "nonfinite", "note": "non-finite loss"})
            continue
        ci = stats.seed_interval(gain)  # a t interval over passages
        out.append({**row, "first_loss": _r(first.mean()), "second_loss": _r(second.mean()),
                    "control_loss": _r(unseen.mean()), "gain": _r(gain.mean()), "lo": _r(ci.lo), "hi": _r(ci.hi),
                    "status": "ok", "note": ""})
    return out


def _r(x: float) -> float:
    return round(float(x), 6) if math.isfinite(x) else float("nan")

"""Abacus embeddings (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings", §3.1): every
digit token gets a learned embedding of its index within its number — its run of consecutive digit tokens, 1 for the
first digit (the least significant one when numbers are written reversed) — added to the token embedding; other
tokens get index 0. In training every index of a batch is shifted by one offset k drawn uniformly from
[0, max_offset], so the embeddings of the indices that longer numbers reach at evaluation (where k = 0) are trained
too: with numbers of up to n digits in training, numbers of up to n + max_offset digits at evaluation. Index j is
then trained only by the batches with k < j — index 1, every number's first digit at evaluation, by 1 in
max_offset + 1 — so ``zero_share`` (not in the paper) sets a share of batches to k = 0 and draws the rest as above.
The model's positional scheme is unchanged; this adds positions that count digits, whatever the scheme."""

from __future__ import annotations

import zlib

import torch
from torch import nn

from pe_bench.schemes import LengthNotSupported
from pe_bench.tasks.addition import ABACUS_TABLE

TABLE = ABACUS_TABLE  # indices 0..1023 (the official code's max_seq_length): a longer number is refused, never clipped


class DigitPositions(nn.Module):
    def __init__(self, digit_tokens: tuple[int, ...], d_model: int, max_offset: int, zero_share: float = 0.0) -> None:
        super().__init__()
        self.embedding = nn.Embedding(TABLE, d_model)
        self.register_buffer("digits", torch.tensor(digit_tokens, dtype=torch.long), persistent=False)
        self.max_offset = max_offset
        self.zero_share = zero_share

    def indices(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: (B, T) token ids → (B, T) int64: 1, 2, … along each run of digit tokens, 0 elsewhere."""
        is_digit = torch.isin(idx, self.digits)
        pos = torch.arange(idx.shape[1], device=idx.device).expand_as(idx)
        last_other = torch.where(is_digit, -1, pos).cummax(dim=1).values  # the latest non-digit at or before t
        return torch.where(is_digit, pos - last_other, 0)

    def offset(self, idx: torch.Tensor) -> int:
        """The training offset k of this batch: 0 with probability zero_share, else uniform in [0, max_offset]; drawn
        from a generator seeded by the batch's tokens, so it is a pure function of the batch (which is one of
        (seed, step)) and a resumed run draws the same."""
        seed = zlib.crc32(idx.detach().cpu().numpy().tobytes())
        g = torch.Generator().manual_seed(seed)
        if self.zero_share and float(torch.rand((), generator=g)) < self.zero_share:
            return 0
        return int(torch.randint(0, self.max_offset + 1, (1,), generator=g))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: (B, T) → (B, T, C): the embedding of each token's digit index (shifted by k in training)."""
        index = self.indices(idx)
        if self.training and self.max_offset:
            index = torch.where(index > 0, index + self.offset(idx), 0)
        top = int(index.max()) if index.numel() else 0
        if top >= TABLE:
            raise LengthNotSupported(f"a number of {top} digits is longer than the {TABLE - 1} digit positions of "
                                     "the Abacus embeddings")
        return self.embedding(index)

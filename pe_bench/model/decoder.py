"""A small decoder-only pre-LN transformer whose attention asks the positional scheme for its three hooks."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pe_bench.model import attention
from pe_bench.model.digits import DigitPositions
from pe_bench.model.attention import (BiasRows, attend, attend_explicit, attend_flex, attend_rows, causal_bias_mask,
                                with_input_bias)
from pe_bench.schemes import Scheme
from pe_bench.schemes.base import lean_inference, log_n, same_values, values_of, whole

Probe = Callable[[int, torch.Tensor], None]  # (layer, attention weights (B, H, T, T)) -> None


@dataclass
class ModelArgs:
    vocab_size: int
    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    qk_norm: bool = False  # RMS-normalised q and k per head, with a learnt gain (before the scheme's rotate)
    init: str = "gpt2"  # gpt2 | fan_in (Decoder._init_weights)
    backend: str = "auto"  # attention.backend: auto | sdpa | flex | explicit (pe_bench.model.attention)
    digit_tokens: tuple[int, ...] = ()  # Abacus digit positions for these tokens (pe_bench.model.digits); () none
    digit_offset: int = 0  # their largest training offset
    digit_zero_share: float = 0.0  # the share of training batches at offset 0


def random_positions(max_position: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Randomized positions (Ruoss et al. 2023, §3): a sorted random subset of [0, max_position) of size
    ``length``, int64 (length,)."""
    return torch.randperm(max_position, generator=generator)[:length].sort().values


def pose_positions(length: int, target: int, chunks: int, generator: torch.Generator) -> torch.Tensor:
    """PoSE position ids (Zhu et al. 2023, §3.2) for a window of ``length`` tokens standing in for ``target``:
    the window is cut at chunks − 1 distinct uniform cut points into contiguous chunks; chunk i's ids are
    consecutive and shifted by a skip u_i, with u_0 = 0 and u_i ~ U{u_(i−1), …, target − length}. The first id is 0,
    ids increase, and the last is at most target − 1. int64 (length,)."""
    cuts = (torch.randperm(length - 1, generator=generator)[: chunks - 1] + 1).sort().values.tolist()
    shift = torch.zeros(length, dtype=torch.long)
    skip = 0
    for cut in cuts:
        skip = int(torch.randint(skip, target - length + 1, (1,), generator=generator))
        shift[cut:] = skip
    return torch.arange(length) + shift


def logn_beyond(positions: torch.Tensor, L: int) -> torch.Tensor:
    """The training-free log-n attention temperature (Chiang & Cholak 2022, §5; the inference-time form of SSMax,
    Nakanishi 2025): queries at n = position + 1 > L keys scaled by ln n / ln L, the others by 1. (T,) float."""
    return (log_n(positions) / math.log(max(L, 2))).clamp(min=1.0)


class CausalSelfAttention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads = args.n_heads
        self.qkv = nn.Linear(args.d_model, 3 * args.d_model, bias=False)
        self.proj = nn.Linear(args.d_model, args.d_model, bias=False)
        self.dropout = nn.Dropout(args.dropout)
        head_dim = args.d_model // args.n_heads
        self.q_norm = nn.RMSNorm(head_dim) if args.qk_norm else None
        self.k_norm = nn.RMSNorm(head_dim) if args.qk_norm else None

    def forward(self, x: torch.Tensor, scheme: Scheme, positions: torch.Tensor, mask: torch.Tensor | BiasRows | None,
                layer: int, backend: str, probe: Probe | None = None,
                q_scale: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, C) -> (B, T, C). ``backend``: sdpa | explicit | flex (resolved, see pe_bench.model.attention);
        ``mask``: the scheme's bias as a mask (sdpa, explicit). ``probe(layer, probs)``: sees the attention weights
        (B, H, T, T) (explicit attention, for diagnostics). ``q_scale``: (T,) multiplies each query (eval.logn)."""
        B, T, C = x.shape
        H = self.n_heads
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))  # (B, H, T, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = scheme.rotate(q, k, positions, layer)
        if q_scale is not None:
            q = q * q_scale[:, None].to(q.dtype)
        extra = scheme.input_bias(x, layer)
        terms = scheme.token_terms(x, q, k, layer)
        if terms is not None:  # PaTH: logits from the tokens and q, k together, added like a data-dependent bias
            extra = terms if extra is None else whole(extra) + whole(terms)
        if extra is not None:  # a bias computed from the tokens (FoX): a mask for this layer (by blocks: RowBias)
            mask = with_input_bias(mask, extra, positions)
        if backend == "flex":
            y = attend_flex(q, k, v, scheme.score_mod(q, k, positions, layer))
        elif backend == "sdpa":
            y = attend_rows(q, k, v, mask) if isinstance(mask, BiasRows) else attend(q, k, v, mask)
        else:
            y = attend_explicit(
                q, k, v, mask, positions,
                lambda qb, kb, q_pos, k_pos: scheme.score_terms(qb, kb, q_pos, k_pos, layer),
                lambda probs, q_pos, k_pos: scheme.value_terms(probs, q_pos, k_pos, layer),
                None if probe is None else lambda probs: probe(layer, probs),
                lambda logits, q_pos, k_pos: scheme.attention_weights(logits, q_pos, k_pos, layer))
        return self.dropout(self.proj(y.transpose(1, 2).reshape(B, T, C)))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        hidden = int(args.mlp_ratio * args.d_model)
        self.fc = nn.Linear(args.d_model, hidden, bias=False)
        self.proj = nn.Linear(hidden, args.d_model, bias=False)
        self.dropout = nn.Dropout(args.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(args.d_model)
        self.attn = CausalSelfAttention(args)
        self.ln2 = nn.LayerNorm(args.d_model)
        self.mlp = MLP(args)

    def forward(self, x: torch.Tensor, scheme: Scheme, positions: torch.Tensor, mask: torch.Tensor | BiasRows | None,
                layer: int, backend: str, probe: Probe | None = None,
                q_scale: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), scheme, positions, mask, layer, backend, probe, q_scale)
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    """Token embedding → scheme.embed → blocks → final LN → LM head (tied to the embedding with init gpt2)."""

    def __init__(self, args: ModelArgs, scheme: Scheme) -> None:
        super().__init__()
        if args.d_model % args.n_heads:
            raise ValueError(f"model.d_model={args.d_model} is not divisible by model.n_heads={args.n_heads}")
        self.args = args
        self.scheme = scheme
        self.tok_emb = nn.Embedding(args.vocab_size, args.d_model)
        self.digit_positions = (DigitPositions(args.digit_tokens, args.d_model, args.digit_offset,
                                               args.digit_zero_share)
                                if args.digit_tokens else None)
        self.drop = nn.Dropout(args.dropout)
        self.blocks = nn.ModuleList(Block(args) for _ in range(args.n_layers))
        self.ln_f = nn.LayerNorm(args.d_model)
        self.lm_head = nn.Linear(args.d_model, args.vocab_size, bias=False)
        if args.init == "gpt2":
            self.lm_head.weight = self.tok_emb.weight
        self._mask_cache: tuple | None = None  # (key, scheme values, mask): the last bias mask built outside autograd
        self.logn_beyond: int | None = None  # eval.logn: the training length L of the log-n temperature, or None
        self._init_weights()

    def label(self) -> str:
        """The row name of this model's numbers: the scheme's label, ``+logn`` with the eval-time temperature."""
        return self.scheme.label() + ("+logn" if self.logn_beyond is not None else "")

    def _init_weights(self) -> None:
        """Every weight matrix N(0, σ²); the residual stream's output projections σ/√(2·n_layers) (GPT-2, §2.3).
        ``gpt2``: σ = 0.02 everywhere, the LM head tied to the embedding (Radford et al. 2019). ``fan_in``:
        embeddings σ = 1, other matrices σ² = 1/(3·fan_in) — the variance of PyTorch's default U(±1/√fan_in) —
        and the LM head its own (tied to N(0, 1) embeddings, its logits would start at σ ≈ √d_model). At d_model 128
        σ = 0.02 leaves attention near uniform for long: the tiny model does not form the previous-token and
        induction heads that key–value binding needs in the tasks' budget (docs/tasks.md, "The model"). Scheme
        parameters keep the initialisation their scheme chose."""
        embeddings = {f"{n}.weight" for n, m in self.named_modules() if isinstance(m, nn.Embedding)}
        for name, p in self.named_parameters():
            if name.startswith("scheme.") or p.dim() < 2:
                continue
            if self.args.init == "gpt2":
                std = 0.02
            else:
                std = 1.0 if name in embeddings else 1.0 / math.sqrt(3 * p.shape[1])
            if name.endswith("proj.weight"):
                std /= math.sqrt(2 * self.args.n_layers)
            nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None,
                probe: Probe | None = None) -> torch.Tensor:
        """idx: (B, T) token ids; positions: (T,) defaults to 0..T-1. -> logits (B, T, V). ``probe(layer, probs)``
        sees every layer's attention weights (B, H, T, T) (pe_bench.evaluate.attention_stats)."""
        T = idx.shape[1]
        backend = attention.choose_backend(self.args.backend, self.scheme, probe is not None, positions, idx.is_cuda)
        default_positions = positions is None
        if positions is None:
            positions = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx)
        if self.digit_positions is not None:
            x = x + self.digit_positions(idx)
        x = self.drop(self.scheme.embed(x, positions))
        if backend == "flex" and not default_positions and torch.compiler.is_compiling():
            raise ValueError("FlexAttention under torch.compile takes the forward's own positions 0..T-1 only")
        mask = None
        q_scale = None if self.logn_beyond is None else logn_beyond(positions, self.logn_beyond)
        for layer, block in enumerate(self.blocks):
            if backend != "flex" and (layer == 0 or self.scheme.bias_per_layer):  # one per forward unless per-layer
                mask = self._bias_mask(positions, layer, default_positions)
            x = block(x, self.scheme, positions, mask, layer, backend, probe, q_scale)
        return self.lm_head(self.ln_f(x))

    def _bias_mask(self, positions: torch.Tensor, layer: int,
                   default_positions: bool) -> torch.Tensor | BiasRows | None:
        """The scheme's score bias as an additive causal mask (1, H, T, T), or None. Outside autograd:
        - a mask of more than attention.budget() bytes is never built whole: attention gets BiasRows (a block of
          query rows at a time; positions must increase);
        - a bias that is a function of i − j, at positions 0..T−1, is computed once per distance (BiasRows);
        - a smaller one that cannot have changed — shared by all layers, at positions 0..T-1, from the scheme's
          parameters and buffers with the same values (compared with a copy: an optimizer step or a loaded state
          changes them) — is kept for the next forward pass: the evaluator's windows of one length build it once."""
        T, H = positions.shape[0], self.args.n_heads
        if self.scheme.score_bias(positions[:1], positions[:1], layer) is None:
            return None
        outside = lean_inference()
        by_distance = outside and default_positions and self.scheme.bias_by_distance()  # one value per distance
        room = attention.budget(attention.MASK_BUDGET, positions.device)
        if outside and H * T * T * 4 > room and (
                default_positions or attention.increasing(positions)):
            return BiasRows(self.scheme, positions, layer, room // (H * T * 4), by_distance)
        key = state = None
        if outside and default_positions and not self.scheme.bias_per_layer:
            state = (*self.scheme.parameters(), *self.scheme.buffers())
            key = (positions.shape[0], positions.device)
            kept = self._mask_cache
            if kept is not None and kept[0] == key and same_values(kept[1], state):
                return kept[2]
        if by_distance:
            mask = BiasRows(self.scheme, positions, layer, T, by_distance=True).block(0, T)
        else:
            mask = causal_bias_mask(self.scheme.score_bias(positions, positions, layer), positions, positions)
        if key is not None:  # (no module state is touched under autograd: torch.compile traces that path)
            self._mask_cache = (key, values_of(state), mask)
        return mask

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

"""The scheme seam: a positional scheme may act at three places, each a no-op by default.

- ``embed(x, positions)``      — the input embedding (absolute schemes add to, or convolve, the token embeddings);
- ``rotate(q, k, positions, layer)`` — the q/k vectors, per head, after projection (the RoPE family, xPos);
- the attention scores, in two ways:
  - ``score_bias(q_pos, k_pos, layer)`` — an additive, content-independent bias on the logits, after the 1/sqrt(d)
    scaling (ALiBi, T5, KERPLE, Sandwich, FIRE). Built once per forward pass and shared by all layers unless the
    scheme sets ``bias_per_layer`` (then once per layer);
  - ``score_terms(q, k, q_pos, k_pos, layer)`` — content-dependent logit terms that need q or k (Shaw's q·a_ij,
    Transformer-XL's (q + v)·W R_{i-j}, CoPE's gated positions). When a scheme returns terms, attention is computed
    explicitly (no fused kernel; by blocks of query rows outside autograd, hence q_pos and k_pos apart) and
    ``value_terms(probs, q_pos, k_pos, layer)`` may add to the attention output.

  FlexAttention (``attention.backend=flex``) sees the scores hooks through ``score_mod``: by default the score bias
  evaluated at each (query, key) pair; a scheme with score terms overrides it, or says why it cannot
  (``flex_problem``).

Schemes compose: ``Composite`` (see ``hybrid``) chains the hooks of a list of schemes and adds their biases.

Positions always come from the actual sequence (``positions: (T,)`` int64), so nothing is sized by the training
length except what a scheme declares itself (the learned table).

A subclass sets ``name`` (its registry key and YAML file name), ``description`` (one line for ``pe-bench schemes``),
``acts_on`` and ``Options`` (a dataclass of its hyper-parameters, mirrored by ``configs/scheme/<name>.yaml``).
Subclasses register themselves on definition; dropping a file in ``pe_bench/schemes/`` is all it takes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from pe_bench.ranges import range_problem

REGISTRY: dict[str, type[Scheme]] = {}


class LengthNotSupported(RuntimeError):
    """Raised by a scheme that has no defined behaviour at the requested length (e.g. a learned table that is
    too short). The evaluator records such lengths as not applicable, with this message as the reason."""


@dataclass(frozen=True)
class ModelShape:
    """What a scheme may need to know about the model it sits in."""

    d_model: int
    n_heads: int
    head_dim: int
    train_seq_len: int  # only schemes that are sized by the training length by definition may use this
    n_layers: int = 1  # for schemes with per-layer parameters (Shaw, Transformer-XL, KERPLE, FIRE, CoPE)
    max_train_position: int | None = None  # largest position + 1 seen in training (randomized positions, PoSE); None = L
    original_seq_len: int | None = None  # a fine-tune's first ancestor's L (the context the weights learnt first)

    @property
    def position_range(self) -> int:
        return self.max_train_position or self.train_seq_len

    @property
    def pretrained_length(self) -> int:
        """The length the weights were first trained at: RoPE's context-extension methods scale from it."""
        return self.original_seq_len or self.train_seq_len


@dataclass
class NoOptions:
    pass


class Scheme(nn.Module):
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    citation: ClassVar[str] = ""
    acts_on: ClassVar[tuple[str, ...]] = ()  # subset of ("input", "qk", "scores")
    relative: ClassVar[bool] = False  # True when attention depends only on i - j (shift-invariant)
    bias_per_layer: ClassVar[bool] = False  # True when score_bias differs by layer (per-layer parameters)
    Options: ClassVar[type] = NoOptions
    # Options that may change after training (``pe-bench eval``, eval_variants): they act at evaluation only and
    # leave the trained weights' meaning intact (RoPE's context extension, the learned table's policy past its end).
    eval_options: ClassVar[tuple[str, ...]] = ()
    # Options added after runs of the scheme were named (dotted for nested ones): holding the defaults of
    # configs/scheme/<name>.yaml they stay out of a run's identity, so those runs keep their names and directories.
    late_options: ClassVar[tuple[str, ...]] = ()
    # Options added later whose default changes the model: option → the value that reproduces the runs made before
    # it existed. A saved config without the option is read with that value, and the option holding it stays out of
    # the identity, so those runs keep their names and their meaning (labelled by the option).
    legacy_options: ClassVar[dict[str, Any]] = {}
    # How plots draw the scheme's rows (pe_bench.plots), optional: (colour, marker) pinned for the scheme itself —
    # without it both come from a digest of the name — and (shade, line style) for named eval-time variants.
    style: ClassVar[tuple[str, str] | None] = None
    # The transformers architecture that computes the same function (``pe-bench export``, pe_bench.pretrained.export:
    # gpt_neox, gpt2), declared by the class itself (a subclass does not inherit it); None: no export.
    hf_architecture: ClassVar[str | None] = None
    variant_styles: ClassVar[dict[str, tuple[float, str]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            if cls.name in REGISTRY and REGISTRY[cls.name] is not cls:
                raise ValueError(f"scheme name {cls.name!r} registered twice")
            REGISTRY[cls.name] = cls

    def __init__(self, options: Any, shape: ModelShape) -> None:
        # The declared ranges of the options (pe_bench.ranges), for schemes built directly in Python; a composed
        # config has been checked already, with full keys.
        problem = range_problem(type(options), options, "scheme") if dataclasses.is_dataclass(options) else None
        if problem:
            raise ValueError(problem)
        super().__init__()
        self.options = options
        self.shape = shape

    # ---- the three hooks -------------------------------------------------------------------------------
    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (B, T, C) token embeddings, positions: (T,) -> (B, T, C)."""
        return x

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k: (B, H, T, D), positions: (T,) -> transformed (q, k) for ``layer`` (per-layer schemes)."""
        return q, k

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, layer: int = 0) -> torch.Tensor | None:
        """q_pos: (Tq,), k_pos: (Tk,) -> additive logit bias (H, Tq, Tk), or None for no bias. A new tensor each call
        (never one the scheme keeps): outside autograd the model masks it in place.

        Only entries with k_pos <= q_pos are used (the model applies the causal mask). ``layer`` matters only
        when ``bias_per_layer`` is set; otherwise the model calls this once per forward pass."""
        return None

    def input_bias(self, x: torch.Tensor, layer: int) -> torch.Tensor | RowBias | None:
        """x: (B, T, C), the layer's normalised input -> additive logit bias (B, H, T, T) that depends on the data,
        or None (the default). Only entries with key <= query are used. For schemes whose bias is computed from the
        tokens rather than the positions (the Forgetting Transformer's gates): the one hook that sees x. Outside
        autograd a scheme may return a :class:`RowBias` instead, so that attention builds it by blocks of rows."""
        return None

    def token_terms(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, layer: int) -> torch.Tensor | None:
        """x: (B, T, C), the layer's normalised input; q, k: (B, H, T, D) after ``rotate`` -> logits (B, H, T, T) added
        to the scaled q·k like ``input_bias``, or None (the default). For schemes whose positions are transforms
        computed from the tokens and applied to q and k together (PaTH's accumulated Householder products): the
        one hook that sees both. Only entries with key <= query are used."""
        return None

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        """q: (B, H, Tq, D), k: (B, H, Tk, D) after ``rotate``, q_pos: (Tq,), k_pos: (Tk,) -> extra logits
        (B, H, Tq, Tk) on the scale of q·k/√d, or None. A function of each (query, key) pair given the keys up to
        the query (attention may pass a block of query rows with their causal prefix of keys). Future entries
        (k_pos > q_pos) are masked afterwards and may hold anything finite."""
        return None

    def value_terms(self, probs: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        """probs: (B, H, Tq, Tk) attention weights -> (B, H, Tq, D) added to probs @ v, or None. Called only when
        ``score_terms`` returned terms for this layer."""
        return None

    def bias_by_distance(self) -> bool:
        """Whether ``score_bias`` is a function of i − j alone (then attention may build it from one value per
        distance: FlexAttention's table, the blocks of a long mask). Default: the scheme is ``relative``."""
        return self.relative

    def attention_weights(self, logits: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                          layer: int) -> torch.Tensor | None:
        """logits: (B, H, Tq, Tk) float32, every term and bias added, −inf where the key is in the future -> the
        attention weights (B, H, Tq, Tk) in place of the softmax, or None for the softmax (the default). For schemes
        that replace the normalisation itself (stick-breaking attention); each row on its own, so attention may pass
        a block of query rows with their causal prefix of keys."""
        return None

    def has_score_terms(self) -> bool:
        """Whether the logits or their normalisation need the explicit path: ``score_terms`` can return terms or
        ``attention_weights`` replaces the softmax (then no fused kernel can run this scheme)."""
        return (type(self).score_terms is not Scheme.score_terms
                or type(self).attention_weights is not Scheme.attention_weights)

    # ---- FlexAttention ----------------------------------------------------------------------------------
    def flex_problem(self) -> str | None:
        """Why ``score_mod`` cannot express this scheme (one phrase), or None."""
        if type(self).attention_weights is not Scheme.attention_weights:
            return "it replaces the softmax, which FlexAttention computes itself"
        if self.has_score_terms() and type(self).score_mod is Scheme.score_mod:
            return "its score terms have no score_mod"
        if type(self).input_bias is not Scheme.input_bias or type(self).token_terms is not Scheme.token_terms:
            return "its bias is computed from the layer input, which score_mod does not see"
        return None

    def score_mod(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, layer: int):
        """The scores hooks as a FlexAttention ``score_mod(score, b, h, q_idx, kv_idx) -> score`` (score: one
        scaled q·k, the indices 0-d tensors), or None when the scheme leaves the scores alone (q, k: (B, H, T, D)
        after ``rotate``, for schemes whose terms need them). Default, from ``score_bias`` (the code of the mask):
        a relative scheme's bias is a function of i − j only, so it is computed once per distance, (H, n), and
        gathered; any other is evaluated at each (query, key) pair."""
        if self.score_bias(positions[:1], positions[:1], layer) is None:
            return None
        if self.bias_by_distance():
            # distances 0..n−1; traced by torch.compile the distance is the indices' own (no position reads in the
            # kernel)
            compiling = torch.compiler.is_compiling()
            n = position_span(positions)
            table = self.score_bias(positions.new_tensor([n - 1]), torch.arange(n, device=positions.device),
                                    layer)[:, 0].float()  # (H, n): the bias at distance n − 1 − j
            if table.requires_grad and FLEX_LEARNED_TABLE == "matrix" and n == positions.shape[0]:
                matrix = LowerToeplitz.apply(table)  # (H, T, T); positions are 0..T−1 plus a constant

                def by_pair(score, b, h, q_idx, kv_idx):
                    return score + matrix[h, q_idx, kv_idx]

                return by_pair

            def mod(score, b, h, q_idx, kv_idx):
                distance = q_idx - kv_idx if compiling else positions[q_idx] - positions[kv_idx]
                return score + table[h, n - 1 - distance.clamp(0, n - 1)]

            return mod

        def mod(score, b, h, q_idx, kv_idx):
            return score + self.score_bias(positions[q_idx][None], positions[kv_idx][None], layer)[h, 0, 0]

        return mod

    # ---- fine-tuning --------------------------------------------------------------------------------------
    def inherit(self, state: dict[str, torch.Tensor], prefix: str, how: str) -> None:
        """Adapt a parent run's weights of this scheme (the keys of ``state`` under ``prefix``) in place to this
        scheme's shapes, for a fine-tune that starts from them (``pe-bench finetune``). ``how``: the policy for
        positions the parent never had (finetune.new_positions). Default: nothing is sized by the length."""

    # ---- bookkeeping -------------------------------------------------------------------------------------
    def label(self) -> str:
        """Name plus the options that differ from the defaults, e.g. ``learned[beyond_table=clamp]``: the row
        name in every table, so a number always says which variant produced it."""
        return options_label(self.name, self.options)


# How FlexAttention takes a learned per-distance bias (T5, KERPLE) when it needs the bias's gradient. "distance":
# the kernel gathers the (H, n) table, and its backward adds every score's gradient into one of n addresses per head
# by atomic adds from every tile (the addresses of one diagonal collide within a tile). "matrix": the table is first
# expanded to its lower-triangular Toeplitz matrix (H, T, T), one address per (query, key) pair, and the table's
# gradient is the sum of each diagonal of the matrix's (LowerToeplitz.backward): no colliding atomics.
FLEX_LEARNED_TABLE = "matrix"


class LowerToeplitz(torch.autograd.Function):
    """table: (H, n), the value at distance n − 1 − j -> (H, n, n) with [h, i, j] = table[h, n − 1 − (i − j)] for
    j <= i and 0 above the diagonal. Backward: the table's gradient is the sum of each diagonal of the lower
    triangle, by the skew of a row-padded copy (no scatter)."""

    @staticmethod
    def forward(ctx, table: torch.Tensor) -> torch.Tensor:
        n = table.shape[-1]
        i = torch.arange(n, device=table.device)
        distance = i[:, None] - i[None, :]  # (n, n)
        return table[:, (n - 1 - distance).clamp(0, n - 1)].masked_fill(distance < 0, 0.0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        h, n, _ = grad.shape
        # Row i placed at columns n..2n−1 of a 2n-wide row, then read with a row stride of 2n + 1: entry (i, j) lands
        # at column n − (i − j), so column c holds distance n − c (1 <= c <= n; the upper triangle lands past n).
        flat = nn.functional.pad(grad, (n, 0)).reshape(h, 2 * n * n)
        skewed = nn.functional.pad(flat, (0, n)).reshape(h, n, 2 * n + 1)
        return skewed[:, :, 1:n + 1].sum(1)  # table index c − 1 = n − 1 − distance


class RowBias:
    """A data-dependent bias (B, H, T, T) given by blocks of query rows, never whole unless asked: what
    ``input_bias`` may return outside autograd (at 8 × 2048 tokens a whole bias is 1 GiB a layer)."""

    def block(self, i: int, j: int) -> torch.Tensor:
        """The bias of query rows [i, j) against keys [0, j): (B, H, j − i, j), float32, a new tensor (attention masks
        it in place); entries past the diagonal may hold anything finite."""
        raise NotImplementedError

    def full(self) -> torch.Tensor:
        """The whole bias (B, H, T, T)."""
        raise NotImplementedError


def whole(bias: torch.Tensor | RowBias) -> torch.Tensor:
    """A data-dependent bias as one tensor (B, H, T, T), whether given whole or by blocks of rows."""
    return bias.full() if isinstance(bias, RowBias) else bias


def lean_inference() -> bool:
    """Outside autograd and running eagerly: the evaluation paths that save memory (query rows by blocks, kept
    tables, in-place ops) apply. Under torch.compile the plain computation is traced instead: inductor fuses it, and
    (torch 2.11, CUDA) failed to lower the Toeplitz view of a per-distance bias row."""
    return not torch.is_grad_enabled() and not torch.compiler.is_compiling()


def values_of(tensors) -> tuple[torch.Tensor, ...]:
    """A copy of the values a table kept outside autograd was computed from, for ``same_values`` to check it with.
    Version counters cannot tell: the fused AdamW updates parameters in place without bumping them (torch 2.13)."""
    return tuple(t.detach().clone() for t in tensors)


def same_values(kept: tuple[torch.Tensor, ...], tensors) -> bool:
    """Whether ``tensors`` hold exactly the values ``kept`` (from ``values_of``) copied: same shapes, devices, bits."""
    tensors = tuple(tensors)
    return len(kept) == len(tensors) and all(
        a.shape == b.shape and a.device == b.device and a.dtype == b.dtype and torch.equal(a, b)
        for a, b in zip(kept, tensors))


def log_n(positions: torch.Tensor) -> torch.Tensor:
    """positions: (T,) -> ln n with n = position + 1 keys seen by a causal query, float (T,): the log-n attention
    temperature's argument (ssmax, and eval.logn for every scheme)."""
    return torch.log1p(positions.float())


def causal_distance(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """i − j for every (query, key) pair, clamped at 0 for the future keys the causal mask removes: (Tq, Tk)."""
    return (q_pos[:, None] - k_pos[None, :]).clamp(min=0)


def position_span(positions: torch.Tensor) -> int:
    """How many distances 0..n−1 increasing positions (T,) span (flex's per-distance tables): last − first + 1.
    Traced by torch.compile, T: positions there are the forward's own 0..T−1 (Decoder refuses others with flex), and
    reading them would break the graph at every layer."""
    if torch.compiler.is_compiling():
        return positions.shape[0]
    return int(positions[-1] - positions[0]) + 1 if positions.numel() else 1


def distance_span(distance: torch.Tensor, shape: ModelShape) -> int:
    """How many distances 0..n−1 a per-distance table needs for ``distance`` (Tq, Tk): its largest + 1, read from the
    tensor. Traced by torch.compile, where reading it would break the graph at every layer, the bound the positions
    there have: the forward's own 0..T−1, or the training's (below shape.position_range); an index past it fails
    loudly (inductor's bounds assertions), never silently."""
    if torch.compiler.is_compiling():
        return max(distance.shape[-1], shape.position_range)
    return int(distance.max()) + 1


def options_label(name: str, options: Any, skip: tuple[str, ...] = ()) -> str:
    """``name[key=value,...]`` for the options that differ from their defaults (``skip``: fields left out)."""
    if not dataclasses.is_dataclass(options):
        return name
    changed = [
        f"{f.name}={getattr(options, f.name)}"
        for f in dataclasses.fields(options)
        if f.name not in skip and getattr(options, f.name) != _default(f)
    ]
    return f"{name}[{','.join(changed)}]" if changed else name


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING

"""Rotary position embedding (Su et al. 2021, RoFormer eq. 34): rotate each (q, k) pair by p·θ_k, θ_k = b^(-2k/d),
so that q_m·k_n depends only on m − n.

Context extension (``scaling``) changes the frequencies of a model trained with plain RoPE, typically at evaluation
time only (``pe-bench eval RUN scheme.scaling.type=yarn scheme.scaling.factor=8``). With scale s, rotary dim d,
base b, original (training) length L, exactly as Hugging Face ``modeling_rope_utils`` defines them:

- ``linear``  — position interpolation (Chen et al. 2023): θ_k / s;
- ``ntk``     — NTK-aware base (bloc97): b' = b·s^(d/(d−2));
- ``dynamic`` — dynamic NTK: for current length ℓ > L, b' = b·(s·ℓ/L − (s − 1))^(d/(d−2)); plain RoPE up to L;
- ``yarn``    — YaRN (Peng et al. 2024, eq. 17–22): per-dimension blend of θ_k/s and θ_k by a linear ramp between
  the dimensions where L/λ_k crosses β=32 and α=1 rotations, and attention temperature √(1/t) = 0.1·ln s + 1;
- ``llama3``  — Llama 3.1: wavelengths λ_k above L/low_freq_factor use θ_k/s, below L/high_freq_factor θ_k, and
  a smooth blend in between;
- ``longrope`` — LongRoPE (Ding et al. 2024, arXiv:2402.13753), as Hugging Face defines it: θ_k / λ_k with given
  per-dimension factors λ (``long_factor`` past L, ``short_factor`` up to it; d/2 numbers each, usually found by the
  paper's search and read from a model's config), attention factor √(1 + ln s / ln L);
- ``rerope``  — ReRoPE (Su 2023, "Rectified Rotary Position Embeddings"): relative positions clipped at a window w
  (``window``, default L): exact within w, w beyond — logits q_i·R(w)·k_j for i − j >= w, computed as score terms
  from a second q·k product (so RoPE with ReRoPE runs explicit attention).

- ``self_extend`` — Self-Extend (Jin et al. 2024, arXiv:2401.01325, datamllab/LongLM): neighbour attention at the
  true positions within a window w (``window``, default L/2), grouped attention beyond it, with the query at
  ⌊i/G⌋ + w − ⌊w/G⌋ and the key at ⌊j/G⌋ (G = ``factor``), merged per (query, key) before one softmax;
- ``lm_infinite`` — LM-Infinite (Han et al. 2024, arXiv:2308.16137): a Λ-shaped mask — the first n keys
  (``global_tokens``, default 10) and a local window w (default L) — with distances capped at L;
- ``streaming`` — attention sinks / StreamingLLM (Xiao et al. 2024, arXiv:2309.17453), as mit-han-lab/streaming-llm
  decodes token by token: n sink tokens (default 4) and the w most recent keys, the query's own included (default
  L − n; the code's start_size = n, recent_size = w − 1), at their positions in that cache. Nothing is evicted until
  the cache exceeds n + w − 1 keys: queries i < n + w see every key at its true position; from i = n + w on a sink j
  sits at distance n + w − 1 − j and the keys j >= n with i − j >= w are gone.
- ``dual_chunk`` — dual chunk attention (ChunkLlama, An et al. 2024, arXiv:2402.17463), as HKUNLP/ChunkLlama indexes
  it: with c = L, S = ⌊3c/4⌋ and a local window w (default c/8), chunks of C = S − w tokens; a key sits at j mod C,
  a query at i mod C for keys of its own chunk, at min(i mod C + C, S) for the chunk before, at min(2C − 1, S)
  beyond — every distance below c, one softmax over all keys (the code's temperature past c is left out).
The last five act on the logits as score terms (a second q·k product at moved positions, −∞ for the keys a mask
drops), so they run explicit attention.

``resonance`` (Resonance RoPE, Wang et al. 2024, arXiv:2403.00071, §4), with any type: every wavelength
λ_k = 2π/θ'_k of the (scaled) frequencies is rounded to the nearest integer, θ'_k ← 2π / round(λ_k), so that each
dimension repeats exactly at integer positions and a position past L shows the same angles as one seen in training.
With ``yarn`` and ``attention_factor: 1`` YaRN is NTK-by-parts alone, without its temperature.

Each scaling type reads only its own fields (linear, ntk: factor; dynamic: + original_length; yarn: + beta_fast,
beta_slow, attention_factor; llama3: + low_freq_factor, high_freq_factor; longrope: factor, original_length,
long_factor, short_factor, attention_factor; rerope: window; self_extend: factor, window; lm_infinite:
original_length, window, global_tokens; streaming: window, global_tokens; dual_chunk: original_length, window);
setting another is refused, not ignored.

Head dimension: rotation acts on pairs of dimensions, so the head dimension d_model / n_heads must be even. An odd
one is an error when the config is composed (naming the fix), not a silently unrotated last dimension that no row
label would show. Partial rotary (``rotary_fraction`` < 1) rotates the first ⌊fraction · head_dim⌋ dimensions
rounded down to an even count (GPT-NeoX's rotary_pct) and passes the rest through; the label shows the fraction.
xPos follows the same rule.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from pe_bench.ranges import fmt, ranged
from pe_bench.schemes.base import ModelShape, Scheme, options_label

LAYOUTS = ("half", "interleaved")
SCALINGS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "rerope", "self_extend", "lm_infinite",
            "streaming", "dual_chunk")
# The types that keep RoPE's frequencies and act on the logits (RoPE.score_terms): explicit attention.
ON_LOGITS = ("rerope", "self_extend", "lm_infinite", "streaming", "dual_chunk")
# The RoPEScaling fields each type reads (scaled_inv_freq); the others must keep their defaults.
SCALING_READS = {
    "none": (),
    "linear": ("factor",),
    "ntk": ("factor",),
    "dynamic": ("factor", "original_length"),
    "yarn": ("factor", "original_length", "beta_fast", "beta_slow", "attention_factor"),
    "llama3": ("factor", "original_length", "low_freq_factor", "high_freq_factor"),
    "longrope": ("factor", "original_length", "long_factor", "short_factor", "attention_factor"),
    "rerope": ("window",),
    "self_extend": ("factor", "window"),
    "lm_infinite": ("original_length", "window", "global_tokens"),
    "streaming": ("window", "global_tokens"),
    "dual_chunk": ("original_length", "window"),
}


def require_even_head_dim(name: str, shape: ModelShape) -> None:
    """Rotary schemes rotate pairs of dimensions: an odd head dimension is refused (see the module docstring)."""
    if shape.head_dim % 2:
        raise ValueError(f"{name} rotates pairs of dimensions, but the head dimension model.d_model/model.n_heads = "
                         f"{shape.d_model}/{shape.n_heads} = {shape.head_dim} is odd; choose d_model and n_heads "
                         f"with an even quotient, e.g. model.d_model={shape.d_model + shape.n_heads}")


@dataclass
class RoPEScaling:
    type: str = "none"  # one of SCALINGS
    factor: float = ranged(1.0, ge=1)  # s
    # L the model was trained at; None = the run's training length
    original_length: int | None = ranged(None, ge=1, hint="null = the run's train.seq_len")
    beta_fast: float = ranged(32.0, gt=0)  # yarn: β, rotations above which a dimension is left unscaled (> α)
    beta_slow: float = ranged(1.0, gt=0)  # yarn: α, rotations below which a dimension is fully interpolated
    attention_factor: float | None = ranged(None, gt=0, hint="null = 0.1·ln(s) + 1")  # yarn: None = 0.1·ln s + 1
    low_freq_factor: float = ranged(1.0, gt=0)  # llama3
    high_freq_factor: float = ranged(4.0, gt=0)  # llama3 (> low_freq_factor)
    long_factor: list[float] | None = ranged(None, gt=0, hint="d/2 factors")  # longrope: λ_k past L
    short_factor: list[float] | None = ranged(None, gt=0, hint="d/2 factors")  # longrope: λ_k up to L
    # rerope, self_extend, lm_infinite, streaming, dual_chunk: w; null = L (rerope, lm_infinite), L/2 (self_extend),
    # L − n (streaming), L/8 (dual_chunk)
    window: int | None = ranged(None, ge=1, hint="null = the type's default (docs/schemes.md)")
    # lm_infinite: the first n keys every query sees (null = 10); streaming: its sink tokens (null = 4)
    global_tokens: int | None = ranged(None, ge=1, hint="null = 10 (lm_infinite), 4 (streaming)")
    resonance: bool = False  # Resonance RoPE: round every wavelength 2π/θ'_k to an integer (any type)

    def __post_init__(self) -> None:
        if self.type not in SCALINGS:
            raise ValueError(f"scheme.scaling.type must be one of {', '.join(SCALINGS)}, got {self.type!r}")
        if self.factor < 1.0:  # also declared as its range; kept for options built directly in Python
            raise ValueError(f"scheme.scaling.factor must be >= 1, got {self.factor}")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name not in ("type", "resonance") and f.name not in SCALING_READS[self.type] and value != f.default:
                readers = [t for t, keys in SCALING_READS.items() if f.name in keys]
                raise ValueError(f"scheme.scaling.{f.name}={fmt(value)} is not read by scheme.scaling.type="
                                 f"{self.type}; use scheme.scaling.type={'|'.join(readers)}")
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(f"scheme.scaling.high_freq_factor={fmt(self.high_freq_factor)} must exceed "
                             f"scheme.scaling.low_freq_factor={fmt(self.low_freq_factor)}")
        if self.type == "longrope" and (self.long_factor is None or self.short_factor is None):
            raise ValueError("scheme.scaling.type=longrope needs scheme.scaling.long_factor and "
                             "scheme.scaling.short_factor (d/2 factors each, e.g. a model's rope_scaling config)")
        if self.type == "self_extend" and self.factor != int(self.factor):
            raise ValueError(f"scheme.scaling.factor={fmt(self.factor)} is Self-Extend's group size G: give a whole "
                             "number, e.g. 16")
        if self.beta_fast <= self.beta_slow:
            raise ValueError(f"scheme.scaling.beta_fast={fmt(self.beta_fast)} must exceed "
                             f"scheme.scaling.beta_slow={fmt(self.beta_slow)} (β > α rotations)")


@dataclass
class RoPEOptions:
    base: float = ranged(10000.0, gt=1)
    layout: str = "half"  # "half": rotate_half pairs (i, i + d/2), NeoX/HF; "interleaved": pairs (2i, 2i+1), GPT-J
    # Partial rotary: rotate the first ⌊fraction·head_dim⌋ dims of each head, rounded down to an even count; the
    # head dimension itself must be even (see the module docstring).
    rotary_fraction: float = ranged(1.0, gt=0, le=1)
    # p-RoPE (Barbero et al. 2024, arXiv:2410.06205, §6): the fraction p of the highest frequencies that rotate; the
    # other pairs (the lowest frequencies, d/2 − ⌊p·d/2⌋ of them) get θ = 0: position-free. 1 = RoPE, 0 = NoPE.
    frequencies_kept: float = ranged(1.0, ge=0, le=1)
    # HoPE (Chen et al. 2024, arXiv:2410.21216, §3): only frequencies that complete a period within the training
    # length rotate (θ_k·L >= 2π); the others are position-free.
    hope: bool = False
    scaling: RoPEScaling = field(default_factory=RoPEScaling)

    def __post_init__(self) -> None:
        if isinstance(self.scaling, dict):
            self.scaling = RoPEScaling(**self.scaling)
        if self.layout not in LAYOUTS:
            raise ValueError(f"scheme.layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")


def inv_freq(rot_dim: int, base: float) -> torch.Tensor:
    """θ_k = base^(−2k/d), k = 0..d/2−1, float64: (d/2,)."""
    return base ** (-torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN attention temperature √(1/t) = 0.1·m·ln s + 1 (1 for s <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_correction_range(rot_dim: int, base: float, original_length: int, beta_fast: float,
                          beta_slow: float) -> tuple[int, int]:
    """Dimension indices between which YaRN's ramp runs: d·ln(L/(2π·rot)) / (2 ln b), floored (β) and ceiled (α),
    clamped to [0, d−1]. d=64, b=1e4, L=512 → (3, 16)."""

    def dim_for(rotations: float) -> float:
        return rot_dim * math.log(original_length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = math.floor(dim_for(beta_fast)), math.ceil(dim_for(beta_slow))
    return max(low, 0), min(high, rot_dim - 1)


def scaled_inv_freq(rot_dim: int, base: float, sc: RoPEScaling, original_length: int,
                    seq_len: int) -> tuple[torch.Tensor, float]:
    """Frequencies (d/2,) float64 and the attention factor for a scaling config at current length ``seq_len``."""
    s, d = sc.factor, rot_dim
    if sc.type == "none":
        return inv_freq(d, base), 1.0
    if sc.type == "linear":
        return inv_freq(d, base) / s, 1.0
    if sc.type == "ntk":
        return inv_freq(d, base * s ** (d / (d - 2))), 1.0
    if sc.type == "dynamic":
        ell = max(seq_len, original_length)
        return inv_freq(d, base * (s * ell / original_length - (s - 1)) ** (d / (d - 2))), 1.0
    theta = inv_freq(d, base)
    if sc.type in ON_LOGITS:  # the frequencies are RoPE's; the window acts on the logits (RoPE.score_terms)
        return theta, 1.0
    if sc.type == "longrope":
        factors = sc.long_factor if seq_len > original_length else sc.short_factor
        attention = sc.attention_factor if sc.attention_factor is not None else (
            math.sqrt(1 + math.log(s) / math.log(original_length)) if s > 1 else 1.0)
        return theta / torch.tensor(factors, dtype=torch.float64), attention
    if sc.type == "yarn":
        low, high = yarn_correction_range(d, base, original_length, sc.beta_fast, sc.beta_slow)
        high = high + 0.001 if low == high else high
        ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        keep = 1 - ramp  # 1: dimension left as trained (high frequency), 0: fully interpolated
        attention = sc.attention_factor if sc.attention_factor is not None else yarn_mscale(s)
        return theta / s * (1 - keep) + theta * keep, attention
    # llama3
    wavelen = 2 * math.pi / theta
    low_wavelen, high_wavelen = original_length / sc.low_freq_factor, original_length / sc.high_freq_factor
    out = torch.where(wavelen > low_wavelen, theta / s, theta)
    smooth = (original_length / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor)
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, (1 - smooth) * out / s + smooth * out, out), 1.0


def resonance(theta: torch.Tensor) -> torch.Tensor:
    """Resonance RoPE's frequencies (d/2,): θ_k ← 2π / round(2π/θ_k), the wavelengths rounded to integers (a
    wavelength never rounds below 6: θ <= 1)."""
    return 2 * math.pi / torch.round(2 * math.pi / theta)


def rope_angles(positions: torch.Tensor, rot_dim: int, base: float,
                frequencies: torch.Tensor | None = None) -> torch.Tensor:
    """positions: (T,) -> angles p·θ_k: (T, rot_dim/2), in float32 (computed in float64)."""
    theta = inv_freq(rot_dim, base) if frequencies is None else frequencies
    return (positions.to(torch.float64)[:, None] * theta.to(positions.device)[None, :]).float()


def apply_rotary(x: torch.Tensor, angles: torch.Tensor, layout: str, scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """x: (B, H, T, D), angles: (T, R/2) with R <= D even; rotates the first R dims of x, leaves the rest.
    ``scale`` multiplies the rotated pairs: a float, or (T, R/2) per position and frequency (xPos)."""
    rot_dim = 2 * angles.shape[-1]
    xr, rest = x[..., :rot_dim].float(), x[..., rot_dim:]
    cos, sin = angles.cos() * scale, angles.sin() * scale
    if layout == "half":
        x1, x2 = xr[..., : rot_dim // 2], xr[..., rot_dim // 2 :]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return torch.cat([out.to(x.dtype), rest], dim=-1)


class RoPE(Scheme):
    name = "rope"
    description = "rotary embedding of q and k by position-dependent angles; eval-time extension via scheme.scaling"
    citation = "Su et al. 2021, arXiv:2104.09864"
    acts_on = ("qk",)
    relative = True
    Options = RoPEOptions
    hf_architecture = "gpt_neox"  # pe-bench export (pe_bench.pretrained.export)
    eval_options = ("scaling",)
    style = ("#1f4fd6", "s")
    # options added after runs of RoPE were named: at their YAML defaults they stay out of the run identity
    late_options = ("frequencies_kept", "hope", "scaling.long_factor", "scaling.short_factor", "scaling.window",
                    "scaling.resonance", "scaling.global_tokens")
    variant_styles = {"rope+dynamic": (-0.35, "dashed"), "rope+ntk×8": (0.2, "dashdot"),
                      "rope+yarn×8": (0.35, "longdash"), "rope+llama3×8": (-0.2, "dotted"),
                      "rope+linear×8": (0.5, "dashdotdot"), "rope+rerope": (-0.5, "shortdash")}

    def __init__(self, options: RoPEOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        require_even_head_dim(self.name, shape)
        self.rot_dim = int(shape.head_dim * options.rotary_fraction) // 2 * 2
        if self.rot_dim == 0:
            raise ValueError(f"scheme.rotary_fraction={fmt(options.rotary_fraction)} rotates no dimension of a "
                             f"{shape.head_dim}-dim head; raise it")
        sc = options.scaling
        self.original_length = sc.original_length or shape.pretrained_length
        for key in ("long_factor", "short_factor"):
            factors = getattr(sc, key)
            if factors is not None and len(factors) != self.rot_dim // 2:
                raise ValueError(f"scheme.scaling.{key} has {len(factors)} factors; this head rotates "
                                 f"{self.rot_dim} dimensions: give {self.rot_dim // 2} (one per pair)")
        L = shape.pretrained_length
        self.global_tokens = sc.global_tokens or (10 if sc.type == "lm_infinite" else 4)
        self.window = sc.window or {"self_extend": max(L // 2, 1), "streaming": max(L - self.global_tokens, 1),
                                    "dual_chunk": max(self.original_length // 8, 1)}.get(sc.type, L)
        if sc.type == "dual_chunk" and 3 * self.original_length // 4 - self.window < 1:
            raise ValueError(f"scheme.scaling.window={self.window} leaves no chunk: dual_chunk's chunks are "
                             f"⌊3L/4⌋ − w = {3 * self.original_length // 4} − {self.window} tokens; lower the window")
        if sc.type in ("ntk", "dynamic") and self.rot_dim <= 2:  # b·s^(d/(d−2)) needs d > 2
            raise ValueError(f"scheme.scaling.type={sc.type} needs a rotary dimension above 2, but this head "
                             f"rotates {self.rot_dim}; raise scheme.rotary_fraction or the head dimension")
        self.rotating = self.rotating_pairs()
        # Every type but dynamic is independent of the length: computed once, moved with the module.
        theta, self.attention = self.frequencies(shape.train_seq_len)
        self.register_buffer("theta", theta, persistent=False)

    def frequencies(self, seq_len: int) -> tuple[torch.Tensor, float]:
        """θ'_k (rot_dim/2,) float64 and the attention factor at current sequence length ``seq_len``; the pairs that
        p-RoPE or HoPE leave position-free have θ = 0 (a rotation by 0: the identity), also after any scaling."""
        theta, attention = scaled_inv_freq(self.rot_dim, self.options.base, self.options.scaling,
                                           self.original_length, seq_len)
        if self.options.scaling.resonance:
            theta = resonance(theta)
        return theta * self.rotating.to(theta.dtype), attention

    def rotating_pairs(self) -> torch.Tensor:
        """(rot_dim/2,) bool: the pairs that rotate. p-RoPE keeps the ⌊p·d/2⌋ highest frequencies (the first k);
        HoPE those whose unscaled frequency completes a period within the training length, θ_k·L >= 2π."""
        theta = inv_freq(self.rot_dim, self.options.base)
        keep = torch.arange(theta.shape[0]) < int(self.options.frequencies_kept * theta.shape[0] + 1e-9)
        if self.options.hope:  # the length the weights were trained at (not an eval-time scaling.original_length)
            keep &= theta * self.shape.pretrained_length >= 2 * math.pi
        return keep

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        theta, attention = self.theta, self.attention
        if self.options.scaling.type in ("dynamic", "longrope"):  # frequencies depend on the current length
            theta, attention = self.frequencies(int(positions.max()) + 1)
        angles = rope_angles(positions, self.rot_dim, self.options.base, theta)
        # YaRN's temperature multiplies cos and sin (HF attention_factor), so q·k gains attention².
        return (apply_rotary(q, angles, self.options.layout, attention),
                apply_rotary(k, angles, self.options.layout, attention))

    def has_score_terms(self) -> bool:
        return self.options.scaling.type in ON_LOGITS

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    layer: int) -> torch.Tensor | None:
        """The types that act on the logits (ON_LOGITS): where a type moves a (query, key) pair to other positions
        (a, b), the logit is q·R(b − a)·k; from the rotated q_i = R(i)q and k_j = R(j)k it is R(a − i)q_i · R(b − j)k_j,
        and the terms are that minus the rotated q_i·k_j; −∞ where the type's mask drops the key; 0 elsewhere.
        (B, H, Tq, Tk). With d = i − j, window w, n global tokens:
        - rerope: d >= w at distance w (a = w, b = 0);
        - self_extend: d >= w at the grouped positions a = ⌊i/G⌋ + w − ⌊w/G⌋, b = ⌊j/G⌋ (LongLM's merge);
        - lm_infinite: keys j >= n with d >= w dropped; every key seen at d >= L at distance L (a = L, b = 0);
        - streaming: once the cache is full (i >= n + w), keys j >= n with d >= w dropped and every sink j at its
          cache distance n + w − 1 − j; plain RoPE for i < n + w;
        - dual_chunk: every pair moved (``dual_chunk_terms``)."""
        if not self.has_score_terms():
            return None
        sc, w, n = self.options.scaling.type, self.window, self.global_tokens
        if sc == "dual_chunk":
            return self.dual_chunk_terms(q, k, q_pos, k_pos)
        d = q_pos[:, None] - k_pos[None, :]
        beyond = d >= w
        dropped = None
        if sc == "rerope":
            moved, q_shift, k_shift = beyond, w - q_pos, -k_pos
        elif sc == "self_extend":
            G = int(self.options.scaling.factor)
            moved, q_shift, k_shift = beyond, q_pos // G + w - w // G - q_pos, k_pos // G - k_pos
        else:
            if sc == "streaming":  # StartRecentKVCache evicts only once it holds more than n + w − 1 keys
                beyond = beyond & (q_pos >= n + w)[:, None]
            dropped = beyond & (k_pos >= n)[None, :]
            if sc == "lm_infinite":
                L = self.original_length
                moved, q_shift, k_shift = (d >= L) & ~dropped, L - q_pos, -k_pos
            else:  # streaming
                moved, q_shift, k_shift = beyond & ~dropped, n + w - 1 - q_pos, torch.zeros_like(k_pos)
        near = self.logits_at(q, k, None, None)
        terms = torch.where(moved, self.logits_at(q, k, q_shift, k_shift) - near, torch.zeros((), device=q.device))
        return terms if dropped is None else terms.masked_fill(dropped, float("-inf"))

    def dual_chunk_terms(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor,
                         k_pos: torch.Tensor) -> torch.Tensor:
        """Dual chunk attention's logits minus the rotated q·k, (B, H, Tq, Tk): chunks of C = S − w, S = ⌊3L/4⌋; the
        key at j mod C; the query at i mod C (same chunk), min(i mod C + C, S) (the chunk before), min(2C − 1, S)
        (farther)."""
        S = 3 * self.original_length // 4
        C = S - self.window
        offset = q_pos % C
        chunks = q_pos[:, None] // C - k_pos[None, :] // C  # 0: same chunk, 1: the one before, >= 2: farther
        out = torch.zeros(chunks.shape, device=q.device)
        for case, a in ((0, offset), (1, (offset + C).clamp(max=S)), (2, torch.full_like(q_pos, min(2 * C - 1, S)))):
            out = torch.where(chunks.clamp(max=2) == case, self.logits_at(q, k, a - q_pos, k_pos % C - k_pos), out)
        return out - self.logits_at(q, k, None, None)

    def logits_at(self, q: torch.Tensor, k: torch.Tensor, q_shift: torch.Tensor | None,
                  k_shift: torch.Tensor | None) -> torch.Tensor:
        """The scaled logits (B, H, Tq, Tk) float32 of the rotated q and k, each first moved by its shift in
        positions, (Tq,) and (Tk,) (R(shift) applied again; None: not moved)."""
        angles = lambda p: rope_angles(p, self.rot_dim, self.options.base, self.theta)  # noqa: E731
        if q_shift is not None:
            q = apply_rotary(q, angles(q_shift), self.options.layout)
        if k_shift is not None:
            k = apply_rotary(k, angles(k_shift), self.options.layout)
        return (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5

    def label(self) -> str:
        """``rope+yarn×8`` for a scaled model (plus any other changed option in brackets), ``+resonance`` after it."""
        sc = self.options.scaling
        base = options_label(self.name, self.options, skip=("scaling",))
        after = "+resonance" if sc.resonance else ""
        if sc.type == "none":
            return base + after
        extra = [f"{f.name}={getattr(sc, f.name)}" for f in dataclasses.fields(sc)
                 if f.name not in ("type", "factor", "resonance") and getattr(sc, f.name) != f.default]
        tag = f"+{sc.type}" + (f"×{sc.factor:g}" if not (sc.type in ("dynamic", *ON_LOGITS) and sc.factor == 1)
                               else "")
        return base + tag + (f"[{','.join(extra)}]" if extra else "") + after


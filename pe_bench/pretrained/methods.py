"""pe-bench's RoPE eval-time methods (``scheme.scaling``, pe_bench.schemes.rope) on a RoPE-family checkpoint.

- ``linear``, ``dynamic``, ``yarn``, ``llama3``, ``longrope``: transformers implements them; the checkpoint's config
  gets the same ``rope_parameters`` a model card would give (tests/test_pretrained.py holds pe-bench's own formulas
  against these, logits within 1e-4);
- ``ntk``: the NTK-aware base b·s^(d/(d−2)) is the config's ``rope_theta``;
- ``resonance``: every wavelength of the rotary module's frequencies rounded to an integer after loading;
- ``rerope``, ``self_extend``, ``lm_infinite``, ``streaming``, ``dual_chunk``: they act on the logits, so an
  attention function registered with transformers' ``AttentionInterface`` computes attention explicitly with
  pe-bench's ``RoPE.score_terms`` on the rotated q and k that transformers hands it (by blocks of query rows, so
  memory grows with the window, not its square).

A method that cannot act on an architecture (a model without rotary embeddings, an already scaled one) is refused in
one line naming both.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch

from pe_bench.errors import ConfigError
from pe_bench.pretrained.checkpoint import Checkpoint, transformers_module
from pe_bench.schemes.base import ModelShape
from pe_bench.schemes.rope import ON_LOGITS, RoPE, RoPEOptions, RoPEScaling, resonance

ROPE_FAMILY = ("llama", "mistral", "qwen2", "qwen3", "gpt_neox", "phi")  # each tested (tests/test_pretrained.py)
IN_TRANSFORMERS = ("linear", "dynamic", "yarn", "llama3", "longrope")
QUERY_BLOCK = 1024  # query rows per block of the explicit attention


def rope_setup(ck: Checkpoint) -> tuple[float, float, int]:
    """(rope_theta, rotary fraction, head dim) of a RoPE-family checkpoint's config."""
    c = ck.config
    rp = dict(getattr(c, "rope_parameters", None) or {})
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    fraction = rp.get("partial_rotary_factor") or getattr(c, "partial_rotary_factor", None) or 1.0
    return float(rp.get("rope_theta", 10000.0)), float(fraction), int(head_dim)


def rope_scheme(ck: Checkpoint, sc: RoPEScaling) -> RoPE:
    """pe-bench's RoPE with the checkpoint's base, rotary fraction and heads, trained at its context L."""
    base, fraction, head_dim = rope_setup(ck)
    c = ck.config
    shape = ModelShape(d_model=c.num_attention_heads * head_dim, n_heads=c.num_attention_heads, head_dim=head_dim,
                       train_seq_len=ck.context, n_layers=c.num_hidden_layers)
    return RoPE(RoPEOptions(base=base, rotary_fraction=fraction, scaling=sc), shape)


def check_applies(ck: Checkpoint, sc: RoPEScaling) -> None:
    """Refuse a method the checkpoint cannot take, in one line naming both."""
    if sc.type == "none" and not sc.resonance:
        return
    what = f"scheme.scaling.type={sc.type}" if sc.type != "none" else "scheme.scaling.resonance=true"
    if ck.model_type not in ROPE_FAMILY:
        raise ConfigError(f"{what} is a RoPE method, but {ck.name} is a {ck.model_type} model; pe-bench applies RoPE "
                          f"methods to {', '.join(ROPE_FAMILY)} checkpoints")
    rope_type = (getattr(ck.config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope_type != "default":
        raise ConfigError(f"{what} cannot stack on {ck.name}'s own rope_type={rope_type}; evaluate the checkpoint "
                          "as it is (no scheme.scaling), or one with plain RoPE")
    if sc.resonance and sc.type in ("dynamic", "longrope"):
        raise ConfigError(f"scheme.scaling.resonance=true rounds fixed frequencies, but type={sc.type} changes them "
                          "with the length; use it with none, linear, ntk, yarn or llama3")
    window = getattr(ck.config, "sliding_window", None) if getattr(ck.config, "use_sliding_window", True) else None
    if sc.type in ON_LOGITS and window:
        raise ConfigError(f"{what} computes its own attention pattern, but {ck.name} attends within a sliding window "
                          f"of {ck.config.sliding_window}; evaluate it without the method")


def model_config(ck: Checkpoint, sc: RoPEScaling) -> Any:
    """The checkpoint's config with the method's rope_parameters (a copy; the checkpoint's own is left alone)."""
    config = copy.deepcopy(ck.config)
    rp = dict(config.rope_parameters)
    original = sc.original_length or ck.context
    if sc.type in IN_TRANSFORMERS:
        rp.update(rope_type=sc.type, factor=sc.factor)
        if sc.type == "dynamic":
            config.max_position_embeddings = original  # transformers' dynamic NTK scales from it
        else:
            rp["original_max_position_embeddings"] = original
        reads = {"yarn": ("beta_fast", "beta_slow", "attention_factor"),
                 "llama3": ("low_freq_factor", "high_freq_factor"),
                 "longrope": ("long_factor", "short_factor", "attention_factor")}.get(sc.type, ())
        rp.update({k: getattr(sc, k) for k in reads if getattr(sc, k) is not None})
    elif sc.type == "ntk":
        d = rope_scheme(ck, sc).rot_dim
        rp["rope_theta"] = rp.get("rope_theta", 10000.0) * sc.factor ** (d / (d - 2))
    config.rope_parameters = rp
    return config


def load_model(ck: Checkpoint, sc: RoPEScaling, device: torch.device, dtype: torch.dtype):
    """The checkpoint as a transformers causal LM with the method applied, in eval mode on ``device``."""
    transformers = transformers_module()
    check_applies(ck, sc)
    attention = "sdpa"
    if sc.type in ON_LOGITS:
        attention = f"pe_bench_{sc.type}"
        transformers.AttentionInterface.register(attention, logit_attention(rope_scheme(ck, sc).to(device)))
        transformers.masking_utils.AttentionMaskInterface.register(
            attention, transformers.masking_utils.ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model = transformers.AutoModelForCausalLM.from_pretrained(
        ck.path, config=model_config(ck, sc), local_files_only=True, dtype=dtype, attn_implementation=attention)
    if sc.resonance:
        for module in model.modules():
            if isinstance(getattr(module, "inv_freq", None), torch.Tensor):
                rounded = resonance(module.inv_freq.double()).to(module.inv_freq.dtype)
                module.inv_freq.copy_(rounded)
                if isinstance(getattr(module, "original_inv_freq", None), torch.Tensor):
                    module.original_inv_freq.copy_(rounded)
    return model.to(device).eval()


def logit_attention(scheme: RoPE) -> Callable:
    """An attention function for transformers' AttentionInterface: causal softmax attention over the rotated q and k
    it is handed, plus ``scheme.score_terms`` (a type in ON_LOGITS). Positions are 0..T−1 (pe-bench scores whole
    windows, no padding, no cache)."""

    def attend(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask=None,
               scaling: float | None = None, dropout: float = 0.0, **kwargs) -> tuple[torch.Tensor, None]:
        """query: (B, H, T, D), key and value: (B, H_kv, T, D) -> (B, T, H, D)."""
        B, H, T, D = query.shape
        key = key.repeat_interleave(H // key.shape[1], dim=1)
        value = value.repeat_interleave(H // value.shape[1], dim=1)
        scale = scaling if scaling is not None else D**-0.5
        pos = torch.arange(T, device=query.device)
        out = torch.empty_like(query)
        for a in range(0, T, QUERY_BLOCK):
            b = min(a + QUERY_BLOCK, T)
            q, k = query[:, :, a:b], key[:, :, :b]
            logits = (q.float() @ k.float().transpose(-1, -2)) * scale
            # score_terms are on the scale q·k/√D; this model scales by ``scale``
            logits = logits + scheme.score_terms(q, k, pos[a:b], pos[:b], 0) * (scale * math.sqrt(D))
            logits = logits.masked_fill(pos[None, :b] > pos[a:b, None], float("-inf"))
            out[:, :, a:b] = torch.softmax(logits, dim=-1).to(value.dtype) @ value[:, :, :b]
        return out.transpose(1, 2).contiguous(), None

    return attend

"""A trained pe-bench run as a Hugging Face checkpoint, wherever an architecture in transformers computes the same
function (``pe-bench export RUN DIR``). A scheme names its architecture (``Scheme.hf_architecture``); each
architecture here maps pe-bench's weights onto its own and says what it cannot hold:

- ``gpt_neox`` (RoPE, NoPE): pre-LN blocks in sequence (``use_parallel_residual=False``), LayerNorms with bias, GELU
  MLP, no attention bias (the MLP's biases are zeros), rotary on the first ``rotary_pct`` of each head in the
  rotate-half layout (0 for NoPE), base ``rope_theta``; q, k, v interleaved per head in ``query_key_value``.
- ``gpt2`` (learned, sinusoidal): the same blocks; the absolute positions become ``wpe`` (the scheme's embedding of
  position p added to a zero vector, checked to be additive), so positions past its ``n_positions`` rows do not
  exist.

The exported model is run on a probe sequence beside pe-bench's before anything is written: logits further apart
than 1e-4 (fp32) refuse the export, so a checkpoint that computes another function is never written.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from pe_bench.config import Config, ConfigError
from pe_bench.model.decoder import Decoder
from pe_bench.pretrained.checkpoint import transformers_module
from pe_bench.runs import Run, atomic_write_text
from pe_bench.train import load_trained

TOLERANCE = 1e-4  # largest |logit difference| an export may have on its probe (fp32; tests hold 1e-5)


def _blocks_problem(model: Decoder) -> str | None:
    a = model.args
    if a.qk_norm:
        return "model.qk_norm=true (no q/k norm in the architecture)"
    if a.digit_tokens:
        return "Abacus digit positions (model.digit_tokens)"
    if a.d_model % a.n_heads:
        return "a head dimension that is not whole"
    return None


def _default_options(scheme, allowed: tuple[str, ...]) -> str | None:
    """The first option of the scheme set away from its default, outside ``allowed``; None if there is none."""
    import dataclasses

    default = type(scheme.options)()
    for f in dataclasses.fields(scheme.options):
        if f.name not in allowed and getattr(scheme.options, f.name) != getattr(default, f.name):
            return f"scheme.{f.name}={getattr(scheme.options, f.name)}"
    return None


def _neox(model: Decoder, cfg: Config, transformers) -> Any:
    """GPT-NeoX with pe-bench's weights (see the module docstring)."""
    a, s = model.args, model.scheme
    head_dim = a.d_model // a.n_heads
    rot_dim = getattr(s, "rot_dim", 0)
    if rot_dim and s.options.layout != "half":
        raise ConfigError(f"scheme.layout={s.options.layout}: GPT-NeoX rotates in the half layout only")
    base = float(getattr(s.options, "base", 10000.0))
    config = transformers.GPTNeoXConfig(
        vocab_size=a.vocab_size, hidden_size=a.d_model, num_hidden_layers=a.n_layers, num_attention_heads=a.n_heads,
        intermediate_size=model.blocks[0].mlp.fc.out_features, max_position_embeddings=cfg.train.seq_len,
        rotary_pct=rot_dim / head_dim, rotary_emb_base=base, use_parallel_residual=False, attention_bias=False,
        hidden_act="gelu", layer_norm_eps=model.ln_f.eps, tie_word_embeddings=False)
    config.rope_parameters = {**config.rope_parameters, "rope_theta": base, "partial_rotary_factor": rot_dim / head_dim}
    hf = transformers.GPTNeoXForCausalLM(config)
    H, D, C = a.n_heads, head_dim, a.d_model
    state = {"gpt_neox.embed_in.weight": model.tok_emb.weight, "gpt_neox.final_layer_norm.weight": model.ln_f.weight,
             "gpt_neox.final_layer_norm.bias": model.ln_f.bias, "lm_head.weight": model.lm_head.weight}
    for i, b in enumerate(model.blocks):
        p = f"gpt_neox.layers.{i}."
        qkv = b.attn.qkv.weight.view(3, H, D, C).transpose(0, 1).reshape(3 * C, C)  # [Q;K;V] → per head [q;k;v]
        state |= {p + "input_layernorm.weight": b.ln1.weight, p + "input_layernorm.bias": b.ln1.bias,
                  p + "post_attention_layernorm.weight": b.ln2.weight, p + "post_attention_layernorm.bias": b.ln2.bias,
                  p + "attention.query_key_value.weight": qkv, p + "attention.dense.weight": b.attn.proj.weight,
                  p + "mlp.dense_h_to_4h.weight": b.mlp.fc.weight,
                  p + "mlp.dense_h_to_4h.bias": torch.zeros(b.mlp.fc.out_features),
                  p + "mlp.dense_4h_to_h.weight": b.mlp.proj.weight, p + "mlp.dense_4h_to_h.bias": torch.zeros(C)}
    hf.load_state_dict({k: v.detach().float().cpu() for k, v in state.items()}, strict=True)
    return hf


def _gpt2(model: Decoder, cfg: Config, transformers, positions: int) -> Any:
    """GPT-2 with pe-bench's weights, the scheme's absolute positions as ``wpe`` (``positions`` rows)."""
    a, s = model.args, model.scheme
    with torch.no_grad():
        table = s.embed(torch.zeros(1, positions, a.d_model), torch.arange(positions))[0]
        x = torch.randn(2, positions, a.d_model, generator=torch.Generator().manual_seed(0))
        if not torch.allclose(s.embed(x, torch.arange(positions)) - x, table.expand_as(x), atol=1e-6):
            raise ConfigError(f"scheme {s.label()}'s positions are not added to the token embeddings: GPT-2's wpe "
                              "cannot hold them")
    tied = model.lm_head.weight is model.tok_emb.weight
    config = transformers.GPT2Config(
        vocab_size=a.vocab_size, n_positions=positions, n_embd=a.d_model, n_layer=a.n_layers, n_head=a.n_heads,
        n_inner=model.blocks[0].mlp.fc.out_features, activation_function="gelu",
        layer_norm_epsilon=model.ln_f.eps, tie_word_embeddings=tied, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    hf = transformers.GPT2LMHeadModel(config)
    C = a.d_model
    state = {"transformer.wte.weight": model.tok_emb.weight, "transformer.wpe.weight": table,
             "transformer.ln_f.weight": model.ln_f.weight, "transformer.ln_f.bias": model.ln_f.bias,
             "lm_head.weight": model.lm_head.weight}
    for i, b in enumerate(model.blocks):
        p = f"transformer.h.{i}."
        hidden = b.mlp.fc.out_features
        state |= {p + "ln_1.weight": b.ln1.weight, p + "ln_1.bias": b.ln1.bias, p + "ln_2.weight": b.ln2.weight,
                  p + "ln_2.bias": b.ln2.bias,
                  p + "attn.c_attn.weight": b.attn.qkv.weight.T, p + "attn.c_attn.bias": torch.zeros(3 * C),
                  p + "attn.c_proj.weight": b.attn.proj.weight.T, p + "attn.c_proj.bias": torch.zeros(C),
                  p + "mlp.c_fc.weight": b.mlp.fc.weight.T, p + "mlp.c_fc.bias": torch.zeros(hidden),
                  p + "mlp.c_proj.weight": b.mlp.proj.weight.T, p + "mlp.c_proj.bias": torch.zeros(C)}
    missing, unexpected = hf.load_state_dict({k: v.detach().float().cpu().contiguous() for k, v in state.items()},
                                             strict=False)
    if unexpected or [k for k in missing if not k.endswith("attn.bias") and k != "lm_head.weight"]:
        raise ConfigError(f"GPT-2's weights do not match pe-bench's ({(unexpected or missing)[0]})")
    return hf


def export_run(run: Run, out: Path, positions: int | None = None) -> dict[str, Any]:
    """Write the run's trained model into ``out`` as a transformers checkpoint with a tokenizer (see the module
    docstring); returns what was written: architecture, the largest logit difference on the probe, positions."""
    transformers = transformers_module()
    cfg = run.load_config()
    model, _ = load_trained(run, cfg, torch.device("cpu"))
    model = model.float().eval()
    arch = vars(type(model.scheme)).get("hf_architecture")  # the class's own, not a parent's
    problem = _blocks_problem(model) or (
        "data.tokenizer=bpe (pe-bench exports byte-level runs, whose tokenizer it can write)"
        if cfg.data.tokenizer != "byte" else None) or (
        f"scheme {model.scheme.label()} has no architecture in transformers that computes it (pe-bench exports "
        "rope and nope as gpt_neox, learned and sinusoidal as gpt2: docs/pretrained.md)" if arch is None else
        _default_options(model.scheme, ("base", "rotary_fraction", "layout", "beyond_table", "extend_seed")))
    if problem:
        raise ConfigError(f"{run.path.name} cannot be exported: {problem}")
    P = positions or (model.scheme.table.shape[0] if hasattr(model.scheme, "table") else 8 * cfg.train.seq_len)
    hf = (_neox(model, cfg, transformers) if arch == "gpt_neox" else _gpt2(model, cfg, transformers, P)).eval()
    probe_len = min(2 * cfg.train.seq_len, P) if arch == "gpt2" else 2 * cfg.train.seq_len
    probe = torch.randint(0, model.args.vocab_size, (2, probe_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        gap = float((hf(input_ids=probe).logits - model(probe)).abs().max())
    if not math.isfinite(gap) or gap > TOLERANCE:
        raise ConfigError(f"{run.path.name}: the {arch} export's logits differ from pe-bench's by {gap:.2e} on a "
                          f"probe of {probe_len} tokens (more than {TOLERANCE:g}); nothing written")
    note = (f"exported from {run.path} ({cfg.scheme['name']}, L = {cfg.train.seq_len}) as {arch}; max |logit "
            f"difference| on a {probe_len}-token probe: {gap:.2e}\n")
    with staged(out) as stage:
        hf.save_pretrained(stage)
        byte_tokenizer(transformers).save_pretrained(stage)
        atomic_write_text(stage / MARK, note)
    return {"architecture": arch, "gap": gap, "positions": P if arch == "gpt2" else None}


MARK = "pe_bench_export.txt"  # what says a directory is a pe-bench export (and may be replaced by another)


def check_destination(out: Path) -> None:
    """An export goes into a new or empty directory, or replaces an earlier export; anything else is refused."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARK).exists())):
        raise ConfigError(f"{out} exists and is not an earlier pe-bench export; give a new directory")


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A staging directory beside ``out`` that replaces it whole once everything is written (removed on failure)."""
    check_destination(out)
    stage = out.with_name(f".{out.name}.{os.getpid()}.staging")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        yield stage
        old = out.with_name(f".{out.name}.{os.getpid()}.old")
        if out.exists():
            out.rename(old)
        stage.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def byte_tokenizer(transformers):
    """pe-bench's byte tokenizer (id = the byte's value) as a transformers fast tokenizer: byte-level pieces, no
    merges, no special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {char: byte for byte, char in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok)

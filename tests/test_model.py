"""The model presets as the "Config groups" table of docs/configuration.md states them."""

import pytest

from pe_bench.build import build_model
from pe_bench.config import compose


@pytest.mark.parametrize("preset, shape", [("tiny", (4, 128, 4)), ("small", (6, 384, 6)), ("base", (12, 768, 12))])
def test_model_presets_have_the_documented_layers_width_and_heads(preset, shape):
    m = compose([f"model={preset}"]).model
    assert (m.n_layers, m.d_model, m.n_heads) == shape


def test_the_default_model_is_tiny_about_0_8m_parameters_with_tied_embeddings():
    cfg = compose(["scheme=nope"])
    assert cfg.model.name == "tiny"
    model = build_model(cfg, 256)  # the byte tokenizer's vocabulary
    assert model.lm_head.weight is model.tok_emb.weight  # tied: one matrix
    assert 0.75e6 <= model.num_params() <= 0.85e6, model.num_params()


def test_the_fan_in_init_unties_the_head_and_starts_at_pytorchs_default_scale():
    """model.init=fan_in: embeddings N(0, 1), an LM head of its own, every other matrix N(0, 1/(3·fan_in)) and the
    residual output projections that over √(2·n_layers); gpt2 (the default, every run made before the key): N(0,
    0.02), the head tied to the embedding. A gpt2 run keeps its name, a fan_in run is another run."""
    import math

    from pe_bench.runs import run_name

    d, n = 256, 4
    common = ["scheme=nope", f"model.d_model={d}", f"model.n_layers={n}"]
    fan_in = build_model(compose([*common, "model.init=fan_in"]), vocab_size=2000)
    assert fan_in.lm_head.weight.data_ptr() != fan_in.tok_emb.weight.data_ptr()
    block = fan_in.blocks[0]
    for w, std in [(fan_in.tok_emb.weight, 1.0), (fan_in.lm_head.weight, 1 / math.sqrt(3 * d)),
                   (block.attn.qkv.weight, 1 / math.sqrt(3 * d)), (block.mlp.fc.weight, 1 / math.sqrt(3 * d)),
                   (block.attn.proj.weight, 1 / math.sqrt(3 * d) / math.sqrt(2 * n)),
                   (block.mlp.proj.weight, 1 / math.sqrt(3 * 4 * d) / math.sqrt(2 * n))]:
        assert abs(w.std().item() / std - 1) < 0.05, (tuple(w.shape), w.std().item(), std)
    gpt2 = build_model(compose(common), vocab_size=2000)
    assert gpt2.lm_head.weight is gpt2.tok_emb.weight
    assert abs(gpt2.tok_emb.weight.std().item() / 0.02 - 1) < 0.05
    assert abs(gpt2.blocks[0].attn.proj.weight.std().item() / (0.02 / math.sqrt(2 * n)) - 1) < 0.05
    assert run_name(compose([*common, "model.init=gpt2"])) == run_name(compose(common))
    assert run_name(compose([*common, "model.init=fan_in"])) != run_name(compose(common))

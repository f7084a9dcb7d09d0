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

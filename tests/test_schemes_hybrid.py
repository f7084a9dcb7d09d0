"""``Composite`` (``hybrid``): each hook is the composition of its parts' hooks, computed here part by part.

Embeddings and q/k are chained through the parts in order; score biases, input biases, score terms and value terms
are summed; the attention weights are those of the first part that replaces the softmax; the FlexAttention
``score_mod`` applies each part's ``score_mod`` in turn. Every hook is checked at a layer other than 0 (per-layer
parts: KERPLE, FIRE, Shaw, Transformer-XL, FoX, SSMax, a ``layered`` part), and the score hooks with a block of
query rows against its causal prefix of keys (Tq != Tk), as attention calls them.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import _vmap_for_bhqkv

from pe_bench import schemes

B, H, D = 2, 2, 8
SHAPE = schemes.ModelShape(d_model=16, n_heads=H, head_dim=D, train_seq_len=16, n_layers=3)
# A block of query rows (positions 5..8) against its causal prefix of keys (0..8).
Q_POS = torch.arange(5, 9)
K_POS = torch.arange(0, 9)
LAYER = 1


def build(name: str, **options):
    cls = schemes.get(name)
    return cls(cls.Options(**options), SHAPE)


def hybrid(*parts: dict, seed: int = 0):
    """A hybrid of ``parts`` whose parameters are all perturbed (some start at zero, or equal across layers)."""
    torch.manual_seed(seed)
    scheme = build("hybrid", parts=list(parts))
    with torch.no_grad():
        for p in scheme.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return scheme.eval()


def qk(tq: int, tk: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, tq, D, generator=g), torch.randn(B, H, tk, D, generator=g)


# ---- construction ------------------------------------------------------------------------------------------------

def test_a_hybrid_records_the_model_shape_it_was_built_for():
    h = hybrid({"name": "sinusoidal"}, {"name": "alibi"})
    assert h.shape == SHAPE
    assert all(p.shape == SHAPE for p in h.parts)


def test_a_hybrid_has_per_layer_biases_exactly_when_one_of_its_parts_has():
    per_layer = hybrid({"name": "sinusoidal"}, {"name": "kerple_log"})
    assert per_layer.bias_per_layer is True
    # and indeed its bias differs by layer, so building it once per forward pass would be wrong
    assert not torch.equal(per_layer.score_bias(Q_POS, K_POS, 0), per_layer.score_bias(Q_POS, K_POS, 1))
    assert hybrid({"name": "sinusoidal"}, {"name": "alibi"}).bias_per_layer is False


# ---- q/k and input hooks -----------------------------------------------------------------------------------------

def test_rotate_chains_the_parts_in_order_at_the_given_layer():
    """RoPE then SSMax's per-layer, per-head temperature s·ln n (its s differs by layer here)."""
    h = hybrid({"name": "rope"}, {"name": "ssmax"})
    rope, ssmax = h.parts
    assert not torch.equal(ssmax.s[0], ssmax.s[1])
    q, k = qk(9, 9)
    for layer in range(SHAPE.n_layers):
        expected = ssmax.rotate(*rope.rotate(q, k, K_POS, layer), K_POS, layer)
        got = h.rotate(q, k, K_POS, layer)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    # rotate's layer defaults to 0, as for every scheme
    torch.testing.assert_close(h.rotate(q, k, K_POS), ssmax.rotate(*rope.rotate(q, k, K_POS, 0), K_POS, 0),
                               rtol=0, atol=0)
    assert not torch.equal(h.rotate(q, k, K_POS, 1)[0], h.rotate(q, k, K_POS, 0)[0])


def test_embed_chains_the_parts_in_order():
    h = hybrid({"name": "sinusoidal"}, {"name": "learned"})
    x = torch.randn(B, 9, SHAPE.d_model)
    torch.testing.assert_close(h.embed(x, K_POS), h.parts[1].embed(h.parts[0].embed(x, K_POS), K_POS),
                               rtol=0, atol=0)


def test_input_bias_is_the_sum_of_the_parts_input_biases_at_the_given_layer():
    """Two FoX parts (different gates) and an ALiBi part that has no input bias."""
    h = hybrid({"name": "fox"}, {"name": "alibi"}, {"name": "fox", "gate_bias_init": 2.0})
    x = torch.randn(B, 9, SHAPE.d_model)
    for layer in range(SHAPE.n_layers):
        expected = h.parts[0].input_bias(x, layer) + h.parts[2].input_bias(x, layer)
        torch.testing.assert_close(h.input_bias(x, layer), expected, rtol=0, atol=0)
    assert not torch.equal(h.input_bias(x, 0), h.input_bias(x, 1))
    assert hybrid({"name": "sinusoidal"}, {"name": "alibi"}).input_bias(x, LAYER) is None


# ---- score hooks -------------------------------------------------------------------------------------------------

def test_score_bias_is_the_sum_of_the_parts_biases_at_the_given_layer():
    h = hybrid({"name": "sinusoidal"}, {"name": "alibi"}, {"name": "kerple_log"}, {"name": "t5"})
    parts = h.parts
    for layer in range(SHAPE.n_layers):
        expected = sum(parts[i].score_bias(Q_POS, K_POS, layer) for i in (1, 2, 3))
        torch.testing.assert_close(h.score_bias(Q_POS, K_POS, layer), expected, rtol=0, atol=0)
    # score_bias's layer defaults to 0, as for every scheme
    expected0 = sum(parts[i].score_bias(Q_POS, K_POS, 0) for i in (1, 2, 3))
    torch.testing.assert_close(h.score_bias(Q_POS, K_POS), expected0, rtol=0, atol=0)
    assert not torch.equal(h.score_bias(Q_POS, K_POS, 1), expected0)
    assert hybrid({"name": "sinusoidal"}, {"name": "rope"}).score_bias(Q_POS, K_POS, LAYER) is None


def test_the_bias_is_by_distance_exactly_when_every_biased_part_is():
    """Parts without a score bias (sinusoidal: absolute) do not matter; a FIRE part (normalised by the query's
    position) makes the bias depend on more than i − j."""
    h = hybrid({"name": "sinusoidal"}, {"name": "alibi"}, {"name": "t5"})
    assert h.bias_by_distance() is True
    shifted = h.score_bias(Q_POS + 7, K_POS + 7, LAYER)
    torch.testing.assert_close(shifted, h.score_bias(Q_POS, K_POS, LAYER), rtol=0, atol=0)
    assert hybrid({"name": "sinusoidal"}, {"name": "fire"}).bias_by_distance() is False
    assert hybrid({"name": "alibi"}, {"name": "fire"}).bias_by_distance() is False


def test_score_terms_are_the_sum_of_the_parts_terms_for_a_block_of_query_rows():
    h = hybrid({"name": "alibi"}, {"name": "shaw", "max_distance": 2}, {"name": "xl"}, {"name": "cope"})
    q, k = qk(len(Q_POS), len(K_POS))
    for layer in range(SHAPE.n_layers):
        expected = sum(h.parts[i].score_terms(q, k, Q_POS, K_POS, layer) for i in (1, 2, 3))
        torch.testing.assert_close(h.score_terms(q, k, Q_POS, K_POS, layer), expected, rtol=0, atol=0)
    assert h.has_score_terms()
    assert hybrid({"name": "sinusoidal"}, {"name": "alibi"}).score_terms(q, k, Q_POS, K_POS, LAYER) is None


def test_value_terms_are_the_sum_of_the_parts_value_terms_for_a_block_of_query_rows():
    """Shaw's a^V terms (eq. 3) of two Shaw parts with different clipping distances; XL adds none."""
    h = hybrid({"name": "shaw", "max_distance": 2}, {"name": "xl"}, {"name": "shaw", "max_distance": 5})
    logits = torch.randn(B, H, len(Q_POS), len(K_POS))
    probs = logits.masked_fill(K_POS[None, :] > Q_POS[:, None], float("-inf")).softmax(-1)
    for layer in range(SHAPE.n_layers):
        expected = (h.parts[0].value_terms(probs, Q_POS, K_POS, layer)
                    + h.parts[2].value_terms(probs, Q_POS, K_POS, layer))
        torch.testing.assert_close(h.value_terms(probs, Q_POS, K_POS, layer), expected, rtol=0, atol=0)
    assert hybrid({"name": "xl"}, {"name": "alibi"}).value_terms(probs, Q_POS, K_POS, LAYER) is None


def _causal_logits(seed: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, H, len(Q_POS), len(K_POS), generator=g)
    return logits.masked_fill(K_POS[None, :] > Q_POS[:, None], float("-inf"))


def test_attention_weights_are_those_of_the_first_part_that_replaces_the_softmax():
    logits = _causal_logits()
    h = hybrid({"name": "alibi"}, {"name": "stickbreaking", "remainder": False},
               {"name": "stickbreaking", "attend_current": True})
    expected = h.parts[1].attention_weights(logits, Q_POS, K_POS, LAYER)
    torch.testing.assert_close(h.attention_weights(logits, Q_POS, K_POS, LAYER), expected, rtol=0, atol=0)
    # stick-breaking without attend_current or remainder gives the query's own key no weight: the first part's indeed
    assert torch.equal(expected[..., torch.arange(len(Q_POS)), Q_POS], torch.zeros(B, H, len(Q_POS)))
    assert hybrid({"name": "sinusoidal"}, {"name": "alibi"}).attention_weights(logits, Q_POS, K_POS, LAYER) is None


def test_attention_weights_follow_a_layered_part_layer_by_layer():
    """A ``layered`` part: NoPE (softmax) on even layers, stick-breaking on odd ones."""
    h = hybrid({"name": "alibi"}, {"name": "layered", "parts": [{"name": "nope"}, {"name": "stickbreaking"}],
                                   "pattern": [0, 1]})
    logits = _causal_logits()
    assert h.attention_weights(logits, Q_POS, K_POS, 0) is None
    expected = h.parts[1].parts[1].attention_weights(logits, Q_POS, K_POS, 1)
    torch.testing.assert_close(h.attention_weights(logits, Q_POS, K_POS, 1), expected, rtol=0, atol=0)


def test_rotate_and_scores_follow_a_layered_part_layer_by_layer():
    """A ``layered`` part RoPE/NoPE: rotate passes the layer on (default 0: RoPE)."""
    h = hybrid({"name": "alibi"}, {"name": "layered", "parts": [{"name": "rope"}, {"name": "nope"}],
                                   "pattern": [0, 1]})
    q, k = qk(9, 9)
    rope = h.parts[1].parts[0]
    torch.testing.assert_close(h.rotate(q, k, K_POS), rope.rotate(q, k, K_POS, 0), rtol=0, atol=0)
    torch.testing.assert_close(h.rotate(q, k, K_POS, 2), rope.rotate(q, k, K_POS, 2), rtol=0, atol=0)
    assert h.rotate(q, k, K_POS, 1) == (q, k)


def test_flex_problem_names_the_first_part_that_flex_attention_cannot_express():
    assert hybrid({"name": "sinusoidal"}, {"name": "alibi"}).flex_problem() is None
    h = hybrid({"name": "alibi"}, {"name": "stickbreaking"}, {"name": "cope"})
    assert h.flex_problem() == f"stickbreaking: {h.parts[1].flex_problem()}"
    assert h.flex_problem() == "stickbreaking: it replaces the softmax, which FlexAttention computes itself"


# ---- FlexAttention's score_mod -----------------------------------------------------------------------------------

def apply_score_mod(mod, scores: torch.Tensor) -> torch.Tensor:
    """The score_mod evaluated at every (b, h, q_idx, kv_idx) as FlexAttention's eager path does (vmapped)."""
    b, h, tq, tk = scores.shape
    fn = _vmap_for_bhqkv(mod, prefix=(0,))
    return fn(scores, torch.arange(b), torch.arange(h), torch.arange(tq), torch.arange(tk))


@pytest.mark.parametrize("offset", [0, 3])
def test_score_mod_adds_every_parts_bias_and_terms_to_the_score(offset):
    """ALiBi and per-layer KERPLE (biases), Shaw's keys-only and Transformer-XL's terms (which need q and k): the
    composed score_mod equals score + the parts' explicit biases and terms, at every causal (i, j)."""
    h = hybrid({"name": "alibi"}, {"name": "shaw", "values": False, "max_distance": 3}, {"name": "xl"},
               {"name": "kerple_log"})
    positions = torch.arange(9) + offset
    q, k = qk(9, 9, seed=3)
    scores = torch.randn(B, H, 9, 9, generator=torch.Generator().manual_seed(4))
    causal = positions[None, :] <= positions[:, None]
    for layer in (1, 2):
        got = apply_score_mod(h.score_mod(q, k, positions, layer), scores)
        expected = (scores + h.parts[0].score_bias(positions, positions, layer)
                    + h.parts[1].score_terms(q, k, positions, positions, layer)
                    + h.parts[2].score_terms(q, k, positions, positions, layer)
                    + h.parts[3].score_bias(positions, positions, layer))
        assert got.shape == scores.shape
        torch.testing.assert_close(got[..., causal], expected[..., causal], rtol=1e-5, atol=1e-5)


def test_score_mod_is_none_only_when_no_part_touches_the_scores():
    q, k = qk(9, 9)
    assert hybrid({"name": "sinusoidal"}, {"name": "rope"}).score_mod(q, k, K_POS, LAYER) is None
    h = hybrid({"name": "sinusoidal"}, {"name": "alibi"})
    mod = h.score_mod(q, k, K_POS, LAYER)
    assert mod is not None
    scores = torch.zeros(B, H, 9, 9)
    causal = K_POS[None, :] <= K_POS[:, None]
    got = apply_score_mod(mod, scores)
    torch.testing.assert_close(got[..., causal],
                               h.parts[1].score_bias(K_POS, K_POS, LAYER).expand(B, H, 9, 9)[..., causal])

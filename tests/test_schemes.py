"""The conformance suite every registered scheme passes automatically, plus the registry/YAML contract."""

import dataclasses
import importlib

import pytest
import torch
import yaml

from pe_bench import schemes
from pe_bench.config import preset_names, preset_path, scheme_spec, with_options
from pe_bench.model.decoder import Decoder, ModelArgs
from pe_bench.schemes import LengthNotSupported, ModelShape

ALL = schemes.available()
RELATIVE = [n for n in ALL if schemes.get(n).relative]
ABSOLUTE = [n for n in ALL if not schemes.get(n).relative and "input" in schemes.get(n).acts_on]
L_TRAIN = 16


def scheme_yaml(name):
    return yaml.safe_load(preset_path("scheme", name).read_text())  # pe-bench's configs/, or a plugin's


def tiny_model(name, options=None, seed=0):
    torch.manual_seed(seed)
    spec = scheme_spec(scheme_yaml(name))
    if options:
        spec = with_options(spec, options)
    shape = ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=L_TRAIN, n_layers=2)
    model = Decoder(ModelArgs(vocab_size=50, n_layers=2, d_model=32, n_heads=4), spec.cls(spec.options, shape))
    # Learned tables start at zero in some schemes (T5): perturb every parameter so the tests see a real signal.
    with torch.no_grad():
        for p in model.scheme.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model.eval()


def runnable_at(name, length):
    """The scheme's default model, or, if it refuses the length, each of its declared eval variants."""
    model = tiny_model(name)
    try:
        model(torch.zeros(1, length, dtype=torch.long))
        return [model]
    except LengthNotSupported:
        variants = scheme_spec(scheme_yaml(name)).eval_variants
        assert variants, f"{name} refuses length {length} and declares no eval variant that runs there"
        return [tiny_model(name, v) for v in variants]


def test_registry_matches_yaml_files():
    files = preset_names("scheme")
    assert files == ALL


@pytest.mark.parametrize("name", ALL)
def test_yaml_declares_exactly_the_scheme_options(name):
    cfg = scheme_yaml(name)
    assert cfg["name"] == name
    cls = schemes.get(name)
    fields = {f.name for f in dataclasses.fields(cls.Options)}
    assert set(cfg) - {"name", "eval_variants"} == fields
    defaults = dataclasses.asdict(cls.Options())
    for f in fields:  # the YAML documents the defaults; it does not silently change them
        assert cfg[f] == defaults[f], f"{name}.{f}: YAML {cfg[f]!r} != default {defaults[f]!r}"
    assert cls.description and cls.citation and set(cls.acts_on) <= {"input", "qk", "scores"}


def is_causal(model, T):
    """Changing tokens after t leaves the logits at positions <= t unchanged (and does change later ones)."""
    t = T // 2
    idx = torch.randint(0, 50, (2, T), generator=torch.Generator().manual_seed(1))
    changed = idx.clone()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 7) % 50
    with torch.no_grad():
        a, b = model(idx), model(changed)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])
    return torch.allclose(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("ratio", [1, 8])
@pytest.mark.parametrize("name", ALL)
def test_causal(name, ratio):
    for model in runnable_at(name, L_TRAIN * ratio):
        assert is_causal(model, L_TRAIN * ratio)


@pytest.mark.parametrize("name", ALL)
def test_eval_variants_are_causal_and_finite_at_8x(name):
    """Every eval-time variant a scheme declares (learned clamp/extend, RoPE context extensions) runs at 8L."""
    for variant in scheme_spec(scheme_yaml(name)).eval_variants:
        model = tiny_model(name, variant)
        assert is_causal(model, 8 * L_TRAIN)
        with torch.no_grad():
            assert torch.isfinite(model(torch.randint(0, 50, (1, 8 * L_TRAIN)))).all()


@pytest.mark.parametrize("name", ALL)
def test_runs_at_8x_with_finite_outputs_and_gradients(name):
    for model in runnable_at(name, 8 * L_TRAIN):
        model.train()
        idx = torch.randint(0, 50, (2, 8 * L_TRAIN))
        logits = model(idx)
        assert torch.isfinite(logits).all()
        logits.logsumexp(-1).mean().backward()
        for n, p in model.named_parameters():
            assert p.grad is None or torch.isfinite(p.grad).all(), n


@pytest.mark.parametrize("name", ALL)
def test_learned_scheme_parameters_receive_gradient(name):
    model = tiny_model(name).train()
    model(torch.randint(0, 50, (2, L_TRAIN))).logsumexp(-1).mean().backward()
    for n, p in model.scheme.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name}: {n} gets no gradient"


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_schemes_are_shift_invariant(name):
    """Shifting every position by the same offset leaves the model's outputs unchanged."""
    model = tiny_model(name)
    idx = torch.randint(0, 50, (2, L_TRAIN))
    pos = torch.arange(L_TRAIN)
    with torch.no_grad():
        torch.testing.assert_close(model(idx, pos), model(idx, pos + 37), rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_attention_scores_are_shift_invariant(name):
    """The pre-softmax logits q·k/√d + bias + terms, built from the scheme's hooks, depend only on i − j."""
    model = tiny_model(name)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, L_TRAIN, 8, generator=g), torch.randn(1, 4, L_TRAIN, 8, generator=g)
    causal = torch.ones(L_TRAIN, L_TRAIN).tril().bool()

    def scores(offset):
        pos = torch.arange(L_TRAIN) + offset
        qr, kr = model.scheme.rotate(q, k, pos)
        s = qr @ kr.transpose(-1, -2) / 8**0.5
        for layer in range(2):
            for extra in (model.scheme.score_bias(pos, pos, layer), model.scheme.score_terms(qr, kr, pos, pos, layer)):
                s = s if extra is None else s + extra
        return s[..., causal]

    torch.testing.assert_close(scores(0), scores(123), rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", ABSOLUTE)
def test_absolute_schemes_are_not_shift_invariant(name):
    """The shift test above can fail: absolute schemes do change under a shift."""
    model = tiny_model(name, {"beyond_table": "clamp"} if name == "learned" else None)
    idx = torch.randint(0, 50, (2, 8))
    pos = torch.arange(8)
    with torch.no_grad():
        assert not torch.allclose(model(idx, pos), model(idx, pos + 5), atol=1e-4)


def test_symmetric_conv_padding_is_caught_by_the_causality_check():
    """The explainers' 'same' padding lets position t see t+1: the causal check above must fail for it."""
    from pe_bench.schemes.conv import Conv

    class SymmetricConv(Conv):  # not registered: no name
        name = ""

        def padding(self):
            k = self.options.kernel_size
            return (k - 1) // 2, k // 2

    model = tiny_model("conv")
    assert is_causal(model, L_TRAIN)
    leaky = SymmetricConv(model.scheme.options, model.scheme.shape)
    leaky.load_state_dict(model.scheme.state_dict())
    model.scheme = leaky
    assert not is_causal(model, L_TRAIN)


def test_leaky_scheme_is_caught_by_the_causality_check():
    """A scheme that mixes in the next token's embedding must fail the causal check used above."""

    class Leaky(schemes.Scheme):  # not registered: no name
        def embed(self, x, positions):
            return x + torch.roll(x, shifts=-1, dims=1)

    torch.manual_seed(0)
    shape = ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=L_TRAIN, n_layers=1)
    model = Decoder(ModelArgs(vocab_size=50, n_layers=1, d_model=32, n_heads=4), Leaky(None, shape)).eval()
    idx = torch.randint(0, 50, (1, L_TRAIN))
    changed = idx.clone()
    changed[:, 9:] = (changed[:, 9:] + 1) % 50
    with torch.no_grad():
        assert not torch.allclose(model(idx)[:, :9], model(changed)[:, :9], atol=1e-5)
    assert "Leaky" not in [c.__name__ for c in schemes.REGISTRY.values()]


@pytest.mark.parametrize("name", ALL)
def test_a_scheme_keeps_the_options_and_shape_it_was_built_with(name):
    """``scheme.options`` and ``scheme.shape`` are what the constructor got: labels, eval-time option changes and
    the hooks read them from there."""
    spec = scheme_spec(scheme_yaml(name))
    shape = ModelShape(d_model=32, n_heads=4, head_dim=8, train_seq_len=L_TRAIN, n_layers=2)
    scheme = spec.cls(spec.options, shape)
    assert scheme.options is spec.options and scheme.shape is shape


def test_registering_a_second_class_under_a_scheme_name_is_refused():
    """A subclass with a new name is registered under it (``schemes.get`` finds that class); another class under a
    name already taken raises instead of replacing the first."""
    name = "test-only-scheme"
    try:
        assert name not in schemes.REGISTRY

        class Named(schemes.Scheme):
            name = "test-only-scheme"

        assert schemes.REGISTRY[name] is Named and schemes.get(name) is Named
        with pytest.raises(ValueError, match="'test-only-scheme' registered twice"):
            class Again(schemes.Scheme):
                name = "test-only-scheme"
        assert schemes.get(name) is Named
        with pytest.raises(ValueError, match="'rope' registered twice"):
            class OtherRope(schemes.Scheme):
                name = "rope"
        assert schemes.get("rope").__module__ == "pe_bench.schemes.rope"
    finally:
        schemes.REGISTRY.pop(name, None)
        schemes.REGISTRY["rope"] = importlib.import_module("pe_bench.schemes.rope").RoPE


def test_conv_is_a_depthwise_causal_convolution_added_to_the_embeddings():
    """One K-tap filter per channel (a (C, 1, K) weight, no bias), over x_{t−K+1..t} with zeros before the start,
    added to x: out[t, c] = x[t, c] + Σ_s w[c, s]·x[t − K + 1 + s, c]."""
    from pe_bench.schemes.conv import Conv, ConvOptions

    torch.manual_seed(0)
    conv = Conv(ConvOptions(kernel_size=3), ModelShape(d_model=4, n_heads=1, head_dim=4, train_seq_len=8))
    assert [tuple(p.shape) for p in conv.parameters()] == [(4, 1, 3)] and conv.conv.bias is None
    x = torch.randn(2, 6, 4)
    out = conv.embed(x, torch.arange(6))
    w = conv.conv.weight[:, 0].detach()
    padded = torch.cat([torch.zeros(2, 2, 4), x], 1)
    expected = x + sum(w[:, s] * padded[:, s:s + 6] for s in range(3))
    torch.testing.assert_close(out, expected)


def test_the_position_span_is_last_minus_first_plus_one_and_one_for_no_positions():
    from pe_bench.schemes.base import position_span

    assert position_span(torch.arange(3, 8)) == 5 and position_span(torch.tensor([4])) == 1
    assert position_span(torch.arange(0)) == 1

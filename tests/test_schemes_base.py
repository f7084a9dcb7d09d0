"""The scheme seam's bookkeeping (pe_bench.schemes.base and the package's catalogue): option ranges checked when a
scheme is built in Python, labels, the lean-inference switch, the kept-values check."""

import pytest
import torch

from pe_bench import schemes
from pe_bench.schemes import ModelShape
from pe_bench.schemes.base import lean_inference, options_label, same_values, values_of
from pe_bench.schemes.sinusoidal import Sinusoidal, SinusoidalOptions
from pe_bench.schemes.t5 import T5Bias, T5Options

SHAPE = ModelShape(d_model=8, n_heads=2, head_dim=4, train_seq_len=8)


def test_the_catalog_read_afresh_from_the_sources_lists_exactly_the_registered_schemes():
    schemes.catalog.cache_clear()
    schemes._load_all.cache_clear()
    try:
        catalog = schemes.catalog()
        assert catalog and sorted(catalog) == sorted(schemes.REGISTRY)
        assert all(schemes.REGISTRY[n].__module__ == f"pe_bench.schemes.{e.module}" for n, e in catalog.items())
    finally:
        schemes.catalog.cache_clear()
        schemes._load_all.cache_clear()


@pytest.mark.parametrize("build,message", [
    (lambda: Sinusoidal(SinusoidalOptions(base=1.0), SHAPE), "scheme.base=1 is out of range: must be > 1"),
    (lambda: T5Bias(T5Options(num_buckets=1, max_distance=4), SHAPE),
     "scheme.num_buckets=1 is out of range: must be >= 2"),
])
def test_a_scheme_built_in_python_refuses_options_out_of_their_declared_range(build, message):
    with pytest.raises(ValueError) as e:
        build()
    assert str(e.value) == message


def test_a_scheme_built_with_options_in_range_builds():
    assert Sinusoidal(SinusoidalOptions(base=1.5, scale=0.1), SHAPE).options.base == 1.5


def test_label_lists_every_changed_option_separated_by_commas():
    assert options_label("t5", T5Options()) == "t5"
    assert options_label("t5", T5Options(num_buckets=16, max_distance=64)) == "t5[num_buckets=16,max_distance=64]"
    assert T5Bias(T5Options(max_distance=64, scale=1.0), SHAPE).label() == "t5[max_distance=64,scale=1.0]"


def test_lean_inference_holds_exactly_outside_autograd_when_eager():
    assert not lean_inference()
    with torch.no_grad():
        assert lean_inference()
    with torch.inference_mode():
        assert lean_inference()


def test_same_values_holds_for_an_unchanged_copy_and_fails_on_any_difference():
    a, b = torch.arange(6.0).view(2, 3), torch.tensor([1, 2], dtype=torch.int64)
    kept = values_of([a, b])
    assert same_values(kept, [a, b])
    assert not same_values(kept, [a])  # a tensor fewer
    assert not same_values(kept, [a, b, b])
    assert not same_values(kept, [a.view(3, 2), b])  # same values, another shape
    assert not same_values(kept, [a.double(), b])  # same values, another dtype (torch.equal says equal)
    with torch.no_grad():
        a[1, 2] += 1
    assert not same_values(kept, [a, b])


def test_legacy_options_are_filled_and_dropped_in_a_scheme_and_in_every_scheme_nested_in_its_options():
    """A saved config lacking an option added later whose default changes the model (stick-breaking's remainder)
    reads with the legacy value, at the top and inside a composite's parts; the identity drops it again while it
    holds that value, and keeps any other; the saved config itself is never edited."""
    legacy = schemes.catalog()["stickbreaking"].legacy_options
    assert legacy == {"remainder": False}
    saved = {"name": "hybrid", "parts": [{"name": "stickbreaking"}, {"name": "alibi"}], "weights": [1, 2]}
    filled = schemes.with_legacy_options(saved)
    assert filled == {"name": "hybrid", "parts": [{"name": "stickbreaking", "remainder": False}, {"name": "alibi"}],
                      "weights": [1, 2]}
    assert saved["parts"][0] == {"name": "stickbreaking"}
    assert schemes.without_legacy_options(filled) == saved
    assert schemes.with_legacy_options({"name": "stickbreaking"}) == {"name": "stickbreaking", "remainder": False}
    assert schemes.lacking_legacy_options({"name": "stickbreaking"}) == {"remainder": False}
    assert schemes.lacking_legacy_options({"name": "stickbreaking", "remainder": True}) == {}
    new = {"name": "stickbreaking", "remainder": True}
    assert schemes.without_legacy_options(new) == new and schemes.without_legacy_options({"name": "alibi"}) == {
        "name": "alibi"}
    for odd in ({"name": ["stickbreaking"]}, {"name": None}, {"parts": [{"remainder": False}]}):  # no scheme name
        assert schemes.with_legacy_options(odd) == odd and schemes.without_legacy_options(odd) == odd
        assert schemes.lacking_legacy_options(odd) == {}


def test_scheme_plugins_come_from_the_schemes_folder_of_the_search_path(tmp_path, monkeypatch):
    for kind in ("schemes", "tasks"):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / f"my_{kind}.py").write_text("")
    from pe_bench import plugins

    monkeypatch.setenv(plugins.ENV, str(tmp_path))
    plugins.modules.cache_clear()
    try:
        found = [m.path.name for m in schemes._modules()]
    finally:
        monkeypatch.delenv(plugins.ENV)
        plugins.modules.cache_clear()  # the next reader sees the search path it is given
    assert "my_schemes.py" in found and "my_tasks.py" not in found and "base.py" not in found
    assert found.index("my_schemes.py") == len(found) - 1  # after the package's own


def test_nopes_head_scale_is_the_layers_own_multiplies_the_queries_alone_and_keeps_their_dtype():
    from pe_bench.schemes.nope import NoPE, NoPEOptions

    nope = NoPE(NoPEOptions(head_scale=1.5), ModelShape(d_model=16, n_heads=2, head_dim=8, train_seq_len=16,
                                                        n_layers=2))
    with torch.no_grad():
        nope.scale[1].fill_(3.0)
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    got_q, got_k = nope.rotate(q, k, torch.arange(4))  # no layer given: layer 0's λ
    torch.testing.assert_close(got_q, 1.5 * q)
    assert got_k is k
    torch.testing.assert_close(nope.rotate(q, k, torch.arange(4), 1)[0], 3.0 * q)
    assert nope.rotate(q.bfloat16(), k.bfloat16(), torch.arange(4))[0].dtype == torch.bfloat16

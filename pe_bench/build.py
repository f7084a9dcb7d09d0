"""Config → objects: the scheme and the model for a run."""

from __future__ import annotations

from pe_bench.model.attention import backend_problem
from pe_bench.config import Config, ConfigError, SchemeSpec, model_shape, scheme_spec
from pe_bench.model.decoder import Decoder, ModelArgs
from pe_bench.schemes import Scheme
from pe_bench.tasks import get as get_task


def build_scheme(cfg: Config, spec: SchemeSpec | None = None) -> Scheme:
    spec = spec or scheme_spec(cfg.scheme)
    return spec.cls(spec.options, model_shape(cfg))


def build_model(cfg: Config, vocab_size: int, spec: SchemeSpec | None = None) -> Decoder:
    m = cfg.model
    scheme = build_scheme(cfg, spec)
    backend = cfg.attention.backend
    problem = backend_problem(backend, scheme)
    if problem and spec is None:
        raise ConfigError(problem)
    if problem:  # an eval-time variant the requested backend cannot run (ReRoPE on flex): auto, the same numbers
        backend = "auto"
    digits, offset, zero_share = get_task(cfg.task.name).digit_positions(cfg.task) or ((), 0, 0.0)
    args = ModelArgs(vocab_size=vocab_size, n_layers=m.n_layers, d_model=m.d_model, n_heads=m.n_heads,
                     mlp_ratio=m.mlp_ratio, dropout=m.dropout, qk_norm=m.qk_norm, init=m.init, backend=backend,
                     digit_tokens=digits, digit_offset=offset, digit_zero_share=zero_share)
    return Decoder(args, scheme)

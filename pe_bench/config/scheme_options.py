"""A scheme's options: typed by the scheme's own ``Options`` dataclass (each eval variant's and composite part's too)
and built once for the model's shape, so that a scheme that cannot be built fails as one ConfigError line."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pe_bench import schemes
from pe_bench.config.schema import Config
from pe_bench.config.typed import reprefix, typed
from pe_bench.errors import ConfigError
from pe_bench.ranges import fmt


@dataclass
class SchemeSpec:
    cls: type[schemes.Scheme]
    options: Any
    eval_variants: list[dict[str, Any]]


def scheme_spec(scheme_cfg: dict[str, Any]) -> SchemeSpec:
    cfg = dict(scheme_cfg)
    name = cfg.pop("name", None)
    variants = cfg.pop("eval_variants", None) or []
    check_scheme_name(name)
    cls = schemes.get(name)
    _check_part_maps(cls, cfg, "scheme")
    options = typed(cls.Options, cfg, "scheme")
    _check_parts(cls, options, "scheme")
    if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
        raise ConfigError(f"scheme.eval_variants={variants} must be a list of option maps, e.g. "
                          "[{beyond_table: clamp}] (null or [] for none)")
    return SchemeSpec(cls, options, [dict(v) for v in variants])


def fixed_option_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], str]:
    """The options of a trained run's scheme (``old``, its saved scheme config) that ``new`` changes although the
    weights fix them (not in the scheme's ``eval_options``), and the options that may change, as text."""
    cls = scheme_spec(old).cls
    allowed = ", ".join(f"scheme.{k}.*" if isinstance(old.get(k), dict) else f"scheme.{k}"
                        for k in cls.eval_options) or "none"
    changed = sorted(k for k in set(old) | set(new) if k not in ("eval_variants", "name") and old.get(k) != new.get(k))
    return [k for k in changed if k not in cls.eval_options], allowed


def check_scheme_name(name: Any) -> None:
    from pe_bench import plugins

    if name in schemes.CLASHES:
        raise ConfigError(f"scheme {name!r} is defined twice, by {schemes.CLASHES[name]}: rename the plugin's scheme")
    if name not in schemes.available():
        raise ConfigError(f"unknown scheme {name!r}; choose one of: {', '.join(schemes.available())} "
                          f"(`pe-bench schemes` describes them){plugins.problems_said()}")


def with_options(spec: SchemeSpec, overrides: dict[str, Any], prefix: str = "scheme") -> SchemeSpec:
    """The spec with some options replaced (an eval variant); ``prefix`` names them in error messages."""
    base = dataclasses.asdict(spec.options)
    base.update(overrides)
    _check_part_maps(spec.cls, base, prefix)
    options = typed(spec.cls.Options, base, prefix)
    _check_parts(spec.cls, options, prefix)
    return SchemeSpec(spec.cls, options, [])


def _check_part_maps(cls: type, values: dict[str, Any], prefix: str) -> None:
    from pe_bench.schemes.hybrid import Composite

    parts = values.get("parts")
    if issubclass(cls, Composite) and isinstance(parts, list):
        for i, part in enumerate(parts):
            if not isinstance(part, dict):
                raise ConfigError(f"{prefix}.parts[{i}]={fmt(part)} must be a map of a scheme and its options, "
                                  f"e.g. {{name: {part if isinstance(part, str) and part in schemes.available() else 'alibi'}}}")


def _check_parts(cls: type, options: Any, prefix: str) -> None:
    """A composite's parts are dicts ({name: ..., <option>: ...}): each goes through its scheme's typed schema."""
    from pe_bench.schemes.hybrid import Composite

    if not issubclass(cls, Composite):
        return
    for i, part in enumerate(options.parts):
        values = {k: v for k, v in part.items() if k != "name"}
        typed(schemes.get(part["name"]).Options, values, f"{prefix}.parts[{i}]")


def model_shape(cfg: Config) -> schemes.ModelShape:
    """What the scheme sees of the model (pe_bench.build uses the same)."""
    m = cfg.model
    return schemes.ModelShape(d_model=m.d_model, n_heads=m.n_heads, head_dim=m.d_model // m.n_heads,
                              train_seq_len=cfg.train.seq_len, n_layers=m.n_layers,
                              max_train_position=cfg.train.random_positions or cfg.train.pose_target or None,
                              original_seq_len=cfg.finetune.original_seq_len)


def check_scheme(cfg: Config) -> None:
    """Type the scheme's options (and each eval variant's, and each composite part's) and build each once for the
    model's shape, so that checks needing the shape (alibi heads <= model.n_heads, rotary schemes' even head
    dimension, ...) fail here and not after the run directory exists."""
    from pe_bench.model.attention import backend_problem

    spec = scheme_spec(cfg.scheme)
    shape = model_shape(cfg)
    problem = backend_problem(cfg.attention.backend, _build(spec, shape, "scheme"),
                              cpu_training=cfg.train.device == "cpu")
    if problem:
        raise ConfigError(problem)
    for i, variant in enumerate(spec.eval_variants):
        prefix = f"scheme.eval_variants[{i}]"
        variant_spec = with_options(spec, variant, prefix)  # typed and range-checked even when not evaluated
        fixed = sorted(set(variant) - set(spec.cls.eval_options))
        if fixed:  # a variant evaluates the same weights: it may change only options that act at evaluation
            allowed = ", ".join(f"scheme.{k}" for k in spec.cls.eval_options) or "none"
            raise ConfigError(f"{prefix} changes {', '.join(fixed)}, which {spec.cls.name} fixes at training; "
                              f"eval-time options of {spec.cls.name}: {allowed}")
        if cfg.eval.variants:
            _build(variant_spec, shape, prefix)


BUILD_ON_META_ABOVE = 2**24  # elements: a scheme this large is built on the meta device (no memory)


def _build(spec: SchemeSpec, shape: schemes.ModelShape, prefix: str) -> schemes.Scheme:
    """Build the scheme and drop it: on the CPU, leaving the global RNG as it was (milliseconds for these small
    modules); on the meta device when its tables could be large (the meta device costs a second to warm up)."""
    import torch

    largest = shape.d_model * max(shape.position_range, shape.n_layers * shape.d_model)
    device = torch.device("meta") if largest > BUILD_ON_META_ABOVE else torch.device("cpu")
    try:
        with torch.random.fork_rng(devices=[]), device:
            return spec.cls(spec.options, shape)
    except (ValueError, TypeError) as e:
        raise ConfigError(reprefix(str(e).splitlines()[0], prefix)) from None
    except ArithmeticError as e:
        raise ConfigError(f"{prefix} ({spec.cls.name}) cannot be built for model.d_model={shape.d_model}, "
                          f"model.n_heads={shape.n_heads}: {type(e).__name__}: {e}") from None

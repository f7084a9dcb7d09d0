"""Plain values into a dataclass schema through OmegaConf: unknown keys, bad types and values out of their declared
range become one ConfigError line that names the key and the valid ones."""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pe_bench.config.schema import Config
from pe_bench.errors import ConfigError
from pe_bench.ranges import range_problem


def typed(schema: type, values: Any, prefix: str) -> Any:
    """Merge plain values into a dataclass schema; unknown keys, bad types and values out of their declared range
    become ConfigError."""
    try:
        merged = OmegaConf.merge(structured(schema), values)
        problem = range_problem(schema, OmegaConf.to_container(merged, resolve=True), prefix)
        if problem:
            raise ConfigError(problem)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(omegaconf_message(e, prefix, schema)) from None
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:  # __post_init__ checks
        raise ConfigError(reprefix(str(e).splitlines()[0], prefix)) from None


@functools.lru_cache(maxsize=None)
def structured(schema: type) -> DictConfig:
    """The schema's empty structured config, built once (OmegaConf.merge copies it, never changes it)."""
    return OmegaConf.structured(schema)


def reprefix(message: str, prefix: str) -> str:
    """Scheme code names its options ``scheme.KEY``; for a composite's part or an eval variant they are
    ``scheme.parts[i].KEY`` / ``scheme.eval_variants[i].KEY``."""
    if prefix in ("", "scheme"):
        return message
    return re.sub(r"\bscheme\.", f"{prefix}.", message)


def omegaconf_message(e: OmegaConfBaseException, prefix: str, schema: type) -> str:
    key = getattr(e, "full_key", None) or ""
    full = f"{prefix}.{key}" if prefix and key else (key or prefix)
    text = str(e).splitlines()[0]
    if "not in" in text or "Key '" in text and "not" in text:
        return f"unknown config key '{full}'{keys_hint(key, schema if prefix else Config, prefix)}"
    if "could not be converted" in text or "Invalid type" in text or "Value '" in text:
        return f"bad value for '{full}': {text}"
    return f"bad config at '{full}': {text}"


def keys_hint(key: str, schema: type = Config, prefix: str = "") -> str:
    """'; valid keys in model: name, n_layers, ...' for an unknown dotted key (relative to ``schema``, shown under
    ``prefix``), walking the dataclass schema down to the key's parent (a scheme's nested options included)."""
    parts = key.split(".")[:-1]
    if schema is Config and parts[:1] == ["scheme"]:
        return "; see configs/scheme/<name>.yaml for that scheme's options"
    for i, part in enumerate(parts):
        f = {f.name: f for f in dataclasses.fields(schema)}.get(part)
        if f is None:  # the unknown key is higher up: name the level where it goes wrong
            group = ".".join(p for p in (prefix, *parts[:i]) if p) or "the config"
            return f"; valid keys in {group}: {', '.join(f.name for f in dataclasses.fields(schema))}"
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            schema = type(f.default_factory())  # type: ignore[misc]
        elif dataclasses.is_dataclass(f.default):
            schema = type(f.default)
        else:
            return ""
        if not dataclasses.is_dataclass(schema):
            return ""
    group = ".".join(p for p in (prefix, *parts) if p) or "the config"
    return f"; valid keys in {group}: {', '.join(f.name for f in dataclasses.fields(schema))}"

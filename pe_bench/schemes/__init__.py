"""Positional schemes. Every module in this package is imported here, so a new file registers itself."""

from __future__ import annotations

import importlib
import pkgutil

from pe_bench.schemes.base import REGISTRY, LengthNotSupported, ModelShape, Scheme

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")


def available() -> list[str]:
    return sorted(REGISTRY)


def get(name: str) -> type[Scheme]:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown scheme {name!r}; choose one of: {', '.join(available())}") from None


__all__ = ["REGISTRY", "LengthNotSupported", "ModelShape", "Scheme", "available", "get"]

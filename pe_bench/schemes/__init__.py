"""Positional schemes. Every module in this package registers its schemes when imported, so a new file is all it
takes; importing them (and torch) is deferred until a scheme class is needed. Plugin modules (pe_bench.plugins: a
directory on PE_BENCH_PATH, or an installed package's entry point) are read and registered the same way.

``available()`` and ``catalog()`` answer without importing torch: they read each module's class attributes from
its source (``name``, ``description``, ``citation``, ``acts_on``, ``late_options``, ``legacy_options``, ``style``,
``variant_styles``, inherited within the module), so that
``pe-bench --help``, ``pe-bench schemes`` and configuration errors answer in a fraction of a second. A test holds
the catalog equal to the registry the imports build.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pe_bench import plugins
from pe_bench.errors import ConfigError

if TYPE_CHECKING:
    from pe_bench.schemes.base import LengthNotSupported, ModelShape, Scheme  # noqa: F401

_LAZY = ("REGISTRY", "LengthNotSupported", "ModelShape", "Scheme")
# The class attributes the catalog reads (literals in the class body; inherited within a module).
ATTRIBUTES = ("name", "description", "citation", "acts_on", "late_options", "legacy_options", "style",
              "variant_styles")


@dataclass(frozen=True)
class Entry:
    """A scheme as its source declares it (no import)."""

    name: str
    description: str
    citation: str
    acts_on: tuple[str, ...]
    module: str  # its module within this package (``rope``), or a plugin module's import name
    late_options: tuple[str, ...] = ()
    legacy_options: dict[str, Any] = field(default_factory=dict)
    style: tuple[str, str] | None = None
    variant_styles: dict[str, tuple[float, str]] = field(default_factory=dict)
    origin: str = "pe-bench"  # or where a plugin came from (pe_bench.plugins.Module.origin)


def _modules() -> list[plugins.Module]:
    """This package's scheme modules, then the plugins'."""
    own = [plugins.Module(f"{__name__}.{m.name}", Path(__file__).parent / f"{m.name}.py", "pe-bench")
           for m in pkgutil.iter_modules(__path__) if m.name != "base"]
    return own + list(plugins.modules("schemes"))


@functools.lru_cache(maxsize=1)
def catalog() -> dict[str, Entry]:
    """name → Entry for every scheme class defined in this package, read from the source files."""
    out: dict[str, Entry] = {}
    for module in _modules():
        try:
            tree = ast.parse(module.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError) as e:  # a plugin's file: left out, said once
            where = f", line {e.lineno}" if isinstance(e, SyntaxError) else ""
            plugins.note(f"the plugin {module.path}{where} cannot be read ({type(e).__name__}); fix it or take it "
                         f"off {plugins.ENV}")
            continue
        classes: dict[str, tuple[list[str], dict[str, Any]]] = {}
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            attrs: dict[str, Any] = {}
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                        and stmt.targets[0].id in ATTRIBUTES):
                    try:
                        attrs[stmt.targets[0].id] = ast.literal_eval(stmt.value)
                    except ValueError:
                        pass
            classes[node.name] = ([b.id for b in node.bases if isinstance(b, ast.Name)], attrs)

        def lookup(cls: str, key: str, default: Any) -> Any:
            bases, attrs = classes.get(cls, ([], {}))
            if key in attrs:
                return attrs[key]
            for base in bases:  # inherited within the module (e.g. kerple's _Kerple)
                if base in classes:
                    found = lookup(base, key, None)
                    if found is not None:
                        return found
            return default

        for cls, (_, attrs) in classes.items():
            name = attrs.get("name")
            if name:
                style = lookup(cls, "style", None)
                if name in out or name in CLASHES:  # neither is used: which one was meant is unknown
                    CLASHES[name] = f"{CLASHES.get(name) or out.pop(name).origin} and {module.origin}"
                    plugins.note(f"scheme {name!r} is defined twice, by {CLASHES[name]}: rename the plugin's")
                    continue
                out[name] = Entry(name, lookup(cls, "description", ""), lookup(cls, "citation", ""),
                                  tuple(lookup(cls, "acts_on", ())), _short(module),
                                  tuple(lookup(cls, "late_options", ())), dict(lookup(cls, "legacy_options", {})),
                                  tuple(style) if style else None, dict(lookup(cls, "variant_styles", {})),
                                  module.origin)
    return dict(sorted(out.items()))


CLASHES: dict[str, str] = {}  # a scheme name defined twice (a plugin named like a built-in scheme) → by whom


def _short(module: plugins.Module) -> str:
    return module.name.removeprefix(f"{__name__}.") if module.origin == "pe-bench" else module.name


def available() -> list[str]:
    return sorted(catalog())


@functools.lru_cache(maxsize=1)
def _load_all() -> None:
    names = {e.module for e in catalog().values()}
    for module in _modules():
        if module.origin == "pe-bench":
            importlib.import_module(module.name)
        elif module.name in names:  # (a file the catalog left out is not imported either)
            try:
                plugins.load(module)
            except ConfigError as e:
                plugins.note(str(e))
                from pe_bench.schemes.base import REGISTRY  # a class registered before the import failed: unused

                for name in [n for n, cls in REGISTRY.items() if cls.__module__ == module.name]:
                    del REGISTRY[name]


def get(name: str) -> type[Scheme]:
    registry = __getattr__("REGISTRY")
    if name in registry:
        return registry[name]
    if name in catalog():  # read from its source, but its module failed to import: one line, exit 2
        raise ConfigError(f"scheme {name!r} comes from {catalog()[name].origin}, which cannot be used"
                          f"{plugins.problems_said()}")
    raise ConfigError(f"unknown scheme {name!r}; choose one of: {', '.join(n for n in available() if n in registry)}"
                      f"{plugins.problems_said()}")


def lacking_legacy_options(scheme: dict[str, Any]) -> dict[str, Any]:
    """The ``legacy_options`` a saved scheme map (its top level) lacks, with the values its run was made with."""
    entry = catalog().get(scheme.get("name")) if isinstance(scheme.get("name"), str) else None
    return {k: v for k, v in entry.legacy_options.items() if k not in scheme} if entry else {}


def with_legacy_options(scheme: Any) -> Any:
    """A saved scheme config (a map, its composite parts within) with every ``legacy_options`` key it lacks set to
    the value that reproduces the runs made before the option existed."""
    return _walk(scheme, lambda entry, out: out.update(lacking_legacy_options(out)))


def without_legacy_options(scheme: Any) -> Any:
    """The scheme config without the ``legacy_options`` that hold their legacy value: the identity of a run made
    before them, whose name must not change."""
    def drop(entry: Entry, out: dict[str, Any]) -> None:
        for k, v in entry.legacy_options.items():
            if k in out and out[k] == v:
                del out[k]

    return _walk(scheme, drop)


def _walk(scheme: Any, edit) -> Any:
    """A copy of ``scheme`` with ``edit(entry, map)`` applied to it and to every scheme map nested in its options."""
    if isinstance(scheme, list):
        return [_walk(s, edit) for s in scheme]
    if not isinstance(scheme, dict):
        return scheme
    out = {k: _walk(v, edit) for k, v in scheme.items()}
    entry = catalog().get(out.get("name")) if isinstance(out.get("name"), str) else None
    if entry is not None:
        edit(entry, out)
    return out


def __getattr__(attr: str) -> Any:
    """REGISTRY, Scheme, ModelShape, LengthNotSupported: imported (with torch and every scheme) on first use."""
    if attr not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
    from pe_bench.schemes import base

    _load_all()
    return getattr(base, attr)


__all__ = ["REGISTRY", "Entry", "LengthNotSupported", "ModelShape", "Scheme", "available", "catalog", "get",
           "lacking_legacy_options", "with_legacy_options", "without_legacy_options"]

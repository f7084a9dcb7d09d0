"""Where schemes, tasks and config presets come from besides pe-bench itself: the directories of the search path
(``PE_BENCH_PATH``, separated like PATH; ``pe-bench --path DIR``), each holding any of ``schemes/*.py``,
``tasks/*.py`` and ``configs/<group>/*.yaml``; and installed packages that declare entry points in the groups
``pe_bench.schemes`` and ``pe_bench.tasks`` (a module each) and ``pe_bench.configs`` (a package holding a
``configs/`` directory). Nothing here imports a plugin: the registries read a module's source, and import it only
when its classes are needed."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from pe_bench.errors import ConfigError

ENV = "PE_BENCH_PATH"
PROBLEMS: list[str] = []  # one line per plugin left out (cannot be read, or takes a name pe-bench has): see note()


def note(problem: str) -> None:
    """Leave a plugin out, with one line saying which and why: the other plugins and pe-bench itself go on, and a
    command that asks for what the plugin would have given names the line (problems_said)."""
    if problem not in PROBLEMS:
        PROBLEMS.append(problem)


def problems_said() -> str:
    """The plugins left out, as the end of an "unknown name" message ("" when none)."""
    return "".join(f"; {p}" for p in PROBLEMS)


@dataclass(frozen=True)
class Module:
    """A plugin module: the name it is imported as, its source file, and where it came from (said in a run's
    meta.json and in the report's message when it is missing)."""

    name: str
    path: Path
    origin: str


def _path() -> list[Path]:
    return [Path(p).expanduser().resolve() for p in os.environ.get(ENV, "").split(os.pathsep) if p.strip()]


def search_dirs() -> list[Path]:
    """The directories of PE_BENCH_PATH that exist, in order (the CLI refuses one that does not: check_path)."""
    return [d for d in _path() if d.is_dir()]


def check_path() -> None:
    """A ConfigError naming the first directory of PE_BENCH_PATH that does not exist."""
    missing = [d for d in _path() if not d.is_dir()]
    if missing:
        raise ConfigError(f"{ENV} names {missing[0]}, which is not a directory; fix or remove it")


@functools.lru_cache(maxsize=None)
def modules(kind: str) -> tuple[Module, ...]:
    """The plugin modules of ``kind`` (schemes | tasks): search-path files first, then entry points."""
    found = [Module(f"pe_bench_plugins.{kind}.{_ident(d)}.{p.stem}", p, f"search path: {p}")
             for d in search_dirs() for p in sorted((d / kind).glob("*.py")) if not p.name.startswith("_")]
    for ep in _entry_points(f"pe_bench.{kind}"):
        spec = _find_spec(ep.value)
        if spec is None or spec.origin is None:
            note(f"the entry point {ep.name!r} of group pe_bench.{kind} names {ep.value!r}, which is not an "
                 "importable module (left out; reinstall the package that declares it)")
            continue
        found.append(Module(ep.value, Path(spec.origin), f"entry point: {_dist(ep)} ({ep.value})"))
    return tuple(found)


def config_dirs() -> list[Path]:
    """The plugins' configs/ directories: the search path's, then the entry points' (group pe_bench.configs)."""
    dirs = [d / "configs" for d in search_dirs() if (d / "configs").is_dir()]
    for ep in _entry_points("pe_bench.configs"):
        spec = _find_spec(ep.value)
        if spec is None or not spec.submodule_search_locations:
            note(f"the entry point {ep.name!r} of group pe_bench.configs names {ep.value!r}, which is not an "
                 "importable package (its presets are left out; reinstall the package that declares it)")
            continue
        dirs += [Path(p) / "configs" for p in spec.submodule_search_locations if (Path(p) / "configs").is_dir()]
    return dirs


def load(module: Module) -> ModuleType:
    """Import a plugin module (once). One that fails to import (a syntax error, a missing import) is a ConfigError
    naming its file."""
    if module.name in sys.modules:
        return sys.modules[module.name]
    try:
        if module.origin.startswith("entry point"):
            return importlib.import_module(module.name)
        spec = importlib.util.spec_from_file_location(module.name, module.path)
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module.name] = loaded
        spec.loader.exec_module(loaded)
    except Exception as e:  # noqa: BLE001 - a plugin's own code may raise anything on import
        sys.modules.pop(module.name, None)
        where = f", line {e.lineno}" if isinstance(e, SyntaxError) else ""
        raise ConfigError(f"the plugin {module.path}{where} cannot be imported ({type(e).__name__}: "
                          f"{_first_line(e)}); fix it or take it off {ENV}") from None
    return loaded


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    return sorted(importlib.metadata.entry_points(group=group), key=lambda ep: (ep.name, ep.value))


def _dist(ep: importlib.metadata.EntryPoint) -> str:
    return f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "an installed package"


def _ident(d: Path) -> str:
    """A module-name-safe tag of a search-path directory (two directories may hold files of the same name)."""
    import hashlib

    return "d" + hashlib.sha256(str(d).encode()).hexdigest()[:8]

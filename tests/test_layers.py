"""The package's layers: every module imports only from layers below its own, lazy imports inside functions
included (the import-linter contract in pyproject.toml, run here as CI runs it), and no two pe_bench modules import
each other, directly or through others."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("pe_bench", cache_dir=None)


def _layers() -> list[list[str]]:
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    return [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def test_the_layers_contract_holds():
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in r.stdout  # the package's layers, and the report package's own


def test_every_module_lies_in_a_layer():
    """A new module is placed in the contract's layers (or inside a package that is), so none escapes the check."""
    placed = [m for layer in _layers() for m in layer]
    code = [m for m in sorted(_graph().modules) if m != "pe_bench" and not m.startswith("pe_bench.configs")]
    loose = [m for m in code if not any(m == p or m.startswith(p + ".") for p in placed)]
    assert not loose, f"modules in no layer of pyproject.toml's import-linter contract: {loose}"


def _cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(imports[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(imports):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(imports) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_pe_bench_modules():
    g = _graph()
    imports = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert _cycles(imports) == []


def test_every_subpackage_is_installed():
    """A non-editable install (what CI and users get) carries exactly the packages pyproject.toml lists: a new
    subpackage missing from it works in a checkout and fails on every fresh install."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "pe_bench").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)

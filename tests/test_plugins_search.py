"""pe_bench.plugins in the test's own process: which files of the search path and which entry points are plugins,
under what module names and origins, how a broken one is left out or named, and which search-path directories a
run recorded. (tests/test_plugins.py runs the same paths end to end, as a user does, in a new process.)"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

from pe_bench import plugins
from pe_bench.errors import ConfigError


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """No search path and no remembered problem or module list before and after each test."""
    monkeypatch.delenv(plugins.ENV, raising=False)
    monkeypatch.setattr(plugins, "PROBLEMS", [])
    plugins.modules.cache_clear()
    yield
    plugins.modules.cache_clear()


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_search_path_is_split_like_path_and_a_missing_directory_is_one_line(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    monkeypatch.setenv(plugins.ENV, os.pathsep.join([str(a), " ", str(b)]))
    assert plugins.search_dirs() == [a.resolve(), b.resolve()]  # in order; blank entries skipped
    plugins.check_path()  # every directory exists: no error
    monkeypatch.setenv(plugins.ENV, os.pathsep.join([str(a), str(tmp_path / "gone"), str(tmp_path / "also")]))
    assert plugins.search_dirs() == [a.resolve()]
    with pytest.raises(ConfigError) as e:
        plugins.check_path()
    assert str(e.value) == (f"{plugins.ENV} names {(tmp_path / 'gone').resolve()}, which is not a directory; fix or "
                            "remove it")
    for unset in (True, False):
        if unset:
            monkeypatch.delenv(plugins.ENV)
        else:
            monkeypatch.setenv(plugins.ENV, "")
        assert plugins.search_dirs() == []
        plugins.check_path()


def test_search_path_modules_are_named_by_directory_and_files_starting_with_an_underscore_are_not_plugins(
        tmp_path, monkeypatch):
    one = tree(tmp_path / "one", {"schemes/zeta.py": "", "schemes/alpha.py": "", "schemes/_helper.py": "",
                                  "schemes/notes.txt": "", "tasks/t.py": ""})
    two = tree(tmp_path / "two", {"schemes/alpha.py": ""})
    monkeypatch.setenv(plugins.ENV, os.pathsep.join([str(one), str(two)]))
    found = plugins.modules("schemes")
    assert [m.path for m in found] == [one.resolve() / "schemes" / "alpha.py", one.resolve() / "schemes" / "zeta.py",
                                       two.resolve() / "schemes" / "alpha.py"]
    tag_one, tag_two = plugins._ident(one.resolve()), plugins._ident(two.resolve())
    assert tag_one != tag_two and tag_one.startswith("d") and len(tag_one) == 9
    assert [m.name for m in found] == [f"pe_bench_plugins.schemes.{tag_one}.alpha",
                                       f"pe_bench_plugins.schemes.{tag_one}.zeta",
                                       f"pe_bench_plugins.schemes.{tag_two}.alpha"]
    assert found[0].origin == f"search path: {one.resolve() / 'schemes' / 'alpha.py'}"
    assert [m.path.name for m in plugins.modules("tasks")] == ["t.py"]


def test_a_plugin_module_is_imported_once_and_one_that_cannot_be_is_named_with_its_line(tmp_path, monkeypatch):
    d = tree(tmp_path / "d", {"schemes/good.py": "VALUE = 41\n", "schemes/bad.py": "x = 1\ndef broken(:\n",
                              "schemes/raises.py": "raise RuntimeError('no gpu here\\nsecond line')\n",
                              "schemes/silent.py": "raise KeyError\n"})
    monkeypatch.setenv(plugins.ENV, str(d))
    by_stem = {m.path.stem: m for m in plugins.modules("schemes")}
    try:
        good = plugins.load(by_stem["good"])
        assert good.VALUE == 41 and sys.modules[by_stem["good"].name] is good
        good.VALUE = 42
        assert plugins.load(by_stem["good"]).VALUE == 42  # the module already imported, not a second import
        with pytest.raises(ConfigError) as e:
            plugins.load(by_stem["bad"])
        assert str(e.value).startswith(f"the plugin {by_stem['bad'].path}, line 2 cannot be imported (SyntaxError: ")
        assert str(e.value).endswith(f"); fix it or take it off {plugins.ENV}")
        assert by_stem["bad"].name not in sys.modules
        with pytest.raises(ConfigError) as e:
            plugins.load(by_stem["raises"])
        assert str(e.value) == (f"the plugin {by_stem['raises'].path} cannot be imported (RuntimeError: no gpu here); "
                                f"fix it or take it off {plugins.ENV}")
        assert by_stem["raises"].name not in sys.modules  # a later command tries again, it does not get half a module
        with pytest.raises(ConfigError) as e:
            plugins.load(by_stem["silent"])
        assert "(KeyError: KeyError)" in str(e.value)
    finally:
        for m in by_stem.values():
            sys.modules.pop(m.name, None)


class Dist:
    name, version = "tiltplugin", "0.3"


def entry_point(name: str, value: str, group: str, dist: object = None) -> importlib.metadata.EntryPoint:
    ep = importlib.metadata.EntryPoint(name, value, group)
    return ep._for(dist) if dist is not None else ep


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A plugin package on sys.path (tiltplugin: a module and a configs/ directory) and the entry points that
    importlib.metadata reports for it, in an order other than their names'."""
    site = tree(tmp_path / "site", {"tiltplugin/__init__.py": "", "tiltplugin/tilt.py": "from . import aaa\n",
                                    "tiltplugin/aaa.py": "", "tiltplugin/broken.py": "raise RuntimeError('no')\n",
                                    "tiltplugin/configs/scheme/tilt.yaml": "name: tilt\n",
                                    "bare/__init__.py": ""})
    monkeypatch.syspath_prepend(str(site))
    points = {
        "pe_bench.schemes": [entry_point("tilt", "tiltplugin.tilt", "pe_bench.schemes", Dist()),
                             entry_point("gone", "tiltplugin.missing", "pe_bench.schemes", Dist()),
                             entry_point("aaa", "tiltplugin.aaa", "pe_bench.schemes"),
                             entry_point("zzz", "tiltplugin.broken", "pe_bench.schemes", Dist())],
        "pe_bench.configs": [entry_point("tilt", "tiltplugin", "pe_bench.configs", Dist()),
                             entry_point("bare", "bare", "pe_bench.configs", Dist()),
                             entry_point("mod", "tiltplugin.tilt", "pe_bench.configs", Dist())],
    }
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: list(points.get(group, [])))
    yield site
    for name in [n for n in sys.modules if n == "tiltplugin" or n.startswith(("tiltplugin.", "bare"))]:
        sys.modules.pop(name)


def test_entry_points_come_after_the_search_path_sorted_and_a_dead_one_is_left_out_with_one_line(
        installed, tmp_path, monkeypatch):
    d = tree(tmp_path / "d", {"schemes/mine.py": ""})
    monkeypatch.setenv(plugins.ENV, str(d))
    found = plugins.modules("schemes")
    assert [m.name for m in found] == [f"pe_bench_plugins.schemes.{plugins._ident(d.resolve())}.mine",
                                       "tiltplugin.aaa", "tiltplugin.tilt", "tiltplugin.broken"]
    assert found[1].origin == "entry point: an installed package (tiltplugin.aaa)"  # no distribution recorded
    assert found[2].origin == "entry point: tiltplugin 0.3 (tiltplugin.tilt)"
    assert found[2].path == installed / "tiltplugin" / "tilt.py"
    assert plugins.PROBLEMS == ["the entry point 'gone' of group pe_bench.schemes names 'tiltplugin.missing', which "
                                "is not an importable module (left out; reinstall the package that declares it)"]
    assert plugins.problems_said() == "; " + plugins.PROBLEMS[0]
    assert plugins.modules("tasks") == ()
    loaded = plugins.load(found[2])
    assert loaded is sys.modules["tiltplugin.tilt"] is sys.modules["tiltplugin"].tilt  # imported as its package's
    with pytest.raises(ConfigError, match=r"the plugin .*broken.py cannot be imported \(RuntimeError: no\)"):
        plugins.load(found[3])


def test_config_directories_come_from_the_search_path_then_packages_and_a_module_is_named(installed, tmp_path,
                                                                                        monkeypatch):
    with_configs = tree(tmp_path / "with", {"configs/scheme/x.yaml": "name: x\n"})
    without = tree(tmp_path / "without", {"schemes/y.py": ""})
    monkeypatch.setenv(plugins.ENV, os.pathsep.join([str(without), str(with_configs)]))
    assert plugins.config_dirs() == [with_configs.resolve() / "configs", installed / "tiltplugin" / "configs"]
    assert plugins.PROBLEMS == ["the entry point 'mod' of group pe_bench.configs names 'tiltplugin.tilt', which is "
                                "not an importable package (its presets are left out; reinstall the package that "
                                "declares it)"]  # bare: a package without configs/ gives nothing and is no problem


def test_a_problem_is_said_once_and_every_problem_ends_an_unknown_name_message():
    assert plugins.problems_said() == ""
    plugins.note("a")
    plugins.note("b")
    plugins.note("a")
    assert plugins.PROBLEMS == ["a", "b"]
    assert plugins.problems_said() == "; a; b"


def test_an_unimportable_name_has_no_spec_rather_than_an_error():
    assert plugins._find_spec("no_such_package_anywhere.sub") is None  # ImportError: the parent is missing
    assert plugins._find_spec(".relative") is None  # ValueError: a relative name
    assert plugins._find_spec("json") is not None
    assert plugins._first_line(ValueError("")) == "ValueError"
    assert plugins._first_line(ValueError("  one\ntwo ")) == "one"

"""One broken plugin breaks only itself: every command that does not need it works, one that does names it in one
line (exit 2), and `pe-bench schemes` lists what was left out. Run as a user runs pe-bench (a new process)."""

from __future__ import annotations

import shutil

import pytest

from test_plugins import pe_bench

COPY_TWICE = '''from pe_bench.tasks.copy import Copy


class MyCopy(Copy):
    name = "copy"
'''


@pytest.fixture
def plugin_dir(tmp_path):
    d = tmp_path / "my-pe"
    (d / "schemes").mkdir(parents=True)
    (d / "tasks").mkdir()
    return d


def test_a_scheme_plugin_with_a_syntax_error_leaves_only_itself_out(plugin_dir):
    (plugin_dir / "schemes" / "bad.py").write_text("def broken(:\n")
    env = {"PE_BENCH_PATH": str(plugin_dir)}
    for args in (["--version"], ["--help"], ["train", "scheme=rope", "--cfg"]):
        r = pe_bench(*args, env=env)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])
    listed = pe_bench("schemes", env=env)
    assert listed.returncode == 0 and "rope" in listed.stdout
    assert f"left out: the plugin {plugin_dir / 'schemes' / 'bad.py'}, line 1 cannot be read (SyntaxError)" in listed.stderr
    asked = pe_bench("train", "scheme=bad", "--cfg", env=env)
    assert asked.returncode == 2 and "Traceback" not in asked.stderr
    assert "unknown scheme 'bad'" in asked.stderr and "bad.py, line 1 cannot be read" in asked.stderr


def test_a_task_plugin_named_like_a_built_in_task_is_refused_only_when_that_task_is_asked_for(plugin_dir):
    (plugin_dir / "tasks" / "copy2.py").write_text(COPY_TWICE)
    env = {"PE_BENCH_PATH": str(plugin_dir)}
    for args in (["--help"], ["--version"], ["train", "task=passkey", "--cfg"], ["schemes"]):
        r = pe_bench(*args, env=env)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])
    r = pe_bench("train", "task=copy", "--cfg", env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"task=copy is defined twice, by pe_bench.tasks.copy and {plugin_dir / 'tasks' / 'copy2.py'}" in r.stderr


def test_a_plugin_preset_named_like_a_built_in_preset_is_refused_when_chosen(plugin_dir, tmp_path):
    from pe_bench.config import config_dir

    (plugin_dir / "configs" / "scheme").mkdir(parents=True)
    shutil.copy(config_dir() / "scheme" / "rope.yaml", plugin_dir / "configs" / "scheme" / "rope.yaml")
    env = {"PE_BENCH_PATH": str(plugin_dir)}
    assert pe_bench("train", "scheme=alibi", "--cfg", env=env).returncode == 0
    r = pe_bench("train", "scheme=rope", "--cfg", env=env)
    assert r.returncode == 2 and "scheme=rope is defined twice" in r.stderr
    assert str(plugin_dir / "configs" / "scheme" / "rope.yaml") in r.stderr


def test_a_plugin_file_whose_name_starts_with_an_underscore_is_not_a_plugin(plugin_dir):
    from test_extending import SCHEME

    (plugin_dir / "schemes" / "_helpers.py").write_text(SCHEME)  # a helper module beside the plugins, not one
    listed = pe_bench("schemes", env={"PE_BENCH_PATH": str(plugin_dir)})
    assert listed.returncode == 0 and "tilt" not in listed.stdout and "left out" not in listed.stderr


def test_a_scheme_plugin_that_fails_after_defining_its_class_is_never_used(plugin_dir, tmp_path):
    """The class registers itself as its module runs; the import then fails (a missing package, last line): the
    scheme is refused in one line (exit 2) naming the plugin and the error, and nothing is trained with it."""
    from test_extending import SCHEME, YAML

    (plugin_dir / "schemes" / "tilt.py").write_text(SCHEME + "\nimport no_such_package_anywhere\n")
    (plugin_dir / "configs" / "scheme").mkdir(parents=True)
    (plugin_dir / "configs" / "scheme" / "tilt.yaml").write_text(YAML)
    r = pe_bench("--path", str(plugin_dir), "train", "scheme=tilt", "train=smoke", f"results_dir={tmp_path / 'res'}",
                 "--no-progress")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "KeyError" not in r.stderr, r.stderr[-2000:]
    said = " ".join(r.stderr.split())
    assert "scheme 'tilt' comes from search path:" in said and "No module named 'no_such_package_anywhere'" in said
    assert not (tmp_path / "res").exists()

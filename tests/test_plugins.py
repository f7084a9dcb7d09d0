"""Schemes, tasks and presets from outside the package (pe_bench.plugins): a directory on the search path
(`pe-bench --path DIR`, PE_BENCH_PATH) and an installed package's entry points. Each is listed, composed, trained and
reported with no edit to pe-bench; a run records where its plugin came from, and a report without the plugin names
it in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from test_extending import SCHEME, TASK, TASK_YAML, TINY, YAML  # the throwaway scheme and task

ROOT = Path(__file__).resolve().parents[1]


def pe_bench(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The installed pe-bench, as a user runs it: from a directory outside the checkout, so that `-m pe_bench` is the
    installed package (CI installs it non-editable), not the sources beside the tests."""
    environ = {k: v for k, v in os.environ.items() if k != "PE_BENCH_PATH"}
    return subprocess.run([sys.executable, "-m", "pe_bench", *args], cwd=cwd or tempfile.gettempdir(),
                          env={**environ, **(env or {})}, capture_output=True, text=True)


@pytest.fixture(scope="module")
def own_dir(tmp_path_factory) -> Path:
    """A user's directory: schemes/tilt.py, tasks/first.py and their presets under configs/."""
    d = tmp_path_factory.mktemp("my-pe")
    for sub, name, text in (("schemes", "tilt.py", SCHEME), ("tasks", "first.py", TASK),
                            ("configs/scheme", "tilt.yaml", YAML), ("configs/task", "first.yaml", TASK_YAML)):
        (d / sub).mkdir(parents=True, exist_ok=True)
        (d / sub / name).write_text(text)
    return d


def test_a_scheme_from_the_search_path_is_listed_trained_and_reported(own_dir, tmp_path):
    import shutil

    listed = pe_bench("--path", str(own_dir), "schemes")
    assert listed.returncode == 0, listed.stderr
    assert "tilt" in listed.stdout and "a linear distance penalty" in listed.stdout
    assert "tilt" not in pe_bench("schemes").stdout  # not without the directory
    mine = tmp_path / "mine"
    shutil.copytree(own_dir, mine)
    trained = pe_bench("--path", str(mine), "train", "scheme=tilt", *TINY, f"results_dir={tmp_path}",
                       "--no-progress")
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    [run] = (tmp_path / "runs").iterdir()
    assert run.name.startswith("tilt-tiny-shakespeare-L32-s0-")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["plugins"] == {"scheme tilt": f"search path: {mine / 'schemes' / 'tilt.py'}"}
    reported = pe_bench("report", str(tmp_path), "--out", str(tmp_path / "rep"), "--no-plots",
                        env={"PE_BENCH_PATH": str(mine)})
    assert reported.returncode == 0, reported.stdout[-3000:] + reported.stderr[-3000:]
    assert "| tilt | 32 |" in (tmp_path / "rep" / "comparison.md").read_text()
    assert f"pe-bench --path {mine} report" in (tmp_path / "rep" / "README.md").read_text()  # the command again
    # without --path, a run's recorded plugin is shown, never imported: the command names it and says how to load it
    for command in (["report", str(tmp_path), "--out", str(tmp_path / "rep2"), "--no-plots"],
                    ["eval", str(run), "eval.lengths=[32,64]", "--no-progress"], ["analyze", str(run), "eval.lengths=[32]"]):
        refused = pe_bench(*command)
        assert refused.returncode == 2, (command, refused.stdout[-3000:] + refused.stderr[-3000:])
        assert "loading plugins" not in refused.stderr
        assert (f"made with the scheme plugin 'tilt' (search path: {mine / 'schemes' / 'tilt.py'})"
                in " ".join((refused.stdout + refused.stderr).split())), command
    assert not (tmp_path / "rep2").exists()
    listing = pe_bench("runs", str(tmp_path))  # listed, with what it needs
    assert listing.returncode == 0 and "loading plugins" not in listing.stderr
    assert "which this pe-bench does not have: add its directory with --path" in " ".join(listing.stdout.split())
    listing = pe_bench("--path", str(mine), "runs", str(tmp_path))
    assert listing.returncode == 0 and [run.name, "done"] in [line.split()[:2] for line in listing.stdout.splitlines()]
    for command in (["eval", str(run), "eval.lengths=[32,64]", "--no-progress"],
                    ["analyze", str(run), "eval.lengths=[32]"]):
        again = pe_bench("--path", str(mine), *command)  # with --path, eval and analyze load it
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert (run / "analysis" / "attention.csv").exists()
    assert set(json.loads((run / "meta.json").read_text())["plugin_sha256"]) == {"scheme tilt"}
    rows = (run / "eval.csv").read_text()
    tilt = mine / "schemes" / "tilt.py"
    tilt.write_text(tilt.read_text().replace("-self.options.slope", "-2 * self.options.slope"))  # edited since
    edited = pe_bench("--path", str(mine), "eval", str(run), "eval.lengths=[32,128]", "--no-progress")
    assert edited.returncode == 2, edited.stdout[-3000:] + edited.stderr[-3000:]
    assert "the scheme tilt plugin's file changed since" in " ".join(edited.stderr.split())
    assert (run / "eval.csv").read_text() == rows  # no row from the new code under the old label
    shutil.rmtree(mine)  # the plugin is gone: the report says which one it needs
    without = pe_bench("report", str(tmp_path), "--out", str(tmp_path / "rep3"), "--no-plots")
    assert without.returncode == 2
    assert (f"{run.name} was made with the scheme plugin 'tilt' (search path: {mine / 'schemes' / 'tilt.py'}), "
            "which this pe-bench does not have: add its directory with --path") in without.stdout + without.stderr


EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


def test_reading_a_shared_results_directory_never_runs_code_shipped_inside_it(tmp_path):
    """A results directory with plugin files beside its runs, and runs whose meta.json records them (relative and
    absolute paths): `runs`, `report`, `eval` and `analyze` show the recorded path and import nothing."""
    import shutil

    results = tmp_path / "results"
    marker = tmp_path / "ran"
    for sub in ("schemes", "tasks"):
        (results / "payload" / sub).mkdir(parents=True)
        (results / "payload" / sub / "x.py").write_text(EVIL.format(marker=str(marker)))
        (results / "payload" / sub / "evil.py").write_text(EVIL.format(marker=str(marker)))
    source = ROOT / "results" / "tasks" / "runs" / "addition-alibi-tiny_fan_in-L32-s0-b64a55ac"
    for name, where in (("relative", "results/payload/schemes/x.py"),
                        ("absolute", str(results / "payload" / "schemes" / "x.py"))):
        run = results / "runs" / f"addition-{name}"
        shutil.copytree(source, run)
        meta = json.loads((run / "meta.json").read_text())
        meta["plugins"] = {"scheme x": f"search path: {where}", "task evil": f"search path: {where}"}
        (run / "meta.json").write_text(json.dumps(meta))
    for command in (["runs", "results"], ["report", "results", "--out", str(tmp_path / "rep"), "--no-plots"],
                    ["eval", "results/runs/addition-relative"], ["analyze", str(results / "runs" / "addition-absolute")]):
        got = pe_bench(*command, cwd=tmp_path)
        assert not marker.exists(), (command, got.stdout[-2000:], got.stderr[-2000:])
        assert "loading plugins" not in got.stdout + got.stderr and "Traceback" not in got.stdout + got.stderr
    assert pe_bench("runs", "results", cwd=tmp_path).returncode == 0


def test_a_task_with_its_own_option_from_the_search_path_trains(own_dir, tmp_path):
    env = {"PE_BENCH_PATH": str(own_dir)}
    trained = pe_bench("train", "task=first", "task.alphabet=6", "scheme=alibi", *TINY, f"results_dir={tmp_path}",
                       "--no-progress", env=env)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    [run] = (tmp_path / "runs").iterdir()
    assert run.name.startswith("first-alibi-tiny-L32-s0-")
    assert "exact match" in trained.stdout
    meta = json.loads((run / "meta.json").read_text())
    assert meta["plugins"] == {"task first": f"search path: {own_dir / 'tasks' / 'first.py'}"}
    shown = pe_bench("train", "task=copy", "--cfg", env=env)  # the new option leaves other runs' names alone
    assert shown.returncode == 0 and shown.stdout.splitlines()[-1] == pe_bench("train", "task=copy", "--cfg").stdout \
        .splitlines()[-1]


SECOND = TASK.replace("First", "Second").replace('"first"', '"second"').replace(
    "from pe_bench.ranges import ranged", "from pe_bench.ranges import chosen, ranged").replace(
    "    alphabet: int = ranged(8, ge=2)",
    "    alphabet: int = ranged(8, ge=2)\n    symbols: int = ranged(7, ge=2)  # copy's has another default\n"
    "    mode: str = chosen(\"plain\", \"dense\")")


def test_two_tasks_may_give_one_option_name_different_defaults_and_a_task_declares_its_choices(tmp_path):
    """A task's options are its own typed dataclass: a plugin task whose ``symbols`` has another default than copy's
    breaks nothing (``--help`` included), each task composes with its own default, a string option's choices are
    declared on its field (no table elsewhere), and another task's key is one line naming the task that reads it."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "second.py").write_text(SECOND)
    env = {"PE_BENCH_PATH": str(tmp_path)}
    assert pe_bench("--help", env=env).returncode == 0
    assert pe_bench("train", "--help", env=env).returncode == 0

    def task_keys(*overrides: str) -> dict:
        import yaml

        shown = pe_bench("train", *overrides, "--cfg", env=env)
        assert shown.returncode == 0, shown.stderr
        return yaml.safe_load(shown.stdout[: shown.stdout.rindex("\n# ")] if "\n# " in shown.stdout
                              else shown.stdout)["task"]

    assert task_keys("task.name=second")["symbols"] == 7
    assert task_keys("task.name=second", "task.mode=dense")["mode"] == "dense"
    assert task_keys("task.name=copy")["symbols"] == 16 and "mode" not in task_keys("task.name=copy")
    for overrides, line in (
            (["task.name=second", "task.mode=sparse"], "error: task.mode='sparse' is not one of: plain, dense"),
            (["task.name=copy", "task.mode=dense"], "error: task.mode=dense is not read by task=copy; it is an "
                                                    "option of task=second"),
            (["task.name=copy", "task.nope=1"], "error: unknown config key 'task.nope'; valid keys in task "
                                                "(task=copy): name, train_lengths, curriculum_fraction, "
                                                "eval_examples, symbols")):
        r = pe_bench("train", *overrides, f"results_dir={tmp_path / 'out'}", env=env)
        assert r.returncode == 2 and r.stderr.strip() == line, r.stderr
    assert not (tmp_path / "out").exists()


def test_the_conformance_tests_take_a_scheme_from_the_search_path(own_dir):
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q",
                        "tests/test_schemes.py", "-k", "tilt"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PE_BENCH_PATH": str(own_dir)})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert int(r.stdout.strip().splitlines()[-1].split()[0]) >= 9


def test_a_directory_on_the_search_path_that_does_not_exist_is_one_line(tmp_path):
    r = pe_bench("--path", str(tmp_path / "nowhere"), "schemes")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"error: PE_BENCH_PATH names {tmp_path / 'nowhere'}, which is not a directory; fix or "
                                "remove it (--path or PE_BENCH_PATH)")


def test_an_installed_packages_entry_points_bring_its_scheme_and_presets(tmp_path):
    """A plugin package as pip leaves it on sys.path: its modules and a dist-info with entry_points.txt."""
    site = tmp_path / "site"
    pkg = site / "tiltplugin"
    (pkg / "configs" / "scheme").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "tilt.py").write_text(SCHEME)
    (pkg / "configs" / "scheme" / "tilt.yaml").write_text(YAML)
    info = site / "tiltplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiltplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pe_bench.schemes]\ntilt = tiltplugin.tilt\n\n"
                                           "[pe_bench.configs]\ntiltplugin = tiltplugin\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    listed = pe_bench("schemes", env=env)
    assert listed.returncode == 0 and "tilt" in listed.stdout, listed.stderr
    trained = pe_bench("train", "scheme=tilt", *TINY, f"results_dir={tmp_path / 'results'}", "--no-progress",
                       env=env)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    [run] = (tmp_path / "results" / "runs").iterdir()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["plugins"] == {"scheme tilt": "entry point: tiltplugin 0.1 (tiltplugin.tilt)"}

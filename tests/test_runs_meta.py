"""meta.json is one typed record (pe_bench.runs.meta.RunMeta) that pe_bench.runs owns; a run's state is one function."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pe_bench.cli import app
from pe_bench.runs import Run, RunFileError, RunMeta, State, Status, state_of
from pe_bench.runs.meta import ALLOWED, SCHEMA

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = sorted(ROOT.glob("results/*/runs/*/meta.json"))


def test_every_committed_meta_json_reads_as_a_run_meta_and_writes_back_the_same_object():
    assert len(COMMITTED) > 100
    for path in COMMITTED:
        data = json.loads(path.read_text())
        meta = RunMeta.from_json(data, path)
        assert meta.to_json() == data, path  # nothing lost, nothing added, same key order
        assert list(meta.to_json()) == list(data)
        assert meta.status in (Status.DONE, Status.DIVERGED)


def test_keys_this_version_does_not_know_are_kept_through_an_update(tmp_path):
    run = Run(tmp_path / "r")
    run.path.mkdir()
    run.meta_path.write_text(json.dumps({"status": "running", "from_the_future": {"a": 1}, "error": None}))
    meta = run.update_meta(status=Status.DONE, wall_seconds=3.5)
    on_disk = json.loads(run.meta_path.read_text())
    assert on_disk["from_the_future"] == {"a": 1} and on_disk["error"] is None
    assert on_disk["status"] == "done" and on_disk["wall_seconds"] == 3.5 and on_disk["schema"] == SCHEMA
    assert meta.extra == {"from_the_future": {"a": 1}} and meta.status is Status.DONE


@pytest.mark.parametrize(("key", "value", "word"), [
    ("train_seconds", "12s", "a number"), ("checkpoint_step", 2.5, "an integer"), ("status", "finished", "one of"),
    ("git_modified", "yes", "true or false"), ("resumed_from", [1, "x"], "a list"), ("n_params", True, "an integer")])
def test_a_wrong_typed_value_is_one_line_naming_the_file_and_the_key(tmp_path, key, value, word):
    path = tmp_path / "meta.json"
    with pytest.raises(RunFileError, match=rf"meta\.json: {key} is .*not {word}"):
        RunMeta.from_json({"status": "done", key: value}, path)


def test_a_file_from_a_newer_pe_bench_is_refused_not_misread(tmp_path):
    with pytest.raises(RunFileError, match="newer pe-bench"):
        RunMeta.from_json({"status": "done", "schema": SCHEMA + 1}, tmp_path / "meta.json")


def test_an_unknown_field_is_a_programming_error_not_a_new_key(tmp_path):
    with pytest.raises(TypeError, match="no field 'wal_seconds'"):
        Run(tmp_path / "r").update_meta(wal_seconds=1.0)


def test_status_changes_follow_the_allowed_transitions(tmp_path):
    run = Run(tmp_path / "r")
    run.update_meta(status=Status.RUNNING)
    run.update_meta(status=Status.DONE)
    with pytest.raises(RunFileError, match="a done run cannot become running"):
        run.update_meta(status=Status.RUNNING)
    assert ALLOWED[Status.DIVERGED] == {Status.DIVERGED}  # a diverged config diverges again: never restarted
    assert all(Status.FAILED in ALLOWED[s] for s in Status if s not in (Status.DONE, Status.DIVERGED))


def test_wall_is_one_definition_the_last_sessions_or_the_sum_over_resumed_sessions():
    assert RunMeta(wall_seconds=11.58, train_seconds=4.0, eval_seconds=7.0).wall == 11.58
    assert RunMeta(wall_seconds=5.0, train_seconds=9.0, eval_seconds=2.0, resumed_from=[3]).wall == 11.0
    assert RunMeta(train_seconds=9.0, eval_seconds=2.0).wall == 11.0 and RunMeta().wall is None


def test_the_state_of_a_run_from_its_record_files_and_lock(tmp_path):
    run = Run(tmp_path / "r")
    assert state_of(run).state == State.NEW
    run.update_meta(status=Status.RUNNING)
    assert state_of(run).state == State.STALE  # says running, nobody holds the lock: killed
    with run.lock():
        pass
    run.update_meta(status=Status.DONE)
    assert state_of(run).state == State.STALE  # done without its rows is not done
    run.eval_csv.write_text("x\n")
    assert state_of(run).state == State.DONE
    other = Run(tmp_path / "q")
    other.update_meta(status=Status.QUEUED, slurm_job="7")
    assert state_of(other, slurm_alive=lambda job: job == "7").state == State.QUEUED
    assert state_of(other, slurm_alive=lambda job: False).state == State.STALE
    other.meta_path.write_text("{")
    assert state_of(other).state == State.UNREADABLE and "meta.json is unreadable" in state_of(other).detail


def test_runs_lists_every_other_run_when_one_meta_json_holds_a_wrong_typed_value(tmp_path):
    for name in ("a-run", "b-run"):
        run = Run(tmp_path / "runs" / name)
        run.path.mkdir(parents=True)
        (run.path / "config.yaml").write_text((COMMITTED[0].parent / "config.yaml").read_text())
        run.update_meta(status=Status.RUNNING)
    bad = tmp_path / "runs" / "b-run" / "meta.json"
    bad.write_text(json.dumps({**json.loads(bad.read_text()), "train_seconds": "12s"}))
    r = CliRunner().invoke(app, ["runs", str(tmp_path)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert any(line.startswith("a-run") and " stale " in line for line in lines)
    assert any(line.startswith("b-run") and "unreadable" in line and "train_seconds is '12s'" in line
               for line in lines)


KEY = re.compile(r"""meta\w*(?:\(\))?\s*(?:\.get\(\s*|\[\s*)["'](\w+)["']""")


def test_no_module_outside_pe_bench_runs_reads_meta_json_keys_as_strings():
    fields = set(RunMeta.__dataclass_fields__) - {"extra", "order"}
    found = []
    for path in sorted((ROOT / "pe_bench").rglob("*.py")):
        if path.parent.name == "runs" and path.parent.parent.name == "pe_bench":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{i}: {k}" for k in KEY.findall(line) if k in fields]
    assert not found, found


def test_status_words_are_written_only_through_the_enum():
    found = []
    for path in sorted((ROOT / "pe_bench").rglob("*.py")):
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {m}" for m in re.findall(r"""status=["'](\w+)["']""", text)]
    assert not found, found


def test_a_run_whose_logger_fails_to_start_is_failed_not_left_running(tmp_path, monkeypatch):
    from pe_bench import experiment
    from pe_bench.config import compose

    def no_tracker(*args, **kwargs):
        raise RuntimeError("wandb could not start")

    monkeypatch.setattr(experiment, "open_tracker", no_tracker)
    cfg = compose(["scheme=nope", "train=smoke", "model.n_layers=1", "model.d_model=32", f"results_dir={tmp_path}"])
    with pytest.raises(RuntimeError, match="wandb could not start"):
        experiment.run_one(cfg, progress=False)
    [run] = (tmp_path / "runs").iterdir()
    meta = Run(run).meta()
    assert meta.status == Status.FAILED and meta.error == "RuntimeError: wandb could not start"
    assert state_of(Run(run)).state == State.FAILED


def test_an_analysis_made_while_the_run_trains_is_retired_at_its_next_checkpoint(tmp_path, monkeypatch):
    from pe_bench import experiment
    from pe_bench.config import compose

    update = Run.update_meta

    def analyze_at_step_5(self, **fields):  # `pe-bench analyze` run against the checkpoint of step 5
        meta = update(self, **fields)
        if fields.get("checkpoint_step") == 5:
            (self.path / "analysis").mkdir()
            (self.path / "analysis" / "attention.csv").write_text("step\n5\n")
            (self.path / "analysis" / "analysis.json").write_text(json.dumps({"step": 5}))
        return meta

    monkeypatch.setattr(Run, "update_meta", analyze_at_step_5)
    cfg = compose(["scheme=nope", "train=smoke", "train.ckpt_interval=5", "model.n_layers=1", "model.d_model=32",
                   "eval.lengths=[32]", f"results_dir={tmp_path}"])
    run = experiment.run_one(cfg, progress=False)
    assert not (run.path / "analysis").exists()
    assert (run.path / "analysis.stale-step5" / "attention.csv").exists()


@pytest.mark.parametrize("key", ["status", "schema", "started"])
def test_a_null_in_meta_json_costs_its_own_run_only(tmp_path, key):
    """"status": null (not a status) is one line naming the file and the key; "schema": null reads as no schema
    (version 1); either way every other run is listed and reported, and the run itself is refused in one line."""
    import shutil

    sources = sorted((ROOT / "results" / "tasks" / "runs").glob("passkey-nope-tiny-L32-s*"))
    for src in sources:
        shutil.copytree(src, tmp_path / "runs" / src.name)
    bad = tmp_path / "runs" / sources[1].name / "meta.json"
    bad.write_text(json.dumps({**json.loads(bad.read_text()), key: None}))
    listed = CliRunner().invoke(app, ["runs", str(tmp_path)])
    assert listed.exit_code == 0 and "Traceback" not in listed.output, listed.output
    lines = [" ".join(line.split()) for line in listed.output.splitlines()]
    assert sum(line.startswith("passkey-nope-tiny-L32-s") and " done " in line for line in lines) == (3 if key != "status"
                                                                                                  else 2)
    reported = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "rep"), "--no-plots"])
    assert reported.exit_code == 0 and reported.exception is None or isinstance(reported.exception, SystemExit)
    if key == "status":
        assert any(sources[1].name in line and "unreadable" in line and "status is None" in line for line in lines)
        assert "status is None, not one of" in " ".join(reported.output.split())
        again = CliRunner().invoke(app, ["eval", str(bad.parent)])
        assert again.exit_code == 2 and again.output.startswith("error: ") and len(again.output.splitlines()) == 1
    else:
        assert RunMeta.from_json(json.loads(bad.read_text()), bad).schema is None

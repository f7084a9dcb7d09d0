"""A report directory is replaced as a whole: nothing of an earlier report stays, a failure or a kill leaves the whole
old report or the whole new one, and what pe-bench did not write there stays."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pe_bench.cli import app
from pe_bench.report import files as report_files
from pe_bench.report.files import PAGES, finish_staged, staged_report, staging_of

ROOT = Path(__file__).resolve().parent.parent
LM_RUN = next((ROOT / "results" / "trained_long" / "runs").glob("alibi-*-L64-s1-*"))
TASK_RUN = next((ROOT / "results" / "tasks" / "runs").glob("passkey-alibi-*"))


def report(*args):
    r = CliRunner().invoke(app, ["report", *map(str, args), "--no-plots"])
    assert r.exit_code == 0, r.output
    return r


def names(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def test_a_task_report_into_a_language_model_reports_directory_leaves_none_of_its_files(tmp_path):
    out = tmp_path / "rep"
    report(LM_RUN, "--out", out)
    assert {"comparison.csv", "eval_long.csv", *PAGES} <= names(out)
    (out / "COMMAND.txt").write_text("how this was made\n")  # not pe-bench's: it stays
    (out / "runs").mkdir()
    report(TASK_RUN, "--out", out)
    assert "comparison.csv" not in names(out) and "eval_long.csv" not in names(out)
    assert {"accuracy.csv", "leaderboard.md", "COMMAND.txt", "runs", *PAGES} <= names(out)
    listed = json.loads((out / "results.json").read_text())["files"]
    assert names(out) - {"COMMAND.txt", "runs"} == set(listed) | set(PAGES)
    assert not staging_of(out).exists()


def test_the_wrote_lines_name_the_report_directory_not_the_staging_folder(tmp_path):
    out = tmp_path / "rep"
    r = report(LM_RUN, "--out", out)
    wrote = [line.split("wrote ", 1)[1] for line in r.output.splitlines() if line.startswith("wrote ")]
    assert wrote and all(Path(w).parent == out and Path(w).exists() for w in wrote)
    assert {Path(w).name for w in wrote} == names(out)


def test_a_failure_while_writing_any_part_pages_included_leaves_the_old_report_whole(tmp_path, monkeypatch):
    from pe_bench.report import pages

    out = tmp_path / "rep"
    report(LM_RUN, "--out", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pages, "write_index", disk_full)  # the last page fails: the tables were written already
    r = CliRunner().invoke(app, ["report", str(TASK_RUN), "--out", str(out), "--no-plots"])
    assert r.exit_code != 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not staging_of(out).exists()


def test_a_report_killed_while_moving_is_finished_by_the_next_one(tmp_path, monkeypatch):
    out = tmp_path / "rep"
    report(LM_RUN, "--out", out)
    moved = []

    def killed_after_one(src, dst):  # a kill -9 between two renames
        if moved:
            raise KeyboardInterrupt
        moved.append(dst)
        Path(src).rename(dst)

    monkeypatch.setattr(report_files.os, "replace", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        with staged_report(out) as stage:
            (stage / "accuracy.csv").write_text("new\n")
            (stage / "results.json").write_text(json.dumps({"files": ["accuracy.csv"]}))
    monkeypatch.undo()
    assert staging_of(out).exists()  # the plan is on disk
    finish_staged(out)  # what the next report into out does first
    assert names(out) == {"accuracy.csv", "results.json"}  # the whole new report: the old one's files are gone
    assert (out / "accuracy.csv").read_text() == "new\n"


def test_an_unreadable_results_json_refuses_to_replace_the_report(tmp_path):
    out = tmp_path / "rep"
    report(LM_RUN, "--out", out)
    (out / "results.json").write_text("{")
    r = CliRunner().invoke(app, ["report", str(LM_RUN), "--out", str(out), "--no-plots"])
    assert r.exit_code == 2 and "cannot be replaced safely" in r.output


def test_a_report_into_a_run_directory_or_a_file_is_refused_before_anything_is_written(tmp_path):
    import shutil

    run = tmp_path / TASK_RUN.name
    shutil.copytree(TASK_RUN, run)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    for out in (run, run / "sub"):
        r = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--no-plots"])
        assert r.exit_code == 2 and "the run directory" in r.output and "--out another directory" in r.output
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # its own accuracy.csv untouched
    (tmp_path / "a-file").write_text("mine\n")
    r = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "a-file"), "--no-plots"])
    assert r.exit_code == 2 and "is a file, not a directory" in r.output and r.output.count("\n") == 1
    assert (tmp_path / "a-file").read_text() == "mine\n"


def test_results_json_is_strict_json_whatever_meta_json_holds(tmp_path):
    import shutil

    run = tmp_path / "runs" / TASK_RUN.name
    shutil.copytree(TASK_RUN, run)
    meta = json.loads((run / "meta.json").read_text())
    meta.update(final_train_loss=float("nan"), train_seconds=float("inf"), final_val_loss=float("-inf"))
    (run / "meta.json").write_text(json.dumps(meta))  # Python writes NaN and Infinity, which JSON has not
    report(run, "--out", tmp_path / "rep")

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    doc = json.loads((tmp_path / "rep" / "results.json").read_text(), parse_constant=refuse)
    summary = doc["runs"][run.name]
    assert (summary["final_train_loss"], summary["train_seconds"], summary["final_val_loss"]) == ("nan", "inf", "-inf")


def test_two_reports_into_one_directory_at_once_leave_one_whole_report(tmp_path):
    """Started together, the second waits for the first and then replaces it whole: never a mixed directory."""
    import subprocess
    import sys

    out = tmp_path / "rep"
    procs = [subprocess.Popen([sys.executable, "-m", "pe_bench", "report", str(src), "--out", str(out), "--no-plots"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for src in (LM_RUN, TASK_RUN)]
    assert [p.wait() for p in procs] == [0, 0], [p.stderr.read() for p in procs]
    listed = json.loads((out / "results.json").read_text())["files"]
    assert names(out) == set(listed) | set(PAGES)  # one report's files, whichever finished last
    assert ("accuracy.csv" in listed) != ("comparison.csv" in listed)
    assert not staging_of(out).exists()


def test_a_report_directory_on_another_file_system_is_replaced_whole(tmp_path):
    """--out a link to a directory on another file system: staged there, never renamed across devices."""
    import os
    import tempfile

    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system (/dev/shm) on this machine")
    with tempfile.TemporaryDirectory(dir=shm) as elsewhere:
        (tmp_path / "link").symlink_to(elsewhere)
        report(LM_RUN, "--out", tmp_path / "link")
        report(TASK_RUN, "--out", tmp_path / "link")  # replaces the first whole
        assert "accuracy.csv" in names(Path(elsewhere)) and "comparison.csv" not in names(Path(elsewhere))
        assert staging_of(tmp_path / "link").parent == Path(elsewhere).resolve().parent  # on its file system
        assert not staging_of(tmp_path / "link").exists()

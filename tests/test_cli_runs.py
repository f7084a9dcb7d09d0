"""`pe-bench runs`: one line per run with its status, progress, wall time, last validation loss and numerics; the
filters; and what it says of runs that are running, were killed, or cannot be read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pe_bench.cli import app
from pe_bench.runs import Run

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "results" / "default" / "runs"
ALIBI = "alibi-tiny-shakespeare-L64-s0-5140bfbd"


def lines_of(*args: str) -> tuple[int, list[str], str]:
    r = CliRunner().invoke(app, ["runs", *args])
    return r.exit_code, r.output.splitlines(), r.output


def test_every_committed_run_is_one_line_with_its_numbers():
    code, lines, _ = lines_of(str(ROOT / "results" / "default"))
    assert code == 0
    assert lines[0].split() == ["run", "status", "step", "wall", "val", "loss", "numerics"]
    rows = [line for line in lines[1:-1]]
    assert len(rows) == len(list(COMMITTED.iterdir())) == 87
    alibi = next(line for line in rows if line.startswith(ALIBI)).split()
    meta = json.loads((COMMITTED / ALIBI / "meta.json").read_text())
    assert alibi[1:4] == ["done", "1000/1000", "2m41s"]  # train 146.68 s + eval 14.18 s
    assert alibi[4] == f"{meta['final_val_loss']:.4f}" and " ".join(alibi[5:]) == meta["numerics"]
    assert lines[-1] == "87 runs: 87 done"


def test_the_filters_keep_what_they_name_and_a_bad_status_is_one_line():
    code, lines, _ = lines_of(str(COMMITTED), "--scheme", "alibi", "--scheme", "t5")
    assert code == 0 and len(lines) == 1 + 6 + 1
    assert {line.split("-")[0] for line in lines[1:-1]} == {"alibi", "t5"}
    code, lines, _ = lines_of(str(COMMITTED), "--status", "failed")
    assert code == 2 and "no run matches the filters" in lines[-1]
    code, _, out = lines_of(str(COMMITTED), "--status", "bogus")
    assert code == 2 and "--status 'bogus' is not one of: done, running, stale" in out


@pytest.fixture
def copied(tmp_path) -> Run:
    shutil.copytree(COMMITTED / ALIBI, tmp_path / "runs" / ALIBI)
    return Run(tmp_path / "runs" / ALIBI)


def _rewrite(run: Run, **meta) -> None:
    run.meta_path.write_text(json.dumps({**json.loads(run.meta_path.read_text()), **meta}))


def _cut_train_csv(run: Run, keep: int, tail: str = "") -> None:
    lines = run.train_csv.read_text().splitlines(keepends=True)
    run.train_csv.write_text("".join(lines[: keep + 1]) + tail)


def test_a_run_being_trained_shows_its_last_step_and_a_killed_one_is_stale(copied):
    _rewrite(copied, status="running")
    _cut_train_csv(copied, 30, "310,1.9")  # 30 lines, then a line half written
    with copied.lock():  # a process holds the run: it is running, its half-written last line is not an error
        code, lines, _ = lines_of(str(copied.path.parent.parent))
    assert code == 0
    row = lines[1].split()
    assert row[1:3] == ["running", "300/1000"] and row[4] == "2.2036"  # the last val_loss written, at step 250
    code, lines, out = lines_of(str(copied.path.parent.parent))  # nobody holds it: the process was killed
    assert code == 0 and lines[1].split()[:2] == [ALIBI, "unreadable"]
    assert "train.csv line 32 is malformed" in out  # killed mid-line: the line is named, never read in part


def test_a_killed_run_is_stale_and_an_unreadable_one_says_why(copied):
    _rewrite(copied, status="running")
    _cut_train_csv(copied, 30)
    code, lines, out = lines_of(str(copied.path.parent.parent))
    assert code == 0 and lines[1].split()[1:3] == ["stale", "300/1000"]
    assert "1 runs: 1 stale" in out and "resumes it from its checkpoint" in out
    copied.meta_path.write_text("{not json")
    code, lines, out = lines_of(str(copied.path.parent.parent), "--status", "unreadable")
    assert code == 0 and lines[1].split()[:2] == [ALIBI, "unreadable"] and "meta.json is unreadable" in out

"""Tracking where researchers already look (pe_bench.tracking): logger=tensorboard writes event files and
logger=wandb an offline W&B run into the run directory, each holding train.csv's losses step by step and the
evaluation's numbers — read back here with the libraries' own readers. The logger is not part of a run."""

from __future__ import annotations

import csv
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pe_bench.config import ConfigError, compose
from pe_bench.runs import run_name

ROOT = Path(__file__).resolve().parents[1]
TINY = ["train=smoke", "eval=smoke", "model.n_layers=2", "model.d_model=32", "model.n_heads=2", "train.steps=20",
        "train.log_interval=5", "train.val_interval=10"]


def trained(tmp_path: Path, logger: str, *more: str) -> Path:
    r = subprocess.run([sys.executable, "-m", "pe_bench", "train", f"logger={logger}", *TINY, *more,
                        f"results_dir={tmp_path}", "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "WANDB_SILENT": "true"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    [run] = (tmp_path / "runs").iterdir()
    return run


def train_csv(run: Path) -> list[dict[str, str]]:
    with (run / "train.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_tensorboard_event_files_hold_the_training_curve_and_the_evaluation(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = trained(tmp_path, "tensorboard")
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    rows = train_csv(run)
    loss = [(e.step, round(e.value, 5)) for e in events.Scalars("train/loss")]
    assert loss == [(int(r["step"]), float(r["loss"])) for r in rows]  # every train.csv row, same numbers
    val = [(e.step, round(e.value, 5)) for e in events.Scalars("val/loss")]
    assert val == [(int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"]] and len(val) == 2
    assert "eval/nonoverlapping/ppl@32" in events.Tags()["scalars"]  # alike in every run: curves overlay


def wandb_records(run: Path) -> list:
    """The records of an offline W&B run file (a LevelDB-style log of wandb's protobuf Records: 32 KiB blocks,
    7-byte headers; the file opens with a 7-byte W&B header)."""
    from wandb.proto import wandb_internal_pb2

    [path] = (run / "wandb").glob("offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    out, i, part = [], 7, b""
    while i + 7 <= len(data):
        if i % 32768 + 7 > 32768:  # a block's trailer
            i += 32768 - i % 32768
            continue
        _, n, kind = struct.unpack("<IHB", data[i:i + 7])
        if n == 0 and kind == 0:
            break
        part += data[i + 7:i + 7 + n]
        i += 7 + n
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            out.append(record)
            part = b""
    return out


def key(item) -> str:
    """An item's key: W&B stores a key with a slash as its parts (nested_key)."""
    return item.key or "/".join(item.nested_key)


def test_an_offline_wandb_run_holds_the_training_curve_the_config_and_the_evaluation(tmp_path):
    run = trained(tmp_path, "wandb", "logger.group=my-sweep")
    records = wandb_records(run)
    history = [(r.history.step.num, {key(i): float(i.value_json) for i in r.history.item})
               for r in records if r.WhichOneof("record_type") == "history"]
    rows = train_csv(run)
    assert [(step, h["train/loss"]) for step, h in history] == [(int(r["step"]), float(r["loss"])) for r in rows]
    summary = {key(i) for r in records if r.WhichOneof("record_type") == "summary" for i in r.summary.update}
    assert "eval/nonoverlapping/ppl@32" in summary
    [run_record] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run_record.display_name == run.name and run_record.project == "pe-bench"
    assert run_record.run_group == "my-sweep"
    assert any(key(i) == "scheme" for i in run_record.config.update)


def test_the_logger_is_not_part_of_a_run_and_its_options_are_checked():
    names = {run_name(compose(["scheme=rope", f"logger={lg}"])) for lg in ("csv", "tensorboard", "wandb")}
    assert len(names) == 1  # the same run, however it is tracked
    with pytest.raises(ConfigError, match="logger.project=x is not read by logger=csv; it is an option of logger=wandb"):
        compose(["logger.project=x"])
    with pytest.raises(ConfigError, match="logger.name='nope' is not one of: csv, tensorboard, wandb"):
        compose(["logger.name=nope"])


def test_a_logger_whose_package_is_missing_is_refused_before_anything_is_created(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r"logger=wandb needs the wandb package: pip install 'pe-bench\[wandb\]'"):
        compose(["logger=wandb"])


def test_tracker_keys_are_alike_in_every_run_and_variants_say_which():
    from pe_bench.experiment import final_metrics

    rows = [{"scheme": "rope", "mode": "sliding", "L_eval": 64, "ppl": "5.5", "status": "ok"},
            {"scheme": "rope+yarn×8", "mode": "sliding", "L_eval": 64, "ppl": "5.1", "status": "ok"},
            {"scheme": "rope", "mode": "sliding", "L_eval": 128, "ppl": "nan", "status": "nonfinite"}]
    assert final_metrics(rows, "rope", "lm") == {"eval/sliding/ppl@64": 5.5, "eval/sliding/ppl@64/rope+yarn×8": 5.1}
    acc = [{"scheme": "alibi", "task": "flipflop", "L_eval": 32, "depth": "", "exact_match": "0.9", "status": "ok"},
           {"scheme": "alibi", "task": "flipflop[sparse]", "L_eval": 32, "depth": "", "exact_match": "0.7",
            "status": "ok"}]
    assert final_metrics(acc, "alibi", "flipflop") == {"eval/exact_match@32": 0.9,
                                                        "eval/exact_match@32/flipflop[sparse]": 0.7}


def test_a_sweep_files_its_runs_under_its_name():
    from pe_bench.sweep import expand, load_sweep

    [point] = expand(load_sweep("paper"), ["scheme=rope"])
    assert compose(point).logger.group == "paper"

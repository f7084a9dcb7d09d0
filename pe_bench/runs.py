"""Run directories: naming, atomic writes, meta data and status.

results/runs/<scheme>-<model>-<data>-L<L>-s<seed>-<hash>/
    config.yaml   the resolved config          train.csv      step, loss, lr, tokens/s, val_loss
    meta.json     versions, device, status     eval.csv       one row per length × mode × scheme variant
    checkpoint.pt model, optimizer, step, cfg  positions.csv  per-position loss curves
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import os
import platform
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from pe_bench.config import Config, to_yaml

CHECKPOINT = "checkpoint.pt"
LOCK = ".lock"
BOOKKEEPING = ("log_interval", "val_interval", "val_batches", "ckpt_interval", "threads")


def run_name(cfg: Config) -> str:
    """Readable prefix plus a hash of everything that changes the trained model (not eval/results/cache)."""
    d = asdict(cfg)
    for k in ("eval", "results_dir", "cache_dir"):
        d.pop(k)
    d["scheme"] = {k: v for k, v in d["scheme"].items() if k != "eval_variants"}
    for k in BOOKKEEPING:  # how often to log/validate/checkpoint does not change the trained weights
        d["train"].pop(k)
    h = hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{cfg.scheme['name']}-{cfg.model.name}-{cfg.data.name}-L{cfg.train.seq_len}-s{cfg.seed}-{h}"


def run_dir_for(cfg: Config) -> Path:
    return Path(cfg.results_dir) / "runs" / run_name(cfg)


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same directory, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def git_sha() -> str | None:
    src = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


class RunBusy(RuntimeError):
    """The run directory is locked by another process (a parallel sweep or a Slurm job is training it)."""


class Run:
    """One run directory and its files."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.config = self.path / "config.yaml"
        self.meta_path = self.path / "meta.json"
        self.train_csv = self.path / "train.csv"
        self.eval_csv = self.path / "eval.csv"
        self.positions_csv = self.path / "positions.csv"
        self.checkpoint = self.path / CHECKPOINT

    def create(self, cfg: Config) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.config, to_yaml(cfg))

    def meta(self) -> dict[str, Any]:
        return json.loads(self.meta_path.read_text()) if self.meta_path.exists() else {}

    def update_meta(self, **fields: Any) -> dict[str, Any]:
        meta = self.meta()
        meta.update(fields)
        meta["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        atomic_write_text(self.meta_path, json.dumps(meta, indent=2, default=str) + "\n")
        return meta

    @property
    def status(self) -> str:
        return self.meta().get("status", "new")

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive use of this run directory by one process (an advisory file lock, released when the process
        ends however it ends). Another process already training it → RunBusy."""
        self.path.mkdir(parents=True, exist_ok=True)
        with (self.path / LOCK).open("a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunBusy(f"{self.path} is being trained by another process") from None
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def is_locked(self) -> bool:
        """True while another process holds the lock (this one does not take it)."""
        if not (self.path / LOCK).exists():
            return False
        with (self.path / LOCK).open("a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
            return False

    @staticmethod
    def environment(device: torch.device) -> dict[str, Any]:
        from pe_bench import __version__

        return {"pe_bench": __version__, "git_sha": git_sha(), "torch": torch.__version__,
                "python": platform.python_version(), "device": device_name(device), "host": platform.node()}

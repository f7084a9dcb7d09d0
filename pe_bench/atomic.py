"""Atomic file writes: a reader never sees half a file, a failure (a full disk, a signal) leaves the old file whole
and no temporary file behind. Every file pe-bench writes goes through here (run directories, reports, caches)."""

from __future__ import annotations

import csv
import hashlib
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` that replaces it on success and is removed on any failure (disk full, a
    signal): a reader never sees half a file, and no temporary file is left behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_for(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.filename is None:  # a failed write names no file: name the one being replaced
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same directory, then rename."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(data)


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
    """torch.save through memory, then one plain write: a full disk is an OSError (ENOSPC) naming the file, not
    torch's zip-writer RuntimeError."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

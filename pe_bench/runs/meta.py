"""meta.json, a run's record: its status, where it was made, and its figures — one typed, versioned dataclass.

Every other module reads and writes meta.json through :class:`RunMeta`'s fields (``meta.status``,
``meta.train_seconds``), never its keys; keys this version does not know are kept as they are, so a file written by a
newer pe-bench survives an update by an older one. A field holding a value of the wrong type (``"train_seconds":
"12s"``) is one RunFileError line naming the file and the key.
"""

from __future__ import annotations

import json
import re
import time
import typing
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from pe_bench.errors import ConfigError

SCHEMA = 1  # meta.json's version; files without the key are version 1 (written before it was recorded)
ENVIRONMENT = ("device", "torch", "python", "pe_bench", "git_sha")  # where a run was made, as reports show it
SUMMARY = ("status", "scheme", "numerics", "train_seconds", "eval_seconds", "final_train_loss", "final_val_loss",
           "n_params", "plugins", *ENVIRONMENT, "git_modified")  # what a report's results.json keeps of a run


class RunFileError(ConfigError):
    """A run directory's file cannot be read (corrupt, truncated, foreign); one line naming the file."""


class Status(StrEnum):
    """What meta.json says of a run. A run that says RUNNING but whose lock nobody holds was killed (``stale``:
    see pe_bench.runs.state)."""

    NEW = "new"  # no meta.json yet
    QUEUED = "queued"  # handed to a Slurm array task
    RUNNING = "running"  # a process trains (and then evaluates) it
    INTERRUPTED = "interrupted"  # stopped by a signal at a checkpoint: resumable
    FAILED = "failed"  # an error; retried by the next train or sweep
    DIVERGED = "diverged"  # a non-finite loss: the same config diverges again, so never retried
    DONE = "done"  # trained and evaluated: never trained again


_AGAIN = {Status.QUEUED, Status.RUNNING, Status.FAILED}  # a run that is not finished may be started or fail again
ALLOWED: dict[Status, set[Status]] = {  # status → the statuses it may become
    Status.NEW: _AGAIN,
    Status.QUEUED: _AGAIN | {Status.INTERRUPTED, Status.DIVERGED},
    Status.RUNNING: _AGAIN | {Status.INTERRUPTED, Status.DIVERGED, Status.DONE},
    Status.INTERRUPTED: _AGAIN | {Status.INTERRUPTED},
    Status.FAILED: _AGAIN,
    Status.DIVERGED: {Status.DIVERGED},
    Status.DONE: {Status.DONE},
}


@dataclass
class RunMeta:
    """meta.json's fields. Times are seconds; ``wall`` is the one run time pe-bench shows."""

    status: Status = Status.NEW
    schema: int | None = None
    run_name: str | None = None
    scheme: str | None = None
    started: str | None = None
    updated: str | None = None
    error: str | None = None
    processes: int | None = None
    data_fingerprint: str | None = None
    pe_bench: str | None = None
    git_sha: str | None = None
    git_modified: bool | None = None
    torch: str | None = None
    python: str | None = None
    device: str | None = None
    host: str | None = None
    numerics: str | None = None
    attention_backend: str | None = None
    eval_attention_backend: str | None = None
    precision: str | None = None
    compiled: bool | None = None
    plugins: dict[str, str] | None = None  # "scheme tilt" / "task x" → where the plugin came from
    plugin_sha256: dict[str, str] | None = None  # the same keys → the sha256 of the plugin's file when trained
    parent: dict[str, Any] | None = None  # a fine-tune's: {run, path, steps_before}
    # a pretrained checkpoint's evaluation (pe_bench.pretrained): {path, model_type, context, config_sha256,
    # weights_sha256, transformers}
    pretrained: dict[str, Any] | None = None
    slurm_job: str | None = None
    slurm_log: str | None = None
    checkpoint_step: int | None = None
    resumed_from: list[int] | None = None  # the steps the run was resumed at
    diverged_step: int | None = None
    diverged_what: str | None = None
    diverged_value: str | None = None
    train_seconds: float | None = None  # training, summed over the sessions of a resumed run
    eval_seconds: float | None = None
    wall_seconds: float | None = None  # the last session's, start to finish (data, training, evaluation)
    train_tokens_per_s: float | None = None
    final_train_loss: float | None = None
    final_val_loss: float | None = None
    n_params: int | None = None
    tokens_seen: int | None = None
    eval_csv_sha256: str | None = None
    accuracy_csv_sha256: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as they are
    order: list[str] = field(default_factory=list)  # the file's keys in their order (the keys written back)

    @property
    def wall(self) -> float | None:
        """The run's time, the one every listing shows: the last session's start to finish, or for a run resumed
        across sessions its training summed over them plus its evaluation."""
        if self.resumed_from or self.wall_seconds is None:
            if self.train_seconds is None:
                return self.wall_seconds
            return self.train_seconds + (self.eval_seconds or 0.0)
        return self.wall_seconds

    def summary(self) -> dict[str, Any]:
        """The SUMMARY fields the file records (a report's results.json keeps these of each run)."""
        data = self.to_json()
        return {k: data[k] for k in SUMMARY if k in data}

    def shown(self, key: str) -> str:
        """A field as a report shows it: its value as recorded, '?' when the file lacks it."""
        return str(self.to_json().get(key, "?"))

    def with_updates(self, path: Path, **changes: Any) -> RunMeta:
        """A copy with ``changes`` (known fields only) and ``updated`` set; a status change must be allowed."""
        known = {f.name: f for f in fields(self) if f.name not in ("extra", "order")}
        bad = sorted(set(changes) - set(known))
        if bad:
            raise TypeError(f"meta.json has no field {bad[0]!r} (pe_bench.runs.meta.RunMeta)")
        if "status" in changes:
            changes["status"] = Status(changes["status"])
            if changes["status"] not in ALLOWED[self.status]:
                raise RunFileError(f"{path}: a {self.status} run cannot become {changes['status']}")
        changes["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        data = self.to_json()
        for k, v in changes.items():
            data[k] = v
        if "schema" not in data:
            data["schema"] = SCHEMA
        return RunMeta.from_json(data, path)

    def to_json(self) -> dict[str, Any]:
        """meta.json's object: the file's keys in their order, then the keys set since."""
        out = {k: getattr(self, k) if k not in self.extra else self.extra[k] for k in self.order}
        return {k: (v.value if isinstance(v, Status) else v) for k, v in out.items()}

    @classmethod
    def from_json(cls, data: Any, path: Path) -> RunMeta:
        """A RunMeta from meta.json's object; a wrong-typed known key is a RunFileError naming it."""
        if not isinstance(data, dict):
            raise RunFileError(f"{path} is not a JSON object; move the run directory away or delete it")
        hints = typing.get_type_hints(cls)
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("extra", "order") or key not in hints:
                extra[key] = value
                continue
            if not _fits(value, hints[key]):
                raise RunFileError(f"{path}: {key} is {value!r}, not {_type_word(hints[key])}; fix the value or move "
                                   "the run directory away")
            known[key] = Status(value) if key == "status" else value
        if (data.get("schema") or SCHEMA) > SCHEMA:
            raise RunFileError(f"{path} was written by a newer pe-bench (meta.json schema {data['schema']}); update "
                               "pe-bench to read it")
        return cls(**known, extra=extra, order=list(data))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, default=str) + "\n"


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value has the type a field's annotation names (None where the annotation allows it; a float
    field takes ints)."""
    if value is None:
        return type(None) in typing.get_args(hint)
    base = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    kind = typing.get_origin(base[0]) or base[0]
    if kind is Status:
        return value in {s.value for s in Status}
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is list and isinstance(value, list):
        item = typing.get_args(base[0])[0]
        return all(_fits(v, item) for v in value)
    return isinstance(value, kind)


def _type_word(hint: Any) -> str:
    base = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    kind = typing.get_origin(base[0]) or base[0]
    words = {float: "a number", int: "an integer", str: "a string", bool: "true or false", list: "a list",
             dict: "an object", Status: f"one of {', '.join(s.value for s in Status)}"}
    return words.get(kind, str(kind))


def numerics_of(meta: RunMeta) -> str:
    """meta.json's numerics; for runs recorded before it existed, rebuilt from its torch and device fields (the
    instruction set was not recorded then)."""
    if meta.numerics:
        return meta.numerics
    device = meta.device or "?"
    m = re.match(r"cpu \(.*, (\d+) threads\)$", device)
    return f"torch {meta.torch or '?'}, {f'cpu, {m.group(1)} threads' if m else device}"

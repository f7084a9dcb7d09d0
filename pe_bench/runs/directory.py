"""A run directory and its files.

results/runs/<name>/ (the name: pe_bench.runs.naming)
    config.yaml   the resolved config          train.csv      step, loss, lr, tokens/s, val_loss
    meta.json     status, provenance, figures  eval.csv       one row per length × mode × scheme variant
                  (pe_bench.runs.meta)         positions.csv  per-position loss curves
    checkpoint.pt model, optimizer, step, cfg  context.csv    loss past L against [L/2, L) (context use)
                                               repetition.csv copy gain of a passage d tokens back
                                               accuracy.csv   a task run's accuracy rows (instead of eval.csv)
"""

from __future__ import annotations

import copy
import errno
import fcntl
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pe_bench import schemes, tasks
from pe_bench.atomic import atomic_write_text
from pe_bench.config import Config, ConfigError, from_yaml_text, to_yaml, validate
from pe_bench.runs.meta import RunFileError, RunMeta, Status
from pe_bench.runs.naming import checkpoint_identity, digest, identity, run_dir_for
from pe_bench.runs.provenance import environment

if TYPE_CHECKING:
    import torch

CHECKPOINT = "checkpoint.pt"
LOCK = ".lock"
ANALYSIS_META = "analysis.json"  # the step an analysis was made at


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


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
        self.context_csv = self.path / "context.csv"
        self.repetition_csv = self.path / "repetition.csv"
        self.accuracy_csv = self.path / "accuracy.csv"
        self.accuracy_dev_csv = self.path / "accuracy_dev.csv"  # eval.heldout=dev: development examples, never reported
        self.checkpoint = self.path / CHECKPOINT
        self._parsed: dict[str, Any] = {}  # what was read of config.yaml, by reader, with the text it was read from

    @classmethod
    def for_config(cls, cfg: Config) -> Run:
        """The run directory of a config (``run_dir_for``)."""
        return cls(run_dir_for(cfg))

    def create(self, cfg: Config) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.config, to_yaml(cfg))

    def meta(self) -> RunMeta:
        """meta.json as a RunMeta (an empty one before the run is created); unreadable → RunFileError."""
        if not self.meta_path.exists():
            return RunMeta()
        try:
            data = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RunFileError(f"{self.meta_path} is unreadable ({_first_line(e)}); move the run directory "
                               "away or delete it to train this point again") from None
        return RunMeta.from_json(data, self.meta_path)

    def legacy_options(self) -> dict[str, Any]:
        """The options of the run's scheme that its config.yaml lacks and that are read with the value the run was
        made with (``Scheme.legacy_options``): option → value, in the scheme's order; {} for most runs."""
        import yaml

        try:
            text = self.config.read_text(encoding="utf-8")
            if "legacy" not in self._parsed or self._parsed["legacy"][0] != text:
                raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
                scheme = raw.get("scheme") or {}
                lacking = schemes.lacking_legacy_options(scheme) if isinstance(scheme, dict) else {}
                self._parsed["legacy"] = text, lacking
        except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError) as e:
            raise RunFileError(f"{self.config} is unreadable ({_first_line(e)}); move the run directory away "
                               "or delete it") from None
        return dict(self._parsed["legacy"][1])

    def load_config(self) -> Config:
        """The run's saved config; an unreadable or invalid file is one RunFileError line naming it. The file is
        read on every call and parsed again only when its text changed (a report asks a run's config many times)."""
        try:
            text = self.config.read_text(encoding="utf-8")
            if "config" not in self._parsed or self._parsed["config"][0] != text:
                self._parsed["config"] = text, from_yaml_text(text)
            return copy.deepcopy(self._parsed["config"][1])
        except ConfigError as e:
            missing = self._missing_plugins()
            if missing:
                raise RunFileError(f"{self.path.name} was made with {missing}, which this pe-bench does not have: add "
                                   "its directory with --path (or PE_BENCH_PATH), or install its package") from None
            raise RunFileError(f"{self.config} is not a valid pe-bench config ({e})") from None
        except Exception as e:  # noqa: BLE001 - YAML/OS errors of many types
            raise RunFileError(f"{self.config} is unreadable ({_first_line(e)}); move the run directory away "
                               "or delete it") from None

    def _missing_plugins(self) -> str:
        """The plugins the run was made with (meta.json's ``plugins``) that are not registered now, as words."""
        try:
            made_with = self.meta().plugins or {}
        except RunFileError:
            return ""
        have = {"scheme": set(schemes.catalog()), "task": set(tasks.names())}
        gone = [f"the {what} plugin {name!r} ({origin})" for key, origin in made_with.items()
                for what, _, name in [str(key).partition(" ")] if name not in have.get(what, set())]
        return " and ".join(gone)

    def load_checkpoint(self, device: torch.device | str = "cpu", mmap: bool = False) -> dict[str, Any]:
        """The checkpoint's dict; ``mmap``: its tensors are mapped from the file, read only when used (a check of
        its identity and data costs no copy of the weights)."""
        if not self.checkpoint.exists():
            raise RunFileError(f"{self.checkpoint} is missing: the run's weights are gone, so it cannot be evaluated "
                               "again (its existing rows still report); train it again in a new results_dir")
        try:
            import torch

            ckpt = torch.load(self.checkpoint, map_location=device, weights_only=False, mmap=mmap)
        except Exception as e:  # noqa: BLE001 - pickle/zip/OS errors of many types
            raise RunFileError(f"{self.checkpoint} is unreadable ({_first_line(e)}); delete it to train the run "
                               "again from the start") from None
        if not isinstance(ckpt, dict) or not {"model", "step", "config"} <= set(ckpt):
            raise RunFileError(f"{self.checkpoint} is not a pe-bench checkpoint; delete it to train the run again")
        return ckpt

    def clean_stale(self) -> list[Path]:
        """Remove temporary files left by killed processes (call with the lock held: no one else writes here)."""
        stale = [p for p in self.path.glob(".*.tmp") if p.is_file()]
        for p in stale:
            p.unlink(missing_ok=True)
        return stale

    def retire_analyses(self) -> list[Path]:
        """Analyses (``pe-bench analyze``: analysis*/ with attention.csv) made from an earlier checkpoint, renamed
        ``<dir>.stale-step<N>`` before training moves the run on: the default place never holds statistics of
        weights the run no longer has. Returns the new paths."""
        moved = []
        for d in sorted(p for p in self.path.glob("analysis*") if p.is_dir() and ".stale-" not in p.name):
            if not (d / "attention.csv").exists():
                continue
            try:
                step = json.loads((d / ANALYSIS_META).read_text(encoding="utf-8"))["step"]
            except (OSError, ValueError, KeyError, TypeError):
                step = "unknown"  # made before analyses recorded their step: still from an earlier checkpoint
            target = d.with_name(f"{d.name}.stale-step{step}")
            shutil.rmtree(target, ignore_errors=True)
            d.rename(target)
            moved.append(target)
        return moved

    def update_meta(self, **fields: Any) -> RunMeta:
        """Set RunMeta fields in meta.json (a status change must be one Status allows); returns the new record."""
        meta = self.meta().with_updates(self.meta_path, **fields)
        text = meta.dumps()
        try:
            atomic_write_text(self.meta_path, text)
        except OSError as e:
            if e.errno != errno.ENOSPC or not self.meta_path.exists():
                raise
            # A full disk has no room for a second copy: overwrite the small file in place (its block is already
            # allocated), so that the status still says why the run failed.
            with self.meta_path.open("r+", encoding="utf-8") as f:
                f.write(text)
                f.truncate()
        return meta

    def is_done(self) -> bool:
        """Finished: never trained again (even if its checkpoint was deleted to save space)."""
        return self.status == Status.DONE and (self.eval_csv.exists() or self.accuracy_csv.exists())

    def is_trained(self) -> bool:
        """Trained to the end (meta.json says done), whether or not its evaluation rows are still there: never
        trained again, only evaluated."""
        return self.status == Status.DONE

    @property
    def status(self) -> Status:
        return self.meta().status

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive use of this run directory by one process (an advisory file lock, released when the process
        ends however it ends). Another process already training it → RunBusy."""
        self.path.mkdir(parents=True, exist_ok=True)
        with (self.path / LOCK).open("a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunBusy(f"{self.path} is being trained by another process (or evaluated)") from None
            try:
                self.clean_stale()
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
        return environment(device)
def check_checkpoint(run: Run, ckpt: dict, cfg: Config, corpus: Any = None) -> None:
    """Refuse a checkpoint that belongs to another configuration (copied in, or a config.yaml edited by hand), or
    that was trained on other data than the corpus now behind the same config (a local file replaced). ``corpus``:
    what the run trains on; its ``fingerprint``, when it has one, is compared with the checkpoint's."""
    saved = ckpt.get("identity") or digest(identity(_config_from(ckpt)))
    if saved != checkpoint_identity(cfg):
        raise RunFileError(f"{run.checkpoint} belongs to another configuration (identity {saved}, this run's "
                           f"{checkpoint_identity(cfg)}): it was copied from another run or the config changed; "
                           "delete it or put it back in its own run directory")
    now = getattr(corpus, "fingerprint", None)
    if ckpt.get("data") and now and ckpt["data"] != now:
        raise RunFileError(f"{run.checkpoint} was trained on other data than {cfg.data.name} holds now (data "
                           f"fingerprint {ckpt['data']} → {now}: a data file changed); restore the file, or move "
                           "the run directory away to train on the new data")


def _config_from(ckpt: dict) -> Config:
    saved = dict(ckpt["config"])
    if "scheme" in saved:  # options added since are read with the value the run was made with
        saved["scheme"] = schemes.with_legacy_options(saved["scheme"])
    return validate(saved)

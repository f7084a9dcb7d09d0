"""Run directories: naming, atomic writes, meta data and status.

results/runs/<scheme>-<model>-<data>-L<L>-s<seed>-<hash>/
    config.yaml   the resolved config          train.csv      step, loss, lr, tokens/s, val_loss
    meta.json     versions, device, status     eval.csv       one row per length × mode × scheme variant
    checkpoint.pt model, optimizer, step, cfg  positions.csv  per-position loss curves
                                               context.csv    loss past L against [L/2, L) (context use)
                                               accuracy.csv   a task run's accuracy rows (instead of eval.csv)
A task run (task != lm) is named <task>-<scheme>-<model>-L<L>-s<seed>-<hash>; a fine-tune
<parent's name without its hash>-ft<steps>-L<L>[-pose<target>]-<hash>.
"""

from __future__ import annotations

import copy
import csv
import errno
import fcntl
import functools
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pe_bench import schemes, tasks
from pe_bench.config import Config, ConfigError, from_yaml, preset_path, to_yaml, validate

if TYPE_CHECKING:
    import torch

CHECKPOINT = "checkpoint.pt"
LOCK = ".lock"
ANALYSIS_META = "analysis.json"  # the step an analysis was made at
BOOKKEEPING = ("log_interval", "val_interval", "val_batches", "ckpt_interval", "threads")


def identity(cfg: Config, seed: bool = True) -> dict[str, Any]:
    """Everything that changes the trained model — not evaluation, paths or bookkeeping — as plain data.
    ``seed=False`` leaves the seed out: what seed replicas of one configuration share."""
    d = asdict(cfg)
    for k in ("eval", "attention", "logger", "results_dir", "cache_dir") + (() if seed else ("seed",)):
        d.pop(k)
    d["scheme"] = schemes.without_legacy_options(
        _without_late_defaults({k: v for k, v in d["scheme"].items() if k != "eval_variants"}))
    d["task"] = tasks.identity(cfg.task)
    if d["task"] is None:  # language modelling: the identity it had before tasks existed (same run names)
        d.pop("task")
    if not tasks.reads_corpus(cfg.task):
        d.pop("data")
    for k in BOOKKEEPING:  # how often to log/validate/checkpoint does not change the trained weights
        d["train"].pop(k)
    if not cfg.model.qk_norm:  # keys added later leave the identity (and run names) of runs without them alone
        d["model"].pop("qk_norm")
    if cfg.model.init == "gpt2":
        d["model"].pop("init")
    if not cfg.train.pose_target:
        d["train"].pop("pose_target")
        d["train"].pop("pose_chunks")
    ft = d.pop("finetune")
    if cfg.finetune.from_run:  # a fine-tune: its parent by name (where it lies is not part of it), or without seed
        ft.pop("from_run")
        ft.pop("parent" if not seed else "parent_config")
        if cfg.finetune.trainable == "all":
            ft.pop("trainable")
        d["finetune"] = ft
    return d


def _without_late_defaults(scheme: dict[str, Any]) -> dict[str, Any]:
    """The scheme's options without its ``late_options`` (pe_bench.schemes.base.Scheme) that hold the defaults of
    configs/scheme/<name>.yaml: options added after runs of the scheme were named, so those runs keep their names.
    Read from the scheme's source (no torch: `--cfg` prints the run directory without importing it)."""
    entry = schemes.catalog().get(scheme.get("name"))
    late = entry.late_options if entry else ()
    if not late:
        return scheme
    out = copy.deepcopy(scheme)
    for dotted in late:
        *path, leaf = dotted.split(".")
        default: Any = _scheme_defaults(scheme["name"])
        where: Any = out
        for part in path:
            default = default.get(part, {}) if isinstance(default, dict) else {}
            where = where.get(part) if isinstance(where, dict) else None
        if isinstance(where, dict) and isinstance(default, dict) and leaf in where and leaf in default \
                and where[leaf] == default[leaf]:
            del where[leaf]
    return out


@functools.lru_cache(maxsize=None)
def _scheme_defaults(name: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(preset_path("scheme", name).read_text())


def digest(d: Any, n: int = 8) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:n]


def run_name(cfg: Config) -> str:
    """Readable prefix plus a hash of everything that changes the trained model (not eval/results/cache)."""
    h = digest(identity(cfg))
    if cfg.finetune.from_run:  # <parent's name without its hash>-ft<steps>-L<L>[-pose<target>]-<hash>
        pose = f"-pose{cfg.train.pose_target}" if cfg.train.pose_target else ""
        parent = (cfg.finetune.parent or "run").rsplit("-", 1)[0]
        return f"{parent}-ft{cfg.train.steps}-L{cfg.train.seq_len}{pose}-{h}"
    head = tasks.run_prefix(cfg.task, cfg.scheme["name"], cfg.model.name, cfg.data.name)
    return f"{head}-L{cfg.train.seq_len}-s{cfg.seed}-{h}"


class RunFileError(ConfigError):
    """A run directory's file cannot be read (corrupt, truncated, foreign); one line naming the file."""


def run_dir_for(cfg: Config) -> Path:
    """The one place a run directory is derived from a config: <results_dir>/runs/<run_name>."""
    return Path(cfg.results_dir) / "runs" / run_name(cfg)


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def _replacing(path: Path) -> Iterator[Path]:
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
    with _replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


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
    with _replacing(path) as tmp:
        tmp.write_bytes(buf.getvalue())


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _git(src: Path, *args: str) -> str | None:
    """``git -C src args``'s output, or None outside a git checkout (or without git)."""
    try:
        out = subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_sha(src: Path | None = None) -> str | None:
    """The commit checked out where pe-bench runs from (``src``: a folder of the checkout), or None."""
    out = _git(src or Path(__file__).resolve().parent, "rev-parse", "HEAD")
    return out.strip() or None if out is not None else None


CODE = (":/pe_bench", ":/configs")  # what a run's numbers come from (results/ is tracked too, and rewritten by runs)


def git_modified(src: Path | None = None) -> bool | None:
    """Whether the tracked code (CODE) differs from that commit: a run made from modified code does not match its
    git_sha (None outside a git checkout)."""
    out = _git(src or Path(__file__).resolve().parent, "status", "--porcelain", "--untracked-files=no", "--", *CODE)
    return None if out is None else bool(out.strip())


def numerics(device: torch.device) -> str:
    """What a run's numbers depend on beyond its config (docs/trust.md, "Determinism"): the torch version, the device
    (the GPU model) and, on the CPU, the kernels' instruction set and the number of threads (reductions are split
    by thread). Recorded in meta.json;
    runs that differ in it are never one table row."""
    import torch

    if device.type == "cuda":
        return f"torch {torch.__version__}, {torch.cuda.get_device_name(device)}"
    return f"torch {torch.__version__}, cpu {cpu_isa()}, {torch.get_num_threads()} threads"


ISA_CAPS = ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")  # MKL's and oneDNN's own instruction-set caps


def cpu_isa() -> str:
    """The instruction set torch's CPU kernels dispatch to (AVX2, AVX512, ...). ATEN_CPU_CAPABILITY caps torch's own
    kernels only: unless MKL and oneDNN are capped alike, their matrix products keep the CPU's widest and the
    numbers are another CPU's, so the name says so (docs/trust.md, "Determinism")."""
    import torch

    isa = torch.backends.cpu.get_cpu_capability()
    cap = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    if cap and not all(os.environ.get(k, "").lower().startswith(cap) for k in ISA_CAPS):
        return f"{isa} (MKL, oneDNN not capped)"
    return isa


def numerics_of(meta: dict[str, Any]) -> str:
    """meta.json's numerics; for runs recorded before it existed, rebuilt from its torch and device fields (the
    instruction set was not recorded then)."""
    if meta.get("numerics"):
        return str(meta["numerics"])
    device = str(meta.get("device", "?"))
    m = re.match(r"cpu \(.*, (\d+) threads\)$", device)
    return f"torch {meta.get('torch', '?')}, {f'cpu, {m.group(1)} threads' if m else device}"


def device_name(device: torch.device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


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
        self.accuracy_csv = self.path / "accuracy.csv"
        self.accuracy_dev_csv = self.path / "accuracy_dev.csv"  # eval.heldout=dev: development examples, never reported
        self.checkpoint = self.path / CHECKPOINT

    @classmethod
    def for_config(cls, cfg: Config) -> Run:
        """The run directory of a config (``run_dir_for``)."""
        return cls(run_dir_for(cfg))

    def create(self, cfg: Config) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.config, to_yaml(cfg))

    def meta(self) -> dict[str, Any]:
        if not self.meta_path.exists():
            return {}
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RunFileError(f"{self.meta_path} is unreadable ({_first_line(e)}); move the run directory "
                               "away or delete it to train this point again") from None
        if not isinstance(meta, dict):
            raise RunFileError(f"{self.meta_path} is not a JSON object; move the run directory away or delete it")
        return meta

    def legacy_options(self) -> dict[str, Any]:
        """The options of the run's scheme that its config.yaml lacks and that are read with the value the run was
        made with (``Scheme.legacy_options``): option → value, in the scheme's order; {} for most runs."""
        import yaml

        try:
            scheme = (yaml.safe_load(self.config.read_text(encoding="utf-8")) or {}).get("scheme") or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError) as e:
            raise RunFileError(f"{self.config} is unreadable ({_first_line(e)}); move the run directory away "
                               "or delete it") from None
        return schemes.lacking_legacy_options(scheme) if isinstance(scheme, dict) else {}

    def load_config(self) -> Config:
        """The run's saved config; an unreadable or invalid file is one RunFileError line naming it."""
        try:
            return from_yaml(self.config)
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
            made_with = self.meta().get("plugins") or {}
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

    def update_meta(self, **fields: Any) -> dict[str, Any]:
        meta = self.meta()
        meta.update(fields)
        meta["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        text = json.dumps(meta, indent=2, default=str) + "\n"
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
        return self.status == "done" and (self.eval_csv.exists() or self.accuracy_csv.exists())

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
        import torch

        from pe_bench import __version__

        return {"pe_bench": __version__, "git_sha": git_sha(), "git_modified": git_modified(),
                "torch": torch.__version__, "python": platform.python_version(), "device": device_name(device),
                "host": platform.node(), "numerics": numerics(device)}


def checkpoint_identity(cfg: Config) -> str:
    """The hash of everything that defines the trained model (the run name's hash): stored in every checkpoint and
    checked whenever one is loaded, so a checkpoint is never evaluated or resumed as another run."""
    return digest(identity(cfg))


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

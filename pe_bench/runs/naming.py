"""A run's name and identity: what the name of its directory is made of.

results/runs/<scheme>-<model>-<data>-L<L>-s<seed>-<hash>/; a task run (task != lm)
<task>-<scheme>-<model>-L<L>-s<seed>-<hash>; a fine-tune <parent's name without its hash>-ft<steps>-L<L>[-pose<target>]-<hash>.
The hash is of :func:`identity`: everything that changes the trained model.

The one rule of names: **a run's name never changes.** A setting added to pe-bench after runs were named enters the
identity only where it differs from the value those runs were made with (an absent key, a scheme's
``late_options``, a task's identity without its new options), so every committed run directory keeps its name and
its numbers are found again (tests/test_identity.py holds every committed run's name).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pe_bench import schemes, tasks
from pe_bench.config import Config, preset_path

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


def finetune_of(name: str) -> str | None:
    """The name stem a fine-tune's run name starts with (its parent's name without the hash), or None for a run
    that is not a fine-tune."""
    head, ft, _ = name.partition("-ft")
    return head if ft and _.split("-")[0].isdigit() else None


def run_dir_for(cfg: Config) -> Path:
    """The one place a run directory is derived from a config: <results_dir>/runs/<run_name>."""
    return Path(cfg.results_dir) / "runs" / run_name(cfg)


def checkpoint_identity(cfg: Config) -> str:
    """The hash of everything that defines the trained model (the run name's hash): stored in every checkpoint and
    checked whenever one is loaded, so a checkpoint is never evaluated or resumed as another run."""
    return digest(identity(cfg))

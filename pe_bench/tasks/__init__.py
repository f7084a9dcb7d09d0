"""Tasks: what a run trains on and how it is scored. Every module in this package defines its task (a ``Task``
subclass with its ``Options``), so a new file plus configs/task/<name>.yaml is all it takes: the config schema, the
checks, the identity, the trainer, the evaluators and the report read the task through ``get(name)``. Plugin
modules (pe_bench.plugins: a directory on PE_BENCH_PATH, or an installed package's entry point) count the same.

The task keys of a config (``task.KEY``) are one flat table, ``TaskConfig``: the union of every task's options,
each key declared once (tasks sharing a key declare the same default). A key the chosen task does not read must stay
at its default (pe_bench.config refuses it otherwise, naming the tasks that read it).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import typing
from typing import Any

import numpy as np

from pe_bench import plugins
from pe_bench.errors import ConfigError
from pe_bench.tasks.base import (
    BOS,
    DIGIT0,
    EVAL_SEED,
    HELDOUT_BUCKETS,
    LEGACY_IDENTITY,
    MARK,
    PAD,
    SEP,
    SYMBOL0,
    Batch,
    SyntheticOptions,
    SyntheticTask,
    Task,
    TaskData,
    TaskLengthError,
    TaskOptions,
    batch_rng,
)

DEFAULT = TaskOptions().name  # the task of a config that names none


@functools.lru_cache(maxsize=1)
def registry() -> dict[str, type[Task]]:
    """name → Task class of every task module in this package and of the plugins, sorted by name."""
    found: dict[str, type[Task]] = {}
    own = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__) if m.name != "base"]
    for module in own + _plugin_modules():
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Task) and obj.name and obj.__module__ == module.__name__:
                if obj.name in found or obj.name in CLASHES:  # neither is used: which one was meant is unknown
                    where = CLASHES.get(obj.name) or found.pop(obj.name).__module__
                    CLASHES[obj.name] = f"{where} and {_file(module)}"
                    plugins.note(f"task {obj.name!r} is defined twice, by {CLASHES[obj.name]}: rename the plugin's")
                    continue
                found[obj.name] = obj
    return dict(sorted(found.items()))


CLASHES: dict[str, str] = {}  # a task name defined twice (a plugin named like a built-in task) → by whom


def _plugin_modules() -> list[Any]:
    """The task plugins' modules; one that cannot be imported is left out (pe_bench.plugins.note)."""
    out = []
    for m in plugins.modules("tasks"):
        try:
            out.append(plugins.load(m))
        except ConfigError as e:
            plugins.note(str(e))
    return out


def _file(module: Any) -> str:
    return str(getattr(module, "__file__", None) or module.__name__)


def origin(name: str) -> str:
    """Where a registered task comes from: pe-bench, or a plugin (pe_bench.plugins.Module.origin)."""
    module = get(name).__module__
    return next((m.origin for m in plugins.modules("tasks") if m.name == module), "pe-bench")


def names() -> list[str]:
    return list(registry())


def get(name: str) -> type[Task]:
    try:
        return registry()[name]
    except KeyError:
        if name in CLASHES:
            raise ConfigError(f"task={name} is defined twice, by {CLASHES[name]}: rename the plugin's task") from None
        raise ConfigError(f"task={name} is not a task; choose one of: {', '.join(names())}"
                          f"{plugins.problems_said()}") from None


def _flat_fields() -> list[tuple[str, Any, dataclasses.Field]]:
    """Every task's option fields, each key once (the keys of the first tasks in their order, then the others in
    the order the tasks declare them); a key two tasks declare differently is a programming error."""
    out: dict[str, tuple[str, Any, dataclasses.Field]] = {}
    for task in registry().values():
        hints = typing.get_type_hints(task.Options)
        for f in dataclasses.fields(task.Options):
            spec = (f.name, hints[f.name], dataclasses.field(default=f.default, metadata=f.metadata))
            if f.name in out and (out[f.name][1] != spec[1] or out[f.name][2].default != f.default):
                raise TypeError(f"task option {f.name!r} is declared with another type or default by task "
                                f"{task.name!r} than by an earlier task")
            out.setdefault(f.name, spec)
    first = ["name", *LEGACY_IDENTITY]
    return sorted(out.values(), key=lambda spec: first.index(spec[0]) if spec[0] in first else len(first))


TaskConfig = dataclasses.make_dataclass("TaskConfig", _flat_fields())
TaskConfig.__module__ = __name__
TaskConfig.__doc__ = ("The task keys of a config: the chosen task's name and the union of every task's options "
                      "(pe_bench/tasks/<name>.py); keys the chosen task does not read stay at their defaults.")
# task name → the keys it reads (besides its name)
TASK_READS: dict[str, set[str]] = {name: {f.name for f in dataclasses.fields(t.Options)} - {"name"}
                                   for name, t in registry().items()}


def options_of(cfg: Any) -> TaskOptions:
    """The chosen task's own typed Options from the flat task keys of a config."""
    task = get(cfg.name)
    return task.Options(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(task.Options)})


def build_task(cfg: Any, text: dict[str, np.ndarray] | None = None) -> SyntheticTask:
    """The example generator of a synthetic task (``text``: the corpus's token splits, for a task that reads it).
    ``cfg``: the flat task keys of a config, or the task's own Options (a task reads only its own keys)."""
    task = get(cfg.name)
    if not issubclass(task, SyntheticTask):
        raise ConfigError(f"task={cfg.name} is not a synthetic task; choose one of: "
                          f"{', '.join(n for n, t in registry().items() if issubclass(t, SyntheticTask))}")
    return task(cfg, text)


def _without_text(cfg: Any) -> SyntheticTask:
    """The task for checks that need no corpus (a text filler stands in as a one-token split)."""
    return build_task(cfg, {"train": np.zeros(1), "validation": np.zeros(1)})


def min_length(cfg: Any) -> int:
    """The shortest input one example of the task fits in (its smallest size)."""
    return _without_text(cfg).min_length()


def check_lengths(cfg: Any, train_len: int, lengths: list[int]) -> None:
    """One ConfigError line for lengths the task cannot run as asked: an L or eval length too short for one example,
    a length the task's own limits refuse, two eval lengths that give the same examples."""
    task = _without_text(cfg)
    shortest = task.min_length()
    if train_len < shortest:
        raise ConfigError(f"train.seq_len={train_len} is too short for task={cfg.name}: one example needs at least "
                          f"{shortest} tokens; raise train.seq_len")
    short = [n for n in lengths if n < shortest]
    if short:
        raise ConfigError(f"eval length {short[0]} is too short for task={cfg.name}: one example needs at least "
                          f"{shortest} tokens; drop it from eval.lengths (or raise eval.ratios)")
    problem = task.length_problem(max([train_len, *lengths]))
    if problem:
        raise ConfigError(problem)
    seen: dict[int, int] = {}
    for n in sorted(lengths):
        size = task.max_size(n)
        if size in seen:
            raise ConfigError(f"eval lengths {seen[size]} and {n} give task={cfg.name} the same examples (inputs of "
                              f"{task.filled_length(n)} tokens): its examples grow in steps of {task.length_step} "
                              f"tokens; use eval lengths at least {task.length_step} apart")
        seen[size] = n


def identity(cfg: Any) -> dict[str, Any] | None:
    """The task's part of a run's identity (None: none) from the flat task keys of a config: the keys the task reads,
    the keys of LEGACY_IDENTITY, and any other key away from its default (a config validation refuses; an unknown
    task: all its keys)."""
    keys = dataclasses.asdict(cfg)
    task = registry().get(cfg.name)
    if task is None:
        return keys
    default = dataclasses.asdict(TaskConfig())
    kept = {"name", *TASK_READS[cfg.name], *LEGACY_IDENTITY}
    return task.identity({k: v for k, v in keys.items() if k in kept or v != default[k]})


def reads_corpus(cfg: Any) -> bool:
    """Whether the task of a config reads its corpus (data.*); an unknown task: as if it did."""
    task = registry().get(cfg.name)
    return task is None or task.reads_corpus(options_of(cfg))


def run_prefix(cfg: Any, scheme: str, model: str, data: str) -> str:
    """The readable start of the name of a run of this task (an unknown task: ``<task>-<scheme>-<model>``)."""
    task = registry().get(cfg.name)
    return (task or Task).run_prefix(cfg, scheme, model, data)


def __getattr__(attr: str) -> Any:
    """The task classes by their class name (``from pe_bench.tasks import Passkey``)."""
    for task in registry().values():
        if task.__name__ == attr:
            return task
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = ["BOS", "DEFAULT", "DIGIT0", "EVAL_SEED", "HELDOUT_BUCKETS", "MARK", "PAD", "SEP", "SYMBOL0", "TASK_READS",
           "Batch", "SyntheticOptions", "SyntheticTask", "Task", "TaskConfig", "TaskData", "TaskLengthError",
           "TaskOptions", "batch_rng", "build_task", "check_lengths", "get", "identity", "min_length", "names",
           "options_of", "origin", "reads_corpus", "registry", "run_prefix"]

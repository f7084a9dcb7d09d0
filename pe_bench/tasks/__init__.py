"""Tasks: what a run trains on and how it is scored. Every module in this package defines its task (a ``Task``
subclass with its ``Options``), so a new file plus configs/task/<name>.yaml is all it takes: the config schema, the
checks, the identity, the trainer, the evaluators and the report read the task through ``get(name)``. Plugin
modules (pe_bench.plugins: a directory on PE_BENCH_PATH, or an installed package's entry point) count the same.

The task keys of a config (``task.KEY``) are the chosen task's own ``Options`` (a dataclass, as a scheme's): two
tasks may give one key different defaults. pe_bench.config types them (``task_options``); a config saved when every
task carried every task's key reads the same, each key the task does not read dropped at a default it had then.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
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


def options(name: str, **values: Any) -> TaskOptions:
    """The task's own Options with these values, unchecked (``pe_bench.config.task_options`` types and checks them)."""
    return get(name).Options(name=name, **values)


def declaring(key: str) -> list[str]:
    """The tasks whose options include ``key``, in name order."""
    return [name for name, t in registry().items() if key in {f.name for f in dataclasses.fields(t.Options)}]


def is_old_default(key: str, value: Any) -> bool:
    """Whether ``value`` is a default some task gives ``key`` (or the one LEGACY_IDENTITY records): what a config saved
    with every task's keys holds for a key its task does not read."""
    defaults = [f.default for name in declaring(key) for f in dataclasses.fields(get(name).Options) if f.name == key]
    if key in LEGACY_IDENTITY:
        defaults.append(LEGACY_IDENTITY[key])
    return any(type(value) is type(d) and value == d for d in defaults)


def build_task(cfg: TaskOptions, text: dict[str, np.ndarray] | None = None) -> SyntheticTask:
    """The example generator of a synthetic task (``text``: the corpus's token splits, for a task that reads it).
    ``cfg``: the task's Options."""
    task = get(cfg.name)
    if not issubclass(task, SyntheticTask):
        raise ConfigError(f"task={cfg.name} is not a synthetic task; choose one of: "
                          f"{', '.join(n for n, t in registry().items() if issubclass(t, SyntheticTask))}")
    return task(cfg, text)


def _without_text(cfg: TaskOptions) -> SyntheticTask:
    """The task for checks that need no corpus (a text filler stands in as a one-token split)."""
    return build_task(cfg, {"train": np.zeros(1), "validation": np.zeros(1)})


def min_length(cfg: TaskOptions) -> int:
    """The shortest input one example of the task fits in (its smallest size)."""
    return _without_text(cfg).min_length()


def check_lengths(cfg: TaskOptions, train_len: int, lengths: list[int]) -> None:
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


def identity(options: TaskOptions) -> dict[str, Any] | None:
    """The task's part of a run's identity (None: none): its options, and the keys of LEGACY_IDENTITY it does not
    read at their values of that time (so that the names of runs made when every task had every key stand)."""
    task = registry().get(options.name)
    keys = {**LEGACY_IDENTITY, **dataclasses.asdict(options)}
    return keys if task is None else task.identity(keys)


def reads_corpus(cfg: TaskOptions) -> bool:
    """Whether the task of a config reads its corpus (data.*); an unknown task: as if it did."""
    task = registry().get(cfg.name)
    return task is None or task.reads_corpus(cfg)


def run_prefix(cfg: TaskOptions, scheme: str, model: str, data: str) -> str:
    """The readable start of the name of a run of this task (an unknown task: ``<task>-<scheme>-<model>``)."""
    task = registry().get(cfg.name)
    return (task or Task).run_prefix(cfg, scheme, model, data)


def __getattr__(attr: str) -> Any:
    """The task classes by their class name (``from pe_bench.tasks import Passkey``)."""
    for task in registry().values():
        if task.__name__ == attr:
            return task
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = ["BOS", "DEFAULT", "DIGIT0", "EVAL_SEED", "HELDOUT_BUCKETS", "LEGACY_IDENTITY", "MARK", "PAD", "SEP", "SYMBOL0",
           "Batch", "SyntheticOptions", "SyntheticTask", "Task", "TaskData", "TaskLengthError",
           "TaskOptions", "batch_rng", "build_task", "check_lengths", "declaring", "get", "identity", "is_old_default",
           "min_length", "names", "options", "origin", "reads_corpus", "registry", "run_prefix"]

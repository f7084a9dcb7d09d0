"""A task's options: typed by the task's own ``Options`` dataclass (pe_bench.tasks), as a scheme's are, so that two
tasks may share an option name with different defaults and a bad key or value is one ConfigError line."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pe_bench import tasks
from pe_bench.config.typed import typed
from pe_bench.errors import ConfigError
from pe_bench.ranges import fmt


def task_options(values: Mapping[str, Any] | tasks.TaskOptions) -> tasks.TaskOptions:
    """A config's task keys → the chosen task's typed Options. A key the task does not read is dropped where it holds
    a default some task gives it (a config saved when every task carried every task's key) and refused otherwise,
    naming the tasks that read it; types, declared ranges and choices, and the task's ``options_problem`` are checked."""
    values = dataclasses.asdict(values) if dataclasses.is_dataclass(values) else dict(values)
    name = str(values.get("name", tasks.DEFAULT))
    task = tasks.get(name)  # or the one line: not a task (listing them), or defined twice
    own = [f.name for f in dataclasses.fields(task.Options)]
    for key in [k for k in values if k not in own]:
        value = values.pop(key)
        if tasks.is_old_default(key, value):
            continue
        readers = tasks.declaring(key)
        if readers:
            raise ConfigError(f"task.{key}={fmt(value)} is not read by task={name}; it is an option of "
                              f"{', '.join(f'task={r}' for r in readers)}")
        raise ConfigError(f"unknown config key 'task.{key}'; valid keys in task (task={name}): {', '.join(own)}")
    options = typed(task.Options, values, "task")
    problem = task.options_problem(options)
    if problem:
        raise ConfigError(problem)
    return options

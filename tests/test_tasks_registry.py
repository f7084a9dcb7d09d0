"""pe_bench.tasks' registry, in the test's own process: which tasks exist and where each comes from, building one,
the lengths a task refuses (one line each), a task's part of a run's identity, and what a plugin task that is broken
or named like a built-in one does to the registry."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pe_bench import plugins, tasks
from pe_bench.errors import ConfigError

# The built-in tasks: the `name = "..."` of each module of pe_bench/tasks (a task added as one file is one more).
BUILT_IN = sorted(m.group(1) for p in (Path(tasks.__file__).parent).glob("*.py")
                  for m in re.finditer(r'^    name = "(\w+)"', p.read_text(), re.MULTILINE))


@pytest.fixture
def rebuilt(monkeypatch):
    """The registry rebuilt for the test (PE_BENCH_PATH as the test sets it), and rebuilt again without it after."""
    monkeypatch.setattr(tasks, "CLASHES", {})
    monkeypatch.setattr(plugins, "PROBLEMS", [])

    def clear() -> None:
        tasks.registry.cache_clear()
        plugins.modules.cache_clear()

    clear()
    yield
    monkeypatch.delenv(plugins.ENV, raising=False)
    clear()


def test_the_built_in_tasks_are_listed_by_name_and_come_from_pe_bench():
    assert tasks.names() == BUILT_IN
    assert all(tasks.origin(n) == "pe-bench" for n in BUILT_IN)
    assert tasks.get("copy").__name__ == "Copy" and tasks.Copy is tasks.get("copy")
    with pytest.raises(ConfigError) as e:
        tasks.get("nope")
    assert str(e.value) == f"task=nope is not a task; choose one of: {', '.join(BUILT_IN)}"


def test_only_a_synthetic_task_builds_an_example_generator_and_it_gets_its_options_and_text():
    with pytest.raises(ConfigError) as e:
        tasks.build_task(tasks.options("lm"))
    synthetic = [n for n in BUILT_IN if n != "lm"]
    assert str(e.value) == f"task=lm is not a synthetic task; choose one of: {', '.join(synthetic)}"
    opts = tasks.options("copy", symbols=5)
    copy = tasks.build_task(opts)
    assert type(copy) is tasks.get("copy") and copy.cfg is opts and copy.cfg.symbols == 5
    text = {"train": np.arange(300) % 7, "validation": np.arange(300) % 5}
    passkey = tasks.build_task(tasks.options("passkey", filler="text"), text)
    assert passkey.filler_text is text
    with pytest.raises(ValueError, match="filler=text"):
        tasks.build_task(tasks.options("passkey", filler="text"))  # text filler, no text


def test_a_task_reading_text_is_checked_without_the_corpus():
    opts = tasks.options("passkey", filler="text")
    assert tasks.min_length(opts) == tasks.build_task(opts, {"train": np.zeros(1), "validation": np.zeros(1)}
                                                      ).min_length() == 12
    tasks.check_lengths(opts, 32, [32, 64])


def test_lengths_a_task_cannot_run_are_one_line_each():
    copy = tasks.options("copy")
    shortest = tasks.min_length(copy)
    tasks.check_lengths(copy, shortest, [shortest, 64])  # exactly the shortest fits
    with pytest.raises(ConfigError) as e:
        tasks.check_lengths(copy, shortest - 1, [64])
    assert str(e.value) == (f"train.seq_len={shortest - 1} is too short for task=copy: one example needs at least "
                            f"{shortest} tokens; raise train.seq_len")
    with pytest.raises(ConfigError) as e:
        tasks.check_lengths(copy, 32, [64, shortest - 1, 1])
    assert str(e.value) == (f"eval length {shortest - 1} is too short for task=copy: one example needs at least "
                            f"{shortest} tokens; drop it from eval.lengths (or raise eval.ratios)")
    recall = tasks.options("assoc_recall")
    with pytest.raises(ConfigError, match="task.n_keys=512 is too few for task=assoc_recall at length 5000: its "
                                          "examples hold 2495 key-value pairs"):
        tasks.check_lengths(recall, 32, [64, 5000, 128])  # judged at the longest length
    with pytest.raises(ConfigError) as e:
        tasks.check_lengths(recall, 32, [96, 32, 64, 31])  # 31 and 32: the same number of pairs
    assert str(e.value) == ("eval lengths 31 and 32 give task=assoc_recall the same examples (inputs of 31 tokens): its "
                            "examples grow in steps of 2 tokens; use eval lengths at least 2 apart")
    tasks.check_lengths(recall, 32, [32, 34, 36])


def test_a_tasks_identity_is_its_options_over_the_keys_every_task_once_had():
    copy = tasks.options("copy", symbols=5)
    assert tasks.identity(copy) == {**tasks.LEGACY_IDENTITY, **{k: v for k, v in vars(copy).items()}}
    unknown = tasks.TaskOptions(name="gone")  # a run of a task no longer installed keeps its name
    assert tasks.identity(unknown) == {**tasks.LEGACY_IDENTITY, "name": "gone"}
    assert tasks.reads_corpus(unknown) and not tasks.reads_corpus(copy)
    assert tasks.reads_corpus(tasks.options("passkey", filler="text"))


def test_an_old_default_is_a_default_of_some_task_of_the_same_type():
    assert tasks.is_old_default("symbols", 16)  # copy's, and LEGACY_IDENTITY's
    assert not tasks.is_old_default("symbols", 17)
    assert not tasks.is_old_default("symbols", 16.0)  # a float is not the int default
    assert not tasks.is_old_default("symbols", True)
    assert tasks.is_old_default("key_digits", 5) and not tasks.is_old_default("key_digits", 6)
    assert tasks.declaring("n_keys") == ["assoc_recall"]
    assert tasks.is_old_default("reverse_digits", True)
    assert not tasks.is_old_default("no_such_key", None)


MINE = "from pe_bench.tasks.copy import Copy\n\n\nclass Mine(Copy):\n    name = \"mine\"\n"
COPY_TWICE = "from pe_bench.tasks.copy import Copy\n\n\nclass MyCopy(Copy):\n    name = \"copy\"\n"


def test_plugin_tasks_join_the_registry_and_a_broken_or_clashing_one_is_left_out_with_one_line(
        rebuilt, tmp_path, monkeypatch):
    d = tmp_path / "my-pe"
    (d / "tasks").mkdir(parents=True)
    (d / "tasks" / "mine.py").write_text(MINE)
    (d / "tasks" / "twice.py").write_text(COPY_TWICE)
    (d / "tasks" / "broken.py").write_text("def broken(:\n")
    monkeypatch.setenv(plugins.ENV, str(d))
    names = tasks.names()
    assert "mine" in names and "copy" not in names and "addition" in names
    assert tasks.origin("mine") == f"search path: {(d / 'tasks' / 'mine.py').resolve()}"
    assert tasks.origin("addition") == "pe-bench"
    twice = (d / "tasks" / "twice.py").resolve()
    assert tasks.CLASHES == {"copy": f"pe_bench.tasks.copy and {twice}"}
    with pytest.raises(ConfigError) as e:
        tasks.get("copy")
    assert str(e.value) == f"task=copy is defined twice, by pe_bench.tasks.copy and {twice}: rename the plugin's task"
    broken = (d / "tasks" / "broken.py").resolve()
    assert plugins.PROBLEMS[0].startswith(f"the plugin {broken}, line 1 cannot be imported (SyntaxError: ")
    assert plugins.PROBLEMS[1] == (f"task 'copy' is defined twice, by pe_bench.tasks.copy and {twice}: rename the "
                                   "plugin's")
    with pytest.raises(ConfigError, match="task=nope is not a task; choose one of: .*; the plugin .*broken.py"):
        tasks.get("nope")


def test_a_module_without_a_file_is_named_by_its_module_name():
    import types

    assert tasks._file(types.ModuleType("made.in.memory")) == "made.in.memory"
    import pe_bench.tasks.copy as module

    assert tasks._file(module) == module.__file__


def test_a_key_no_task_reads_any_more_keeps_its_recorded_default(monkeypatch):
    monkeypatch.setitem(tasks.LEGACY_IDENTITY, "retired_option", 3)
    assert tasks.declaring("retired_option") == []
    assert tasks.is_old_default("retired_option", 3) and not tasks.is_old_default("retired_option", 4)
    assert tasks.declaring("needle_keys") == ["needle_multikey", "needle_multivalue"]
    assert "needle_keys" not in tasks.LEGACY_IDENTITY
    default = tasks.options("needle_multikey").needle_keys
    assert tasks.is_old_default("needle_keys", default) and not tasks.is_old_default("needle_keys", default + 1)


def test_a_task_may_drop_keys_from_its_identity_and_names_its_runs():
    assert "abacus" not in tasks.identity(tasks.options("addition"))  # addition without Abacus: the old identity
    assert tasks.identity(tasks.options("addition", abacus=True))["abacus"] is True
    assert tasks.run_prefix(tasks.options("copy"), "rope", "tiny", "shakespeare") == "copy-rope-tiny"
    assert tasks.run_prefix(tasks.TaskOptions(name="gone"), "alibi", "small", "x") == "gone-alibi-small"
    assert tasks.run_prefix(tasks.options("lm"), "rope", "tiny", "shakespeare") == "rope-tiny-shakespeare"

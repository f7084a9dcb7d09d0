"""A new positional scheme is one file in pe_bench/schemes/ plus one YAML in configs/scheme/, and a new task one file
in pe_bench/tasks/ plus one YAML in configs/task/, and nothing else: written into a copy of the package, the scheme
is listed by `pe-bench schemes`, picked up by the conformance tests' parametrisation, trained, evaluated and reported
with its plots; the task is composed with its own option, trained, scored and reported with its plot, and every
other run keeps its name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]

SCHEME = '''"""Tilt: one linear distance penalty on the scores, the same for every head (ALiBi with one slope)."""

from dataclasses import dataclass

import torch

from pe_bench.ranges import ranged
from pe_bench.schemes.base import Scheme


@dataclass
class TiltOptions:
    slope: float = ranged(0.25, gt=0)


class Tilt(Scheme):
    name = "tilt"
    description = "a linear distance penalty -slope*(i-j), the same on every head"
    citation = "a test of pe-bench's scheme registry"
    acts_on = ("scores",)
    relative = True
    Options = TiltOptions

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, layer: int = 0) -> torch.Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).float()
        return (-self.options.slope * distance).expand(self.shape.n_heads, -1, -1).clone()
'''
YAML = "name: tilt\nslope: 0.25  # the penalty per token of distance\n"
TASK = '''"""First: BOS a₁…a_k SEP a₁ — a random string, a separator, the string's first symbol."""

from dataclasses import dataclass

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, SEP, SYMBOL0, SyntheticOptions, SyntheticTask


@dataclass
class FirstOptions(SyntheticOptions):
    alphabet: int = ranged(8, ge=2)


class First(SyntheticTask):
    name = "first"
    description = "a random string, a separator, the string's first symbol"
    Options = FirstOptions

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.alphabet

    def max_size(self, n: int) -> int:
        return n - 2  # BOS + k + SEP + 1 = n + 1

    def chance(self, n: int) -> float:
        return 1 / self.cfg.alphabet

    def example(self, rng, size, depth, split):
        string = SYMBOL0 + rng.integers(0, self.cfg.alphabet, size=size)
        tokens = [BOS, *string, SEP, string[0]]
        return tokens, [False] * (size + 2) + [True], string.astype("uint16").tobytes()
'''
TASK_YAML = "name: first\nalphabet: 8\n"
TINY = ["train=smoke", "eval=smoke", "model.n_layers=2", "model.d_model=32", "model.n_heads=2", "train.steps=4"]


@pytest.fixture(scope="module")
def copy_with_a_new_scheme(tmp_path_factory) -> Path:
    """The package, its configs and tests copied, plus schemes/tilt.py and configs/scheme/tilt.yaml, and
    tasks/first.py and configs/task/first.yaml: the files a contributor adds."""
    root = tmp_path_factory.mktemp("checkout")
    for d in ("pe_bench", "configs", "tests"):
        shutil.copytree(ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / "pe_bench" / "schemes" / "tilt.py").write_text(SCHEME)
    (root / "configs" / "scheme" / "tilt.yaml").write_text(YAML)
    (root / "pe_bench" / "tasks" / "first.py").write_text(TASK)
    (root / "configs" / "task" / "first.yaml").write_text(TASK_YAML)
    return root


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}  # the copy, not the installed package
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True)


def test_a_new_scheme_is_listed_trained_evaluated_and_reported(copy_with_a_new_scheme):
    root = copy_with_a_new_scheme
    listed = run(root, "-m", "pe_bench", "schemes")
    assert listed.returncode == 0, listed.stderr
    assert "tilt" in listed.stdout and "a linear distance penalty" in listed.stdout
    trained = run(root, "-m", "pe_bench", "train", "scheme=tilt", *TINY, f"results_dir={root / 'results'}",
                  "--no-progress")
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    [run_dir] = (root / "results" / "runs").iterdir()
    assert run_dir.name.startswith("tilt-tiny-shakespeare-L32-s0-")
    rows = pd.read_csv(run_dir / "eval.csv")
    assert set(rows["scheme"]) == {"tilt"} and (rows["status"] == "ok").all()
    reported = run(root, "-m", "pe_bench", "report", str(root / "results"), "--out", str(root / "report"))
    assert reported.returncode == 0, reported.stdout[-3000:] + reported.stderr[-3000:]
    table = pd.read_csv(root / "report" / "comparison.csv")
    assert "tilt" in set(table["scheme"])
    for png in ("ppl_vs_length_nonoverlapping.png", "ppl_vs_length_sliding.png", "loss_vs_position.png"):
        assert (root / "report" / png).stat().st_size > 0


def test_the_conformance_tests_take_a_new_scheme_with_no_other_edit(copy_with_a_new_scheme):
    root = copy_with_a_new_scheme
    r = run(root, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q", "tests/test_schemes.py",
            "-k", "tilt")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    passed = int(r.stdout.strip().splitlines()[-1].split()[0])
    # its YAML, causality at L and 8L, eval variants, finite at 8L, gradients, shift invariance of outputs and
    # scores, the options it was built with
    assert passed >= 9, r.stdout[-2000:]


def test_a_new_task_is_composed_trained_scored_and_reported(copy_with_a_new_scheme):
    root = copy_with_a_new_scheme
    results = root / "results-task"
    trained = run(root, "-m", "pe_bench", "train", "task=first", "task.alphabet=6", "scheme=alibi", *TINY,
                  f"results_dir={results}", "--no-progress")
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    [run_dir] = (results / "runs").iterdir()
    assert run_dir.name.startswith("first-alibi-tiny-L32-s0-")
    rows = pd.read_csv(run_dir / "accuracy.csv")
    assert set(rows["task"]) == {"first"} and (rows["status"] == "ok").all() and len(rows) >= 2
    refused = run(root, "-m", "pe_bench", "train", "task=copy", "task.alphabet=6", "--cfg")
    assert refused.returncode == 2
    assert "task.alphabet=6 is not read by task=copy; it is an option of task=first" in refused.stderr
    reported = run(root, "-m", "pe_bench", "report", str(results), "--out", str(root / "task-report"))
    assert reported.returncode == 0, reported.stdout[-3000:] + reported.stderr[-3000:]
    table = pd.read_csv(root / "task-report" / "accuracy_long.csv")
    assert set(table["task"]) == {"first"}
    assert (root / "task-report" / "accuracy_vs_length.png").stat().st_size > 0


@pytest.mark.parametrize("overrides", [["scheme=rope"], ["task=copy"], ["task=passkey", "task.filler=text"],
                                       ["task=assoc_recall", "scheme=t5"]])
def test_a_new_task_and_its_option_leave_every_other_runs_name_alone(copy_with_a_new_scheme, overrides):
    """The new task's options are its own: no other run's identity holds them."""
    names = []
    for root in (ROOT, copy_with_a_new_scheme):
        shown = run(root, "-m", "pe_bench", "train", *overrides, "--cfg")
        assert shown.returncode == 0, shown.stderr
        names.append([line for line in shown.stdout.splitlines() if "runs/" in line])
    assert names[0] and names[0] == names[1]

"""Mutation testing of the code whose numbers end up in a table, with mutmut (PyPI; not a pe-bench dependency).

    .venv/bin/pip install "mutmut>=3.8,<4"
    .venv/bin/python scripts/mutation.py                 # every group (several hours on 2 cores)
    .venv/bin/python scripts/mutation.py stats identity  # some groups
    .venv/bin/python scripts/mutation.py --recheck stats # only those not killed last time (and not run:
                                                         # so it also resumes an interrupted run)

Each group names the source files (and, where only part of a file is in scope, the functions) to mutate and the fast
tests that hold them. For each group the package, configs and tests are copied into build/mutation/<group>/ with a
[tool.mutmut] section, mutmut runs there, and its verdicts are read back from mutants/*.meta. The report,
results/mutation/README.md plus one JSON per group, counts per module: killed (a test failed, or the mutant ran past
mutmut's CPU limit: an endless loop), survived, and equivalent — a survivor listed in scripts/mutation_equivalent.toml
with the reason no test can tell it apart (keyed by function and the changed line, so a listing that no longer matches
a mutant is reported as stale). Score = killed / (mutants − equivalent).

Out of scope by construction (mutmut is told not to mutate these lines, DO_NOT_MUTATE): the text of error messages
(the `raise` lines; a wrong message is not a wrong number) and logging.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "mutation"
OUT = ROOT / "results" / "mutation"
EQUIVALENT = ROOT / "scripts" / "mutation_equivalent.toml"
DO_NOT_MUTATE = [r"^\s*raise ", r"^\s*(log|logger|warnings)\.", r"^\s*print\("]
NOT_SLOW = ["-p", "no:cacheprovider", "-p", "no:randomly", "-m", "not slow and not slurm and not cuda"]
KILLED = {1, 3, 36, 24, -24, 152, 255, -9}  # a failing test, pytest's internal error, or mutmut's limits
# SIGXCPU: past the CPU limit, or past mutmut's wall-clock bound (half the CPU limit); SIGKILL: still running a second
# after that (an endless loop that outlived SIGXCPU, or one that filled the memory first)
TIMEOUTS = {24, -24, 152, -9}
# mutmut's wall-clock bound fires on a loaded machine too: a limit of 50× the tests' own time keeps it for real
# hangs (a bisection that never ends), and --recheck runs every timeout again.
TIMEOUT_MULTIPLIER = 50.0
SURVIVED = {0}
NO_TESTS = {5, 33}


@dataclass(frozen=True)
class Group:
    """Files (optionally only some of their functions) and the tests that must notice any change to them."""

    name: str
    files: tuple[str, ...]
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()  # mutant-name globs, e.g. "pe_bench.runs.x_identity__mutmut_*"; empty: all
    pytest_args: tuple[str, ...] = ()


def _functions_except(pattern: str, skip: tuple[str, ...]) -> tuple[str, ...]:
    """Mutant-name globs of every function and method in the files matching ``pattern`` but those in ``skip``
    ("f" or "Class.method")."""
    out = []
    for path in sorted(ROOT.glob(pattern)):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        for node in tree.body:
            methods = [(node.name, m.name) for m in node.body if isinstance(m, ast.FunctionDef)] \
                if isinstance(node, ast.ClassDef) else [(None, node.name)] if isinstance(node, ast.FunctionDef) else []
            for cls, name in methods:
                if (f"{cls}.{name}" if cls else name) not in skip:
                    out.append(f"{module}.xǁ{cls}ǁ{name}__mutmut_*" if cls else f"{module}.x_{name}__mutmut_*")
    return tuple(out)


# The scheme tests, and tests/test_schemes_<module>.py: each scheme's math against an independent computation, and
# its FlexAttention score_mod evaluated eagerly against the explicit scores (compiling flex on a CPU is too slow to
# run once per mutant; tests/test_backends.py compiles it once per scheme).
SCHEME_TESTS = ("tests/test_schemes.py", "tests/test_reference_values.py", "tests/test_zoo_reference_values.py",
                "tests/test_recent_schemes.py", "tests/test_rope_scaling.py", "tests/test_bias_mask.py",
                *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_schemes_*.py")))
GROUPS = [
    Group("stats", ("pe_bench/stats.py",), ("tests/test_stats.py", "tests/test_stats_accuracy.py")),
    Group("evaluate", ("pe_bench/evaluate/perplexity.py", "pe_bench/evaluate/accuracy.py"),
          ("tests/test_evaluate.py", "tests/test_task_report.py")),
    Group("identity", ("pe_bench/runs/naming.py",), ("tests/test_identity.py",),
          tuple(f"pe_bench.runs.naming.x_{f}__mutmut_*" for f in ("identity", "_without_late_defaults",
                                                                 "_scheme_defaults", "digest", "run_name"))),
    Group("guards", ("pe_bench/train.py", "pe_bench/runs/naming.py", "pe_bench/runs/directory.py"),
          ("tests/test_train.py", "tests/test_trust.py"),
          ("pe_bench.runs.directory.x_check_checkpoint__mutmut_*", "pe_bench.runs.naming.x_checkpoint_identity__mutmut_*",
           "pe_bench.train.xǁHealthǁ*", "pe_bench.train.xǁDivergedǁ*"),
          ("-k", "diverg or finite or checkpoint or resum or refused or edited or other_data or crash")),
    # Each task's generator and the shared machinery; the registry (tasks/__init__.py), reached by every task test,
    # has its own fast tests.
    Group("tasks", ("pe_bench/tasks/[a-z]*.py",), tuple(sorted(str(p.relative_to(ROOT))
                                                               for p in (ROOT / "tests").glob("test_tasks*.py"))),
          _functions_except("pe_bench/tasks/[a-z]*.py", ("SyntheticTask.min_length", "SyntheticTask.__init__"))),
    Group("task_registry", ("pe_bench/tasks/__init__.py",), ("tests/test_tasks_registry.py",)),
    # Every task test reaches these (a task's construction, its shortest length): each mutant would run them all, and
    # one that loops forever would run until 50× their time; the tests of the sizes themselves decide them.
    Group("task_lengths", ("pe_bench/tasks/base.py",), ("tests/test_tasks_options.py",),
          ("pe_bench.tasks.base.xǁSyntheticTaskǁmin_length__mutmut_*", "pe_bench.tasks.base.xǁSyntheticTaskǁ__init____mutmut_*")),
    Group("accuracy_report", ("pe_bench/report/accuracy.py", "pe_bench/report/leaderboard.py",
                              "pe_bench/report/extension.py"),
          ("tests/test_report_leaderboard.py", "tests/test_task_report.py", "tests/test_report.py")),
    Group("data", ("pe_bench/data.py",), ("tests/test_data.py",)),
    # The training-free methods outside the schemes (log-n temperature) and the position samplers of PoSE and the
    # randomized-positions evaluation; rope.py's PI/NTK/YaRN scalings and NoPE's head scale are in the schemes group.
    Group("training_free", ("pe_bench/model/decoder.py",), ("tests/test_recent_schemes.py", "tests/test_finetune.py",
                                                            "tests/test_evaluate.py"),
          tuple(f"pe_bench.model.decoder.x_{f}__mutmut_*" for f in ("logn_beyond", "pose_positions",
                                                                    "random_positions"))),
    # In-process tests only: tests/test_plugins*.py's end-to-end ones run the installed package in a new process,
    # where no mutant is active.
    Group("plugins", ("pe_bench/plugins.py",), ("tests/test_plugins_search.py",)),
    Group("markdown", ("pe_bench/markdown.py",), ("tests/test_markdown.py", "tests/test_report_readers.py")),
    Group("report", ("pe_bench/report/collect.py", "pe_bench/report/labels.py", "pe_bench/report/files.py",
                     "pe_bench/report/perplexity.py"), ("tests/test_report_readers.py", "tests/test_report.py"),
          tuple(f"pe_bench.report.{m}.x_{f}__mutmut_*" for m, fs in (
              ("collect", ("_diverged_rows", "_eval_rows", "_run_frame", "collect_all", "_read_runs", "_readable",
                           "_without_copies", "_eval_frame")),
              ("labels", ("config_identity", "mixed_numerics", "labelled")),
              ("files", ("read_windows", "window_key", "recomputed_ppl", "agrees", "check_against_windows")),
              ("perplexity", ("_cell_windows", "comparison", "row_names", "_cell_stats", "best_marks", "_paired",
                              "compare", "_compared", "_mark"))) for f in fs),
          ("-k", "not two_processes")),  # the same report from two processes: a subprocess, seen by no mutant
    Group("schemes", ("pe_bench/schemes/*.py",), SCHEME_TESTS),
    # The schemes added since the first run (a part of the group above, to run first when time is short)
    Group("schemes_new", ("pe_bench/schemes/path.py", "pe_bench/schemes/pope.py", "pe_bench/schemes/fope.py"),
          SCHEME_TESTS),
]


# Appended to the copied tests/conftest.py: mutmut hands pytest a mutant's tests in no particular order and stops at
# the first failure, so the fastest run first (by the durations mutmut recorded) and a mutant that a quick test kills
# never waits for the slow ones. Not part of mutmut's configuration: its cached verdicts stay valid.
FASTEST_FIRST = """

def pytest_collection_modifyitems(config, items):
    import json
    import pathlib

    stats = pathlib.Path("mutmut-stats.json")
    if stats.exists():
        took = json.loads(stats.read_text()).get("duration_by_test", {})
        items.sort(key=lambda item: took.get(item.nodeid, 0.0))
"""


def prepare(group: Group) -> Path:
    """A fresh copy of the sources and tests with the group's mutmut settings; mutmut's cache kept if sources match."""
    work = WORK / group.name
    work.mkdir(parents=True, exist_ok=True)
    for d in ("pe_bench", "configs", "tests", "results"):
        if (work / d).exists():
            shutil.rmtree(work / d)
    for d in ("pe_bench", "configs", "tests"):
        shutil.copytree(ROOT / d, work / d, ignore=shutil.ignore_patterns("__pycache__"))
    with open(work / "tests" / "conftest.py", "a") as f:
        f.write(FASTEST_FIRST)
    # The committed runs and their reports (every committed results folder but this report's own): tests check the
    # runs' names and rebuild the tables from them.
    tracked = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True, check=True)
    for d in sorted({line.split("/")[1] for line in tracked.stdout.splitlines() if line.count("/") > 1} - {"mutation"}):
        shutil.copytree(ROOT / "results" / d, work / "results" / d, ignore=shutil.ignore_patterns("*.png", "*.pt"))
    settings = {
        "source_paths": ["pe_bench"],
        "also_copy": ["configs", "results"],
        "only_mutate": list(group.files),
        "do_not_mutate_patterns": DO_NOT_MUTATE,
        "pytest_add_cli_args_test_selection": list(group.tests),
        "pytest_add_cli_args": NOT_SLOW + list(group.pytest_args),
        "process_isolation": "forkserver",  # torch is not fork-safe after the test collection
        "timeout_multiplier": TIMEOUT_MULTIPLIER,
        "use_git_change_detection": False,
    }
    text = (ROOT / "pyproject.toml").read_text() + "\n[tool.mutmut]\n" + "".join(
        f"{k} = {json.dumps(v, ensure_ascii=False)}\n" for k, v in settings.items())
    (work / "pyproject.toml").write_text(text)
    return work


def run_mutmut(group: Group, work: Path, names: list[str]) -> None:
    """mutmut run in the group's directory; mutmut's own output goes to mutmut.log there."""
    mutmut = Path(sys.executable).with_name("mutmut")
    cmd = [str(mutmut), "run", "--max-children", "2", *names]
    # One torch thread per child: two children with a thread per core each would oversubscribe the cores, and
    # spinning OpenMP threads then make every training step several times slower.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with open(work / "mutmut.log", "w") as log:
        rc = subprocess.run(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        sys.exit(f"mutmut failed for group {group.name} (exit {rc}): see {work / 'mutmut.log'}")


def verdicts(work: Path, group: Group) -> dict[str, int | None]:
    """mutant name → mutmut's exit code, for the group's files and functions."""
    out: dict[str, int | None] = {}
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        src = str(meta.relative_to(work / "mutants"))[: -len(".meta")]
        if not any(Path(src).match(f) for f in group.files):
            continue
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if not group.functions or any(re.fullmatch(_glob(f), name) for f in group.functions):
                out[name] = code
    return out


def _glob(pattern: str) -> str:
    return re.escape(pattern).replace(r"\*", ".*")


def mutant_diffs(work: Path, names: list[str]) -> dict[str, tuple[str, list[str]]]:
    """mutant name → (function, the changed lines '-old' / '+new'), read from mutmut's trampolined sources."""
    wanted, out = set(names), {}
    for path in (work / "mutants" / "pe_bench").rglob("*.py"):
        module = ".".join(path.relative_to(work / "mutants").with_suffix("").parts).removesuffix(".__init__")
        if not any(n.startswith(module + ".") for n in wanted):
            continue
        src = path.read_text()
        text = src.splitlines()
        defs = {n.name: n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}

        def source(node: ast.AST, name: str, base: str) -> list[str]:
            return [line.replace(name, base) for line in text[node.lineno - 1: node.end_lineno]]

        for fname, node in defs.items():
            full = f"{module}.{fname}"
            if full not in wanted:
                continue
            base = fname.rsplit("__mutmut_", 1)[0]
            orig = defs.get(base + "__mutmut_orig")
            a = source(orig, base + "__mutmut_orig", base) if orig else []
            b = source(node, fname, base)
            changed = [line for line in difflib.unified_diff(a, b, lineterm="", n=0)
                       if line[:1] in "+-" and not line.startswith(("+++", "---"))]
            function = re.sub(r"^xǁ|^x_", "", base).replace("ǁ", ".")  # x_f → f, xǁClassǁmethod → Class.method
            out[full] = (f"{module}.{function}", [re.sub(r"\s+", " ", c).strip() for c in changed])
    return out


def _plus_line(change: list[str]) -> str:
    """The mutated line of a mutant's change ('-old' / '+new' lines), as the equivalence listing keys it."""
    return next((c[1:].strip() for c in change if c.startswith("+")), "")


def load_equivalent() -> list[dict]:
    """[[mutant]] entries: function, change (the '+' line), reason."""
    if not EQUIVALENT.exists():
        return []
    return tomllib.loads(EQUIVALENT.read_text()).get("mutant", [])


def summarize(group: Group, work: Path, seconds: float) -> dict:
    """Counts per module and every survivor with its change (equivalent ones with their reason)."""
    codes = verdicts(work, group)
    survivors = [n for n, c in codes.items() if c not in KILLED]
    diffs = mutant_diffs(work, survivors)
    equivalent = load_equivalent()
    used: set[int] = set()
    modules: dict[str, dict] = {}
    listed = []
    for name, code in sorted(codes.items(), key=lambda kv: _natural(kv[0])):
        module = name.rsplit(".", 1)[0]
        m = modules.setdefault(module, {"mutants": 0, "killed": 0, "survived": 0, "equivalent": 0, "no_tests": 0,
                                        "not_run": 0})
        m["mutants"] += 1
        if code in KILLED:
            m["killed"] += 1
            continue
        function, change = diffs.get(name, ("?", []))
        plus = _plus_line(change)
        reason = None
        for i, e in enumerate(equivalent):
            if e["function"] == function and e["change"].strip() == plus:
                reason, _ = e["reason"], used.add(i)
                break
        status = ("equivalent" if reason and code in SURVIVED else "no_tests" if code in NO_TESTS
                  else "not_run" if code is None else "survived")
        m[status] += 1
        listed.append({"mutant": name, "function": function, "change": change, "status": status, "exit": code,
                       **({"reason": reason} if reason else {})})
    for m in modules.values():
        m["score"] = round(m["killed"] / max(1, m["mutants"] - m["equivalent"]), 4)
    stale = [e for i, e in enumerate(equivalent) if i not in used and _split(e["function"])[0] in modules
             and _in_group(e["function"], group)]
    return {"group": group.name, "commit": _commit(), "date": time.strftime("%Y-%m-%d"),
            "files": group.files, "functions": group.functions, "tests": group.tests,
            "pytest_args": NOT_SLOW + list(group.pytest_args), "seconds": round(seconds), "modules": modules,
            "killed": sorted((n for n, c in codes.items() if c in KILLED), key=_natural),
            "timeouts": sorted((n for n, c in codes.items() if c in TIMEOUTS), key=_natural),
            "not_killed": listed, "stale_equivalents": stale}


def _commit() -> str:
    """The last commit that changed the mutated sources (pe_bench/), with "+" when the working tree differs from it."""
    head = subprocess.run(["git", "log", "-1", "--format=%h", "--", "pe_bench"], cwd=ROOT, capture_output=True,
                          text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "pe_bench"], cwd=ROOT, capture_output=True, text=True)
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def _split(function: str) -> tuple[str, str, str]:
    """(module, class or "", name) of an equivalence listing's ``module.f`` or ``module.Class.method``."""
    head, _, name = function.rpartition(".")
    module, _, cls = head.rpartition(".")
    return (module, cls, name) if cls[:1].isupper() else (head, "", name)


def _in_group(function: str, group: Group) -> bool:
    """Whether a group that mutates only some functions mutates ``function``."""
    if not group.functions:
        return True
    module, cls, name = _split(function)
    mangled = f"{module}.xǁ{cls}ǁ{name}__mutmut_1" if cls else f"{module}.x_{name}__mutmut_1"
    return any(re.fullmatch(_glob(f), mangled) for f in group.functions)


def _natural(name: str) -> tuple:
    head, _, n = name.rpartition("__mutmut_")
    return (head, int(n) if n.isdigit() else -1)


RANK = ("killed", "equivalent", "survived", "no_tests", "not_run")  # a mutant's best verdict over the groups comes first


def combined(groups: list[dict]) -> dict[str, dict[str, str]]:
    """module → mutant → its best verdict over every group that ran it (killed by any group's tests is killed)."""
    best: dict[str, dict[str, str]] = {}
    verdicts_seen = [(n, "killed") for g in groups for n in g.get("killed", [])]
    verdicts_seen += [(x["mutant"], x["status"]) for g in groups for x in g["not_killed"]]
    for name, status in verdicts_seen:
        mod = best.setdefault(name.rsplit(".", 1)[0], {})
        if name not in mod or RANK.index(status) < RANK.index(mod[name]):
            mod[name] = status
    return best


def write_readme() -> None:
    """results/mutation/README.md from every group's JSON: per module the best verdict of each mutant over the
    groups that ran it, the score before → after, then every mutant not killed with its change."""
    groups = [json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))]
    import mutmut

    best = combined(groups)
    lines = ["# Mutation testing", "",
             f"Written by `scripts/mutation.py` (mutmut {getattr(mutmut, '__version__', '?')}); each group's tests "
             "are listed in its JSON. killed: a test failed, or the mutant's tests ran past mutmut's limit "
             f"({TIMEOUT_MULTIPLIER:g}× their own time: an endless loop; counted apart as timeouts); "
             "equivalent: no test can tell it apart (reason in scripts/mutation_equivalent.toml); no tests: none of "
             "the group's tests reaches the function; score = killed / (mutants − equivalent), first run → now "
             "(after the tests written against the first run's survivors). A module run by several groups counts a "
             "mutant killed if any group's tests kill it. Error-message text and logging are not mutated."]
    lines += ["", "Each group's run (a group without one ran on code from before the package's layering: its counts are "
              "stale until it runs again):", "",
              "| group | run on | sources at commit | seconds |", "|---|---|---|---:|"]
    lines += [f"| {g['group']} | {g.get('date', '—')} | {g.get('commit', 'before the layering (stale)')} | "
              f"{g.get('seconds', 0)} |" for g in groups]
    lines += ["", "| module | groups | mutants | killed | of which timeouts | survived | equivalent | no tests | not run "
              "| score |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    timeouts = {n for g in groups for n in g.get("timeouts", [])}
    for mod, v in sorted(best.items()):
        n = {k: sum(1 for x in v.values() if x == k) for k in RANK}
        names = [g["group"] + ("" if g.get("commit") else " (stale)") for g in groups if mod in g["modules"]]
        before = next((g["before"][mod] for g in groups if mod in (g.get("before") or {})), None) \
            if len(names) == 1 else None  # a module several groups mutate: no one group's first run is its "before"
        score = n["killed"] / max(1, len(v) - n["equivalent"])
        was = f"{100 * before['score']:.1f} % → " if before else ""
        slow = sum(1 for name, x in v.items() if x == "killed" and name in timeouts)
        lines.append(f"| `{mod}` | {', '.join(names)} | {len(v)} | {n['killed']} | {slow} | {n['survived']} | "
                     f"{n['equivalent']} | {n['no_tests']} | {n['not_run']} | {was}{100 * score:.1f} % |")
    for g in groups:
        rest = [x for x in g["not_killed"] if best[x["mutant"].rsplit(".", 1)[0]][x["mutant"]] == x["status"]]
        eq = [x for x in rest if x["status"] == "equivalent"]
        rest = [x for x in rest if x["status"] != "equivalent"]
        lines += ["", f"## {g['group']}: {len(rest)} not killed, {len(eq)} equivalent", ""]
        lines += [f"- {x['status']}: `{x['function']}`: " + " → ".join(f"`{c}`" for c in x["change"]) for x in rest]
        lines += [f"- equivalent: `{x['function']}`: " + " → ".join(f"`{c}`" for c in x["change"])
                  + f" — {x['reason']}" for x in eq]
        lines += [f"- stale equivalence listing (matches no mutant): `{e['function']}` `{e['change']}`"
                  for e in g["stale_equivalents"]]
    (OUT / "README.md").write_text("\n".join(lines) + "\n")


def run_group(group: Group, recheck: bool) -> dict | None:
    """Run mutmut for one group (only its survivors with ``recheck``); its summary, None when nothing was left."""
    work = prepare(group)
    names = list(group.functions)
    if recheck:
        codes = verdicts(work, group)
        names = [n for n, c in codes.items() if c not in KILLED or c in TIMEOUTS]
        known = _listed_equivalent(work, [n for n in names if codes[n] in SURVIVED])
        names = [n for n in names if n not in known]
        if not names:
            print(f"{group.name}: nothing left to recheck")
            return None
    t0 = time.perf_counter()
    run_mutmut(group, work, names)
    return summarize(group, work, time.perf_counter() - t0)


def _listed_equivalent(work: Path, names: list[str]) -> set[str]:
    """The survivors among ``names`` that scripts/mutation_equivalent.toml lists: no test can kill them, and each
    would run every one of its tests again to survive once more."""
    equivalent = {(e["function"], e["change"].strip()) for e in load_equivalent()}
    out = set()
    for name, (function, change) in mutant_diffs(work, names).items():
        plus = _plus_line(change)
        if (function, plus) in equivalent:
            out.add(name)
    return out


def save(group: Group, summary: dict, keep_before: bool) -> None:
    """The group's JSON and the README; a recheck keeps the first full run's counts as "before"."""
    previous = OUT / f"{group.name}.json"
    if previous.exists():
        old = json.loads(previous.read_text())
        summary["seconds"] = summary["seconds"] or old.get("seconds", 0)  # --summarize ran nothing
        # a "before" from a run on other sources (no commit recorded: before the layering) is not this code's
        before = (old.get("before") or (old["modules"] if keep_before else None)) if old.get("commit") else None
        if before and any(m["not_run"] for m in before.values()):
            before = None  # an interrupted first run is no "before": its not-run mutants would count as survivors
        if before:
            summary["before"] = before
    previous.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    for mod, m in summary["modules"].items():
        print(f"{group.name:12} {mod:32} {m['killed']:4}/{m['mutants'] - m['equivalent']:<4} killed "
              f"({100 * m['score']:.1f} %), {m['survived']} survived, {m['equivalent']} equivalent")
    write_readme()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("groups", nargs="*", help=f"some of: {', '.join(g.name for g in GROUPS)} (default: all)")
    p.add_argument("--recheck", action="store_true", help="run again only the mutants not killed last time")
    p.add_argument("--summarize", action="store_true",
                   help="only write the report from what mutmut has recorded (an interrupted run: 'not run' counted)")
    args = p.parse_args()
    by_name = {g.name: g for g in GROUPS}
    unknown = [g for g in args.groups if g not in by_name]
    if unknown:
        sys.exit(f"unknown group {unknown[0]!r}: pick from {', '.join(by_name)}")
    OUT.mkdir(parents=True, exist_ok=True)
    for group in [by_name[g] for g in args.groups] or GROUPS:
        summary = summarize(group, WORK / group.name, 0) if args.summarize else run_group(group, args.recheck)
        if summary is not None:
            save(group, summary, keep_before=args.recheck)


if __name__ == "__main__":
    main()

"""Sweeps: a sweep config (configs/sweep/<name>.yaml) plus command-line overrides → points, each a list of run
overrides, and their state on disk.

The config names axes (schemes, seeds, training lengths, any ``grid`` key) and fixed overrides (presets, ``overrides``).
On the command line, ``key=a,b`` replaces the axis for ``key`` (Hydra's sweep syntax) and ``key=v`` fixes it; the
points are the Cartesian product. ``sweep=NAME`` picks the config and ``sweep.KEY=VALUE`` changes it:

    pe-bench sweep sweep=paper seed=0,1,2 train.seq_len=64,128 sweep.launcher=slurm sweep.slurm.partition=gpu
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pe_bench import schemes, tasks
from pe_bench.config import (GROUPS, Config, ConfigError, hydra_quoted, omegaconf_message, preset_names,
                             preset_path, validate)
from pe_bench.finetune import compose_finetune, compose_run
from pe_bench.runs import Run, RunMeta, State, finetune_of

LAUNCHERS = ("local", "slurm")


@dataclass
class LocalLauncher:
    parallel: int = 1  # processes at once; > 1 runs each point as its own `pe-bench train` process
    threads: int | None = None  # torch threads per process; None = the machine's cores / parallel


@dataclass
class SlurmLauncher:
    """One job array; each array task trains one point. Resources are per task."""

    partition: str | None = None
    time_min: int = 60  # wall-clock limit per task; on reaching it the task is requeued and resumes
    cpus_per_task: int = 4
    gpus_per_node: int = 0
    mem_gb: float = 16
    account: str | None = None
    qos: str | None = None
    array_parallelism: int = 32  # at most this many tasks of the array run at once (#SBATCH --array=0-N%P)
    ddp_processes: int = 1  # > 1: one run on several GPUs of a node (DDP, one Slurm task per process)
    max_requeues: int = 3  # requeues after hitting time_min (submitit's max_num_timeout)
    signal_delay_s: int = 120  # the signal to checkpoint and requeue comes this long before the limit
    constraint: str | None = None
    setup: list[str] = field(default_factory=list)  # shell lines run before the job, e.g. "module load cuda"
    additional: dict[str, str] = field(default_factory=dict)  # any other #SBATCH --key=value
    folder: str | None = None  # logs and submitit's files; default <results_dir>/slurm
    wait: bool = False  # block until the array finishes, then write the report
    poll_s: float = 10.0


@dataclass
class ExtensionConfig:
    """A sweep's fine-tuning stage (context extension): every finished point of the sweep is a parent, fine-tuned
    with each method for each budget of steps. Budget 0 is the parent itself, evaluated with the method's eval-time
    scheme options (today's eval-time rows, e.g. rope+yarn×8)."""

    methods: dict[str, list[str]] = field(default_factory=dict)  # name → its fine-tuning overrides
    steps: list[int] = field(default_factory=lambda: [0, 25, 100, 400])  # fine-tuning budgets
    overrides: list[str] = field(default_factory=list)  # every fine-tune's, before its method's


@dataclass
class SweepConfig:
    name: str = "default"
    schemes: list[str] = field(default_factory=lambda: ["all"])  # "all" = every registered scheme
    seeds: list[int] = field(default_factory=lambda: [0])
    seq_lens: list[int] | None = None  # training lengths L; None = the train preset's seq_len
    task: str = tasks.DEFAULT  # a task preset (configs/task); several: grid: {task: [passkey, copy]}
    model: str | None = "tiny"  # None: each point's task brings its model preset (a task's ``model``; else tiny)
    data: str = "shakespeare"
    train: str | None = "quick"  # None: each point's task brings its own recipe (a task's ``recipe``)
    eval: str = "default"
    grid: dict[str, list[Any]] = field(default_factory=dict)  # more axes: {model.n_layers: [2, 4]}
    # more points: a scheme of the sweep with options, after its plain one ({name: <scheme>, <option>: <value>};
    # e.g. [{name: rope, frequencies_kept: 0.75}, {name: rope, hope: true}])
    scheme_variants: list[dict[str, Any]] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)  # fixed overrides for every point
    out: str | None = None  # where the report goes; default <results_dir>/<name>
    launcher: str = "local"
    local: LocalLauncher = field(default_factory=LocalLauncher)
    slurm: SlurmLauncher = field(default_factory=SlurmLauncher)
    extension: ExtensionConfig | None = None  # a fine-tuning stage after the points (sweep=extension)


def sweep_names() -> list[str]:
    return preset_names("sweep")


def split_overrides(overrides: list[str]) -> tuple[str, list[str], list[str]]:
    """CLI arguments → (sweep config name, sweep.* overrides without the prefix, run overrides)."""
    name, sweep_keys, run_keys = "default", [], []
    for o in overrides:
        key, _, value = o.partition("=")
        if key == "sweep":
            name = value
        elif key.startswith("sweep."):
            sweep_keys.append(o[len("sweep."):])
        else:
            run_keys.append(o)
    return name, sweep_keys, run_keys


def load_sweep(name: str, overrides: list[str] = ()) -> SweepConfig:
    """configs/sweep/<name>.yaml merged onto the schema, then ``key=value`` overrides (dotted keys)."""
    path = preset_path("sweep", name)
    if not path.is_file():
        raise ConfigError(f"unknown sweep {name!r}; choose one of: {', '.join(sweep_names())} (configs/sweep/)")
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(SweepConfig), _load_with_defaults(path),
                              OmegaConf.from_dotlist(list(overrides)))
        methods = [o.partition("=")[2] for o in overrides if o.partition("=")[0] == "extension.methods"]
        if methods:  # a map of methods on the command line replaces the config's, not merges into it
            cfg.extension.methods = OmegaConf.from_dotlist([f"m={methods[-1]}"]).m
        sweep: SweepConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise ConfigError(omegaconf_message(e, "sweep", SweepConfig)) from None
    if sweep.launcher not in LAUNCHERS:
        raise ConfigError(f"sweep.launcher={sweep.launcher!r} is not one of: {', '.join(LAUNCHERS)}")
    ext = sweep.extension
    if ext is not None:
        if not ext.methods:
            raise ConfigError("sweep.extension.methods is empty: name at least one fine-tuning method, e.g. "
                              "{yarn: [scheme.scaling.type=yarn, scheme.scaling.factor=8]}")
        if not ext.steps or any(n < 0 for n in ext.steps):
            raise ConfigError(f"sweep.extension.steps={ext.steps} must list budgets >= 0 (0: the parent itself)")
    for key, value in (("sweep.local.parallel", sweep.local.parallel),
                       ("sweep.slurm.array_parallelism", sweep.slurm.array_parallelism),
                       ("sweep.slurm.ddp_processes", sweep.slurm.ddp_processes),
                       ("sweep.slurm.time_min", sweep.slurm.time_min)):
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}")
    return sweep


def _beside_or_preset(path: Path, name: str) -> Path:
    """A sweep config's default: the file of that name beside it, else the sweep preset of that name."""
    beside = path.with_name(f"{name}.yaml")
    return beside if beside.is_file() else preset_path("sweep", name)


def _load_with_defaults(path: Path, seen: tuple[Path, ...] = ()) -> Any:
    """A sweep YAML with Hydra's ``defaults: [other, _self_]`` list resolved among configs/sweep/*.yaml."""
    if path in seen:
        raise ConfigError(f"configs/sweep/{path.stem}.yaml includes itself through its defaults list")
    own = OmegaConf.load(path)
    order = list(own.pop("defaults", None) or ["_self_"])
    if "_self_" not in order:
        order.append("_self_")
    parts = [own if d == "_self_" else _load_with_defaults(_beside_or_preset(path, d), (*seen, path))
             for d in order]
    return OmegaConf.merge(*parts)


def _axes(sweep: SweepConfig) -> dict[str, list[str]]:
    """The sweep config as override axes, key → values (one value: fixed)."""
    names = schemes.available() if "all" in sweep.schemes else list(sweep.schemes)
    axes: dict[str, list[str]] = {
        "seed": [str(s) for s in sweep.seeds],
        "model": [sweep.model], "data": [sweep.data], "eval": [sweep.eval],
    }
    if sweep.model is None:  # each point's task brings its model preset
        axes.pop("model")
    if sweep.eval == "default":  # the run's own rule decides: train=smoke brings eval=smoke (pe_bench.config.compose)
        axes.pop("eval")
    if sweep.train is not None:
        axes["train"] = [sweep.train]
    if sweep.task != tasks.DEFAULT:  # (the default task's overrides stay what they were before tasks existed)
        axes["task"] = [sweep.task]
    if sweep.seq_lens:
        axes["train.seq_len"] = [str(n) for n in sweep.seq_lens]
    for key, values in sweep.grid.items():
        axes[key] = [_value(v) for v in (values if isinstance(values, list) else [values])]
    for o in sweep.overrides:
        key, _, value = o.partition("=")
        axes[key] = [value]
    axes.setdefault("logger.group", [sweep.name])  # a tracker files the sweep's runs together (W&B group)
    axes["scheme"] = names
    return axes


def _value(v: Any) -> str:
    return OmegaConf.to_yaml(v).strip() if isinstance(v, (list, dict)) else str(v)


def expand(sweep: SweepConfig, overrides: list[str]) -> list[list[str]]:
    """Override lists, one per point: the config's axes, each replaced by a command-line override of the same key."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors are several unrelated classes
        raise ConfigError(f"cannot parse overrides: {str(e).splitlines()[0]}") from None
    final = {key: [f"{key}={v}" for v in values] for key, values in _axes(sweep).items()}
    for o in parsed:
        key = o.get_key_element()
        if o.value_type == ValueType.GLOB_CHOICE_SWEEP:  # scheme=glob(kerple*): among the group's presets
            if key not in GROUPS:
                raise ConfigError(f"'{o.input_line}': glob() picks presets of a config group ({', '.join(GROUPS)})")
            final[key] = [f"{key}={v}" for v in o.value().filter(preset_names(key))]
            if not final[key]:
                raise ConfigError(f"'{o.input_line}' matches none of: {', '.join(preset_names(key))}")
        elif o.is_sweep_override():
            final[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
        else:
            final[key] = [o.input_line]
    final["scheme"] = final.pop("scheme")  # innermost: a complete table per seed comes first
    variants = [] if any(o.get_key_element() == "scheme" for o in parsed) else sweep.scheme_variants
    for i, variant in enumerate(variants):  # (schemes named on the command line replace the config's, variants too)
        if not isinstance(variant, dict) or variant.get("name") not in schemes.available():
            raise ConfigError(f"sweep.scheme_variants[{i}]={variant}: give {{name: <scheme>, <option>: <value>}} with a "
                              f"registered scheme ({', '.join(schemes.available())})")
    schemes_axis = []
    for o in final["scheme"]:
        schemes_axis.append([o])
        for variant in variants:
            if variant.get("name") == o.partition("=")[2]:
                options = {k: v for k, v in variant.items() if k != "name"}
                schemes_axis.append([o, *_option_overrides("scheme", options)])
    final["scheme"] = schemes_axis
    return [[o for part in point for o in (part if isinstance(part, list) else [part])]
            for point in itertools.product(*final.values())]


def _option_overrides(prefix: str, options: dict[str, Any]) -> list[str]:
    """{scaling: {type: yarn}, hope: true} -> ['scheme.scaling.type=yarn', 'scheme.hope=true']."""
    out = []
    for key, value in options.items():
        if isinstance(value, dict):
            out += _option_overrides(f"{prefix}.{key}", value)
        else:
            out.append(f"{prefix}.{key}={_value(value).lower() if isinstance(value, bool) else _value(value)}")
    return out


@dataclass
class Point:
    """One run of a sweep: its overrides, its validated config, its run directory, and what is left to do."""

    overrides: list[str]
    cfg: Config
    run: Run
    state: str = "new"  # new | done | resume | running | queued | retry | diverged | corrupt
    detail: str = ""
    short: str = ""  # the overrides that differ between the sweep's points
    meta: RunMeta = field(default_factory=RunMeta)  # the run's meta.json as last read

    @property
    def label(self) -> str:
        return self.short or " ".join(self.overrides)


def plan(points: list[list[str]]) -> list[Point]:
    """Validate every point (before anything runs) and read its state from its run directory."""
    out = []
    for overrides in points:
        cfg = compose_run(overrides)
        out.append(inspect(Point(overrides, cfg, Run.for_config(cfg))))
    width = max((len(p) for p in points), default=0)
    varying = [i for i in range(width) if len({p[i] if i < len(p) else None for p in points}) > 1]
    for p in out:
        p.short = " ".join(p.overrides[i] for i in varying if i < len(p.overrides))
    names = [p.run.path for p in out]
    if len(set(names)) < len(names):
        first = next(n for n in names if names.count(n) > 1)
        a, b = [p for p in out if p.run.path == first][:2]
        raise ConfigError(f"two sweep points give the same run ({a.run.path.name}); {_why_same(a, b)}")
    return out


def _why_same(a: Point, b: Point) -> str:
    """Why two points are one run: the overrides they differ in name no part of a run (evaluation or bookkeeping
    settings), or none differ (a list repeats a value)."""
    differ = [o for o in a.overrides if o not in b.overrides] + [o for o in b.overrides if o not in a.overrides]
    if not differ:
        return "an override list repeats a value or sets a key twice"
    said = f"they differ only in {', '.join(differ)}, which names no run"
    if all(o.lstrip("+~").startswith("eval.") for o in differ):
        return (f"{said} (evaluation settings): sweep one of them, then evaluate the finished runs again with "
                "`pe-bench eval RUN <setting>` (e.g. eval.split=test)")
    return f"{said}: sweep one value of it"


TODO = ("new", "retry", "resume")  # the states a sweep trains (every other point is skipped or left out)
BUSY = ("running", "queued")  # another process or a Slurm task has the point: the sweep leaves it alone
_SKIPPED = {State.DONE: "done", State.QUEUED: "queued", State.RUNNING: "running", State.DIVERGED: "diverged",
            State.UNREADABLE: "corrupt"}  # a run's State → the state of a point the sweep does not train
LEFT = ("diverged", "corrupt")  # not run again, counted as failures: a deterministic run diverges again; an
# unreadable run directory needs a person (the message says what to do), and never blocks the other points


def squeue_tasks(job: str) -> int | None:
    """How many tasks of a job (an array, or one array task ``123_4``) Slurm still holds — pending, running,
    requeued; 0 once it has left the queue; None when squeue did not answer (or there is no Slurm here)."""
    import shutil
    import subprocess

    if shutil.which("squeue") is None:
        return None
    try:
        p = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%i %T"], capture_output=True, text=True,
                           timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if p.returncode != 0:  # also "Invalid job id" once Slurm has purged a finished job (MinJobAge)
        return 0 if "Invalid job id" in p.stderr else None
    return len([ln for ln in p.stdout.splitlines() if ln.strip()])


def slurm_job_alive(job: str) -> bool:
    """True while Slurm still holds this job or array task (pending, running, requeued)."""
    return bool(squeue_tasks(job))


def inspect(point: Point) -> Point:
    """Set the point's state from its run's (pe_bench.runs.state_of): done (skip), queued (held by a Slurm job),
    running (locked by another process), resume (a checkpoint at step k), retry (failed before), new; diverged and
    corrupt (unreadable) are left out."""
    from pe_bench.runs import state_of

    now = state_of(point.run, slurm_job_alive)
    point.meta = now.meta
    steps, at = point.cfg.train.steps, now.meta.checkpoint_step
    if now.state in _SKIPPED:
        point.state = _SKIPPED[now.state]
        point.detail = {State.DIVERGED: f"{now.detail} before: not retried (the same config diverges again; change "
                                        "train.lr, or delete the run directory to retry)",
                        State.UNREADABLE: now.detail}.get(now.state, f"{now.detail}: skipped")
    elif now.checkpoint:
        point.state = "resume"
        point.detail = "resumes from its checkpoint" + (f" (step {at}/{steps})" if at is not None else "")
    elif now.state == State.FAILED:
        point.state, point.detail = "retry", f"failed before ({now.meta.error or '?'}): retried"
    else:
        point.state, point.detail = "new", "to train"
    return point


def cpu_kernels_apart(points: list[Point]) -> str | None:
    """One line when finished points were made with other CPU kernels than this machine dispatches to and points
    remain to train here: the new runs will be rows apart from theirs in the report. None otherwise (or on a GPU)."""
    import torch

    from pe_bench.runs import cpu_isa, numerics_of

    if torch.cuda.is_available() or not any(p.state in TODO for p in points):
        return None
    here = cpu_isa()
    apart: dict[str, int] = {}
    for p in points:
        m = re.match(r"torch [^,]+, cpu (.+), \d+ threads$", numerics_of(p.meta)) if p.state == "done" else None
        if m and m.group(1) != here:
            apart[m.group(1)] = apart.get(m.group(1), 0) + 1
    if not apart:
        return None
    made = ", ".join(f"{n} with {isa}" for isa, n in sorted(apart.items()))
    return (f"finished points were made with other CPU kernels ({made}) than this machine's ({here}): the runs "
            "trained here will be rows apart from theirs in the report (docs/trust.md, \"Determinism\", says how "
            "to match them)")


def check_data(points: list[Point]) -> None:
    """Fail before any training when a point's evaluation split is too short for its lengths (loads each corpus
    once)."""
    from pe_bench.data import load_tokens
    from pe_bench.evaluate.perplexity import check_feasible

    sizes: dict[str, int] = {}
    for p in points:
        if p.state == "done" or tasks.get(p.cfg.task.name).metric != "perplexity":  # examples of its own
            continue
        key = OmegaConf.to_yaml(OmegaConf.structured(p.cfg.data)) + p.cfg.cache_dir + p.cfg.eval.split
        if key not in sizes:
            sizes[key] = len(load_tokens(p.cfg.data, p.cfg.cache_dir).splits[p.cfg.eval.split])
        check_feasible(p.cfg, sizes[key])


def report_dir(sweep: SweepConfig, points: list[Point]) -> Path:
    return Path(sweep.out) if sweep.out else Path(points[0].cfg.results_dir) / sweep.name


def check_report_dir(sweep: SweepConfig, points: list[Point], committed: set[str] | None) -> None:
    """Refuse, before anything runs, a sweep whose report directory holds files git tracks (``committed``: the runs
    that report was made from; None where git tracks nothing there) unless the sweep's grid is that report's, whatever
    the sweep is named: committed results are rewritten only by the grid that made them, or go to a place the user
    names."""
    if committed is None:
        return
    out = report_dir(sweep, points)
    names = {p.run.path.name for p in points}
    children = {n: finetune_of(n) for n in committed if finetune_of(n) is not None}
    stems = {n.rsplit("-", 1)[0] for n in names} if sweep.extension is not None else set()
    strays = sorted((committed - set(children) - names) | {n for n, stem in children.items() if stem not in stems})
    missing = sorted(names - committed)
    if not strays and not missing:
        return
    said = "; ".join(f"{what}: {', '.join(some[:3])}{' …' * (len(some) > 3)} ({len(some)})"
                     for what, some in (("runs it holds that this sweep lacks", strays),
                                        ("this sweep's runs it lacks", missing)) if some)
    raise ConfigError(f"{out} holds committed results (git tracks its files) made from another grid than this sweep's "
                      f"({said}): give the report another place with --out DIR (or results_dir=DIR)")


def evaluate_finished(points: list[Point], say: Callable[[str], None]) -> list[str]:
    """Every point that was finished before this sweep, evaluated at the sweep's settings where its rows for them
    are missing (a run trained by `pe-bench train` with other evaluation settings; rows already there are kept).
    Returns one line per point that could not be (busy, or its checkpoint is gone): the report names them."""
    from pe_bench.experiment import evaluate_run
    from pe_bench.runs import RunBusy, RunFileError

    unevaluated = []
    for p in points:
        if p.state != "done":
            continue
        try:
            with p.run.lock():
                rows = evaluate_run(p.run, p.cfg, only_missing=True, trained=p.run.load_config(), progress=False)
        except (RunBusy, RunFileError) as e:
            unevaluated.append(f"{p.run.path.name}: not evaluated at this sweep's settings ({e})")
            continue
        if rows:
            say(f"{p.run.path.name}: finished before, evaluated at this sweep's settings ({len(rows)} rows)")
    return unevaluated


# ---------------------------------------------------------------------------------------------------------------
# How long the points still to do will take, from finished runs of the same shape
# ---------------------------------------------------------------------------------------------------------------


def estimate(points: list[Point], parallel: int = 1) -> tuple[float | None, str]:
    """(seconds, basis) for the points still to do, from the finished runs in their results directories.

    A point's time is the median wall time of finished runs of the same shape (model, vocabulary, train recipe —
    steps, batch, seq_len, grad_accum — evaluation lengths/modes/budgets, scheme), or failing that of any scheme with
    the same model, recipe and evaluation (said in the basis); a resumed point counts the training still to do from
    its checkpoint_step. ``parallel`` points at once: the total divided among them (never less than the longest
    point). Any point with no such run → (None, why): unknown rather than a guess."""
    from pe_bench.config import to_dict

    todo = [p for p in points if p.state in TODO]
    if not todo:
        return 0.0, "nothing to do"
    finished = _finished_runs({Path(p.cfg.results_dir) / "runs" for p in todo})
    times, fallback, unknown, used, devices = [], 0, 0, set(), set()
    for p in todo:
        shape = _shape(to_dict(p.cfg))
        matches = [f for f in finished if f[0] == shape and f[1] == p.cfg.scheme["name"]]
        if not matches:
            matches = [f for f in finished if f[0] == shape]
            fallback += bool(matches)
        if not matches:
            unknown += 1
            continue
        used.update(f[4] for f in matches)
        devices.update(f[5] for f in matches)
        wall = statistics.median([f[2] for f in matches])
        train_part = statistics.median([f[3] for f in matches])
        left = 1.0
        if p.state == "resume":
            at = p.meta.checkpoint_step
            left = 1.0 - min(int(at), p.cfg.train.steps) / p.cfg.train.steps if at is not None else 1.0
        times.append(wall - train_part * (1.0 - left))
    if unknown:
        if unknown == len(todo):
            return None, "no finished run of this shape: unknown"
        return None, (f"unknown: {unknown} of {len(todo)} points to do have no finished run of their shape (the "
                      f"other {len(todo) - unknown}: ~{_say_duration(sum(times))})")
    total = sum(times)
    if parallel > 1:
        total = max(total / min(parallel, len(times)), max(times))
    basis = f"from {len(used)} finished run{'s' * (len(used) != 1)} of the same shape"
    if fallback:
        basis += f" ({fallback} point{'s' * (fallback != 1)} from runs of another scheme, same model and recipe)"
    basis += f", on {devices.pop()}" if len(devices) == 1 else ", on several devices"
    if parallel > 1:
        basis += f", {parallel} at once"
    return total, basis


def _say_duration(seconds: float) -> str:
    from pe_bench.progress import duration

    return duration(seconds)


def _shape(d: dict[str, Any]) -> tuple:
    """What sets a run's cost: model, vocabulary, train recipe, evaluation (from a config as a plain dict)."""
    from types import SimpleNamespace

    from pe_bench.config import eval_lengths

    m, data, t, e = d["model"], d["data"], d["train"], d["eval"]
    task = d.get("task") or {"name": tasks.DEFAULT}
    ecfg = SimpleNamespace(lengths=e.get("lengths"), ratios=e.get("ratios"))
    original = (d.get("finetune") or {}).get("original_seq_len")
    lengths = sorted(set(eval_lengths(ecfg, t["seq_len"])) | set(eval_lengths(ecfg, original) if original else ()))
    return (tuple(sorted((k, v) for k, v in m.items() if k != "name")),
            data.get("tokenizer"), data.get("vocab_size") if data.get("tokenizer") != "byte" else None,
            t["steps"], t["batch_size"], t["seq_len"], t.get("grad_accum", 1), t.get("pose_target", 0),
            tuple(lengths), tuple(e.get("modes") or ()), e.get("max_tokens"), e.get("sliding_max_tokens"),
            e.get("stride"), e.get("variants"),
            () if task.get("name", tasks.DEFAULT) == tasks.DEFAULT else tuple(sorted(task.items())))


def _finished_runs(dirs: set[Path]) -> list[tuple[tuple, str, float, float, str, str]]:
    """(shape, scheme name, wall seconds, training seconds, run name, device) of every finished run under dirs.

    A resumed run's wall_seconds is its last session's only: its time is then train_seconds (summed over the
    sessions) + eval_seconds. Unreadable run directories are passed over."""
    import yaml

    from pe_bench.runs import RunFileError, Status

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = []
    for root in sorted(dirs):
        for meta_path in sorted(root.glob("*/meta.json")) if root.is_dir() else []:
            try:
                meta = Run(meta_path.parent).meta()
                if meta.status != Status.DONE or meta.wall is None:
                    continue
                d = yaml.load((meta_path.parent / "config.yaml").read_text(encoding="utf-8"), Loader=loader)
                out.append((_shape(d), d["scheme"]["name"], meta.wall, min(meta.train_seconds or 0.0, meta.wall),
                            meta_path.parent.name, meta.device or "?"))
            except (OSError, KeyError, TypeError, AttributeError, yaml.YAMLError, RunFileError):
                continue
    return out


# ---------------------------------------------------------------------------------------------------------------
# The fine-tuning stage (sweep.extension)
# ---------------------------------------------------------------------------------------------------------------


def finetune_points(sweep: SweepConfig, parents: list[Point]) -> list[Point]:
    """The fine-tunes of the finished parents: parent × method × budget > 0, each a `pe-bench train
    finetune.from_run=...` override list (so every launcher runs them as it runs any point)."""
    ext = sweep.extension
    if ext is None or not parents:
        return []
    lists, shorts = [], []
    for parent in parents:
        for name, overrides in ext.methods.items():
            for n in (n for n in ext.steps if n > 0):
                lists.append([f"finetune.from_run={hydra_quoted(str(parent.run.path))}", *ext.overrides, *overrides,
                              f"train.steps={n}"])
                shorts.append(f"{parent.run.path.name} → {name}, {n} steps")
    points = plan(lists)
    for p, short in zip(points, shorts):
        p.short = short
    return points


def baseline_configs(sweep: SweepConfig, parent: Point) -> dict[str, Config]:
    """Budget 0 of each method: the parent's config with the evaluation of the method's fine-tunes and the method's
    eval-time scheme options (no other variants) — what `pe-bench eval` of the parent with those options measures."""
    ext = sweep.extension
    out = {}
    for name, overrides in (ext.methods.items() if ext else ()):
        child = compose_finetune(parent.run.path, [*ext.overrides, *overrides, "train.steps=1"])
        raw = OmegaConf.structured(parent.cfg)
        raw.eval = OmegaConf.structured(child.eval)
        raw.scheme = {**child.scheme, "eval_variants": []}
        out[name] = validate(raw)
    return out


def evaluate_baselines(sweep: SweepConfig, parents: list[Point], say: Callable[[str], None]) -> None:
    """Budget 0 of every method: each parent evaluated with the method's eval-time options and its fine-tunes'
    evaluation settings (rows already there are kept: nothing is evaluated twice)."""
    from pe_bench.experiment import evaluate_run
    from pe_bench.runs import RunBusy

    for parent in parents:
        seen = set()
        for name, cfg in baseline_configs(sweep, parent).items():
            key = (str(cfg.scheme), str(cfg.eval))
            if key in seen:
                continue
            seen.add(key)
            try:
                with parent.run.lock():
                    rows = evaluate_run(parent.run, cfg, only_missing=True, trained=parent.cfg, progress=False)
            except RunBusy:
                say(f"{parent.run.path.name} is busy: budget 0 of {name} is not evaluated now")
                continue
            if rows:
                say(f"{parent.run.path.name}: evaluated {rows[0]['scheme']} (budget 0 of {name})")

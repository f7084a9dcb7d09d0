"""Sweeps: a sweep config (configs/sweep/<name>.yaml) plus command-line overrides → points, each a list of run
overrides, and their state on disk.

The config names axes (schemes, seeds, training lengths, any ``grid`` key) and fixed overrides (presets, ``overrides``).
On the command line, ``key=a,b`` replaces the axis for ``key`` (Hydra's sweep syntax) and ``key=v`` fixes it; the
points are the Cartesian product. ``sweep=NAME`` picks the config and ``sweep.KEY=VALUE`` changes it:

    pe-bench sweep sweep=paper seed=0,1,2 train.seq_len=64,128 sweep.launcher=slurm sweep.slurm.partition=gpu
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pe_bench import schemes
from pe_bench.config import GROUPS, Config, ConfigError, _omegaconf_message, compose, config_dir, preset_names
from pe_bench.runs import Run, run_dir_for

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
class SweepConfig:
    name: str = "default"
    schemes: list[str] = field(default_factory=lambda: ["all"])  # "all" = every registered scheme
    seeds: list[int] = field(default_factory=lambda: [0])
    seq_lens: list[int] | None = None  # training lengths L; None = the train preset's seq_len
    model: str = "tiny"
    data: str = "shakespeare"
    train: str = "quick"
    eval: str = "default"
    grid: dict[str, list[Any]] = field(default_factory=dict)  # more axes: {model.n_layers: [2, 4]}
    overrides: list[str] = field(default_factory=list)  # fixed overrides for every point
    out: str | None = None  # where the report goes; default <results_dir>/<name>
    launcher: str = "local"
    local: LocalLauncher = field(default_factory=LocalLauncher)
    slurm: SlurmLauncher = field(default_factory=SlurmLauncher)


def sweep_names() -> list[str]:
    return sorted(p.stem for p in (config_dir() / "sweep").glob("*.yaml"))


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
    path = config_dir() / "sweep" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown sweep {name!r}; choose one of: {', '.join(sweep_names())} (configs/sweep/)")
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(SweepConfig), _load_with_defaults(path),
                              OmegaConf.from_dotlist(list(overrides)))
        sweep: SweepConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise ConfigError(_omegaconf_message(e, "sweep", SweepConfig)) from None
    if sweep.launcher not in LAUNCHERS:
        raise ConfigError(f"sweep.launcher={sweep.launcher!r} is not one of: {', '.join(LAUNCHERS)}")
    for key, value in (("sweep.local.parallel", sweep.local.parallel),
                       ("sweep.slurm.array_parallelism", sweep.slurm.array_parallelism),
                       ("sweep.slurm.ddp_processes", sweep.slurm.ddp_processes),
                       ("sweep.slurm.time_min", sweep.slurm.time_min)):
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}")
    return sweep


def _load_with_defaults(path: Path, seen: tuple[Path, ...] = ()) -> Any:
    """A sweep YAML with Hydra's ``defaults: [other, _self_]`` list resolved among configs/sweep/*.yaml."""
    if path in seen:
        raise ConfigError(f"configs/sweep/{path.stem}.yaml includes itself through its defaults list")
    own = OmegaConf.load(path)
    order = list(own.pop("defaults", None) or ["_self_"])
    if "_self_" not in order:
        order.append("_self_")
    parts = [own if d == "_self_" else _load_with_defaults(path.with_name(f"{d}.yaml"), (*seen, path))
             for d in order]
    return OmegaConf.merge(*parts)


def _axes(sweep: SweepConfig) -> dict[str, list[str]]:
    """The sweep config as override axes, key → values (one value: fixed)."""
    names = schemes.available() if "all" in sweep.schemes else list(sweep.schemes)
    axes: dict[str, list[str]] = {
        "seed": [str(s) for s in sweep.seeds],
        "model": [sweep.model], "data": [sweep.data], "train": [sweep.train], "eval": [sweep.eval],
    }
    if sweep.seq_lens:
        axes["train.seq_len"] = [str(n) for n in sweep.seq_lens]
    for key, values in sweep.grid.items():
        axes[key] = [_value(v) for v in (values if isinstance(values, list) else [values])]
    for o in sweep.overrides:
        key, _, value = o.partition("=")
        axes[key] = [value]
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
    return [list(point) for point in itertools.product(*final.values())]


@dataclass
class Point:
    """One run of a sweep: its overrides, its validated config, its run directory, and what is left to do."""

    overrides: list[str]
    cfg: Config
    run: Run
    state: str = "new"  # new | done | resume | running | queued | retry | diverged | corrupt
    detail: str = ""
    short: str = ""  # the overrides that differ between the sweep's points
    meta: dict[str, Any] = field(default_factory=dict)  # the run's meta.json as last read

    @property
    def label(self) -> str:
        return self.short or " ".join(self.overrides)


def plan(points: list[list[str]]) -> list[Point]:
    """Validate every point (before anything runs) and read its state from its run directory."""
    out = []
    for overrides in points:
        cfg = compose(overrides)
        out.append(inspect(Point(overrides, cfg, Run(run_dir_for(cfg)))))
    varying = [i for i in range(len(points[0])) if len({tuple(p)[i] for p in points}) > 1] if points else []
    for p in out:
        p.short = " ".join(p.overrides[i] for i in varying)
    names = [p.run.path for p in out]
    if len(set(names)) < len(names):
        dup = next(p for p in out if names.count(p.run.path) > 1)
        raise ConfigError(f"two sweep points give the same run ({dup.run.path.name}); an override list repeats "
                          "a value or sets a key twice")
    return out


BUSY = ("running", "queued")  # another process or a Slurm task has the point: the sweep leaves it alone
LEFT = ("diverged", "corrupt")  # not run again, counted as failures: a deterministic run diverges again; an
# unreadable run directory needs a person (the message says what to do), and never blocks the other points


def slurm_job_alive(job: str) -> bool:
    """True while Slurm still holds this job or array task (pending, running, requeued)."""
    import shutil
    import subprocess

    if shutil.which("squeue") is None:
        return False
    try:
        p = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30,
                           check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0 and bool(p.stdout.strip())


def inspect(point: Point) -> Point:
    """Set the point's state: done (skip), queued (held by a Slurm job), running (locked by another process),
    resume (checkpoint at step k), retry (failed before), new."""
    from pe_bench.experiment import is_done

    from pe_bench.runs import RunFileError

    run = point.run
    try:
        meta = point.meta = run.meta()
        if run.config.exists():
            run.load_config()
    except RunFileError as e:
        point.state, point.detail, point.meta = "corrupt", f"{e}", {}
        return point
    steps = point.cfg.train.steps
    job = meta.get("slurm_job")
    if meta.get("status") == "diverged":
        point.state = "diverged"
        point.detail = (f"diverged at step {meta.get('diverged_step')} before: not retried (the same config "
                        "diverges again; change train.lr, or delete the run directory to retry)")
    elif is_done(run):
        point.state, point.detail = "done", "finished: skipped"
    elif job and slurm_job_alive(job):  # queued, running, or requeued after its time limit
        point.state, point.detail = "queued", f"in Slurm job {job}: skipped"
    elif run.is_locked():
        point.state, point.detail = "running", "being trained by another process: skipped"
    elif run.checkpoint.exists():
        at = meta.get("checkpoint_step")
        point.state = "resume"
        point.detail = "resumes from its checkpoint" + (f" (step {at}/{steps})" if at is not None else "")
    elif meta.get("status") == "failed":
        point.state, point.detail = "retry", f"failed before ({meta.get('error', '?')}): retried"
    else:
        point.state, point.detail = "new", "to train"
    return point


def check_data(points: list[Point]) -> None:
    """Fail before any training when a point's evaluation split is too short for its lengths (loads each corpus
    once)."""
    from pe_bench.data import load_tokens
    from pe_bench.evaluate import check_feasible

    sizes: dict[str, int] = {}
    for p in points:
        if p.state == "done":
            continue
        key = OmegaConf.to_yaml(OmegaConf.structured(p.cfg.data)) + p.cfg.cache_dir + p.cfg.eval.split
        if key not in sizes:
            sizes[key] = len(load_tokens(p.cfg.data, p.cfg.cache_dir).splits[p.cfg.eval.split])
        check_feasible(p.cfg, sizes[key])


def report_dir(sweep: SweepConfig, points: list[Point]) -> Path:
    return Path(sweep.out) if sweep.out else Path(points[0].cfg.results_dir) / sweep.name

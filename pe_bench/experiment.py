"""One run end to end: config → data → model → trainer → run directory → evaluator."""

from __future__ import annotations

import time

import torch

from pe_bench.config import Config, scheme_spec, with_options
from pe_bench.data import TokenizedCorpus, load_tokens
from pe_bench.device import resolve_device
from pe_bench.distributed import StopRequested, barrier, shutdown, world_from_env
from pe_bench.evaluate import EVAL_COLUMNS, POSITION_COLUMNS, check_feasible, evaluate
from pe_bench.model import Decoder
from pe_bench.runs import Run, read_csv, run_dir_for, write_csv
from pe_bench.train import load_trained, train


def is_done(run: Run) -> bool:
    return run.status == "done" and run.eval_csv.exists() and run.checkpoint.exists()


def run_one(cfg: Config, progress: bool = True) -> Run:
    """Train (resuming from a checkpoint if one exists) and evaluate one config. Returns its run directory.

    Any failure is recorded in the run's meta.json (status failed/interrupted, error) before it propagates. Under
    torchrun/DDP every process trains and rank 0 alone writes the run directory and evaluates."""
    run = Run(run_dir_for(cfg))
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    device = resolve_device(cfg.train.device)
    world = world_from_env(device)
    try:
        corpus = load_tokens(cfg.data, cfg.cache_dir)
        check_feasible(cfg, len(corpus.splits[cfg.eval.split]))  # bad input fails before the run directory exists
        if not world.is_main:  # a DDP worker: trains its share, writes nothing
            train(cfg, run, corpus, device, progress=False, world=world)
            barrier(world)  # rank 0 evaluates; the others wait for it before leaving the process group
            return run
        run.create(cfg)
        t0 = time.perf_counter()
        with run.lock():
            run.update_meta(status="running", run_name=run.path.name, scheme=cfg.scheme["name"],
                            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), error=None, processes=world.size,
                            **Run.environment(device))
            try:
                model = train(cfg, run, corpus, device, progress, world)
                t1 = time.perf_counter()
                evaluate_run(run, cfg, corpus, device, model)
                run.update_meta(eval_seconds=round(time.perf_counter() - t1, 2))
                barrier(world)
            except BaseException as e:
                record_failure(run, e, time.perf_counter() - t0)
                raise
            run.update_meta(status="done", wall_seconds=round(time.perf_counter() - t0, 2))
    finally:
        shutdown(world)
    return run


def record_failure(run: Run, error: BaseException, seconds: float | None = None) -> None:
    """Status (interrupted: resumable; failed) and the one-line error in the run's meta.json."""
    stopped = isinstance(error, (KeyboardInterrupt, StopRequested))
    fields = {"status": "interrupted" if stopped else "failed", "error": f"{type(error).__name__}: {error}"}
    if seconds is not None:
        fields["wall_seconds"] = round(seconds, 2)
    run.update_meta(**fields)


def evaluate_run(run: Run, cfg: Config, corpus: TokenizedCorpus | None = None, device: torch.device | None = None,
                 model: Decoder | None = None) -> list[dict]:
    """Evaluate the run's model and its scheme's eval-time variants; merge the rows into eval.csv/positions.csv
    (rows for the same scheme variant, split, length, mode and stride are replaced). Returns this evaluation's rows."""
    device = device or resolve_device(cfg.train.device)
    corpus = corpus or load_tokens(cfg.data, cfg.cache_dir)
    spec = scheme_spec(cfg.scheme)
    specs = [spec] + ([with_options(spec, v) for v in spec.eval_variants] if cfg.eval.variants else [])
    tokens = corpus.splits[cfg.eval.split]
    rows: list[dict] = []
    pos_rows: list[dict] = []
    seen: set[str] = set()
    for i, sp in enumerate(specs):
        m = model if (i == 0 and model is not None) else load_trained(run, cfg, device, sp)
        if m.scheme.label() in seen:
            continue
        seen.add(m.scheme.label())
        r, p = evaluate(m, cfg, tokens, corpus.token_bytes, device)
        rows += r
        pos_rows += p
    _merge(run.eval_csv, rows, EVAL_COLUMNS, ("scheme", "split", "L_eval", "mode", "stride"))
    _merge(run.positions_csv, pos_rows, POSITION_COLUMNS, ("scheme", "split", "L_eval", "pos_start"))
    return rows


def _merge(path, new: list[dict], columns: list[str], key: tuple[str, ...]) -> None:
    def k(r: dict) -> tuple[str, ...]:
        return tuple(str(r[c]) for c in key)

    fresh = {k(r) for r in new}
    kept = [r for r in read_csv(path) if k(r) not in fresh]
    write_csv(path, kept + new, columns)

"""One run end to end: config → data → model → trainer → run directory → evaluator."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import torch

from pe_bench import plugins, schemes, tasks
from pe_bench.build import build_scheme
from pe_bench.config import (Config, ConfigError, compile_problem, fixed_option_changes, reference_length,
                             run_lengths, scheme_spec, to_dict, with_options)
from pe_bench.data import TokenizedCorpus, load_data
from pe_bench.device import resolve_device, use_bf16, use_compile
from pe_bench.distributed import StopRequested, World, any_across, barrier, shutdown, world_from_env
from pe_bench.evaluate.accuracy import ACCURACY_COLUMNS, ACCURACY_KEY, evaluate_accuracy
from pe_bench.evaluate.accuracy import summary as accuracy_summary
from pe_bench.evaluate.perplexity import (CONTEXT_COLUMNS, CONTEXT_KEY, EVAL_COLUMNS, EVAL_KEY, KEY_DEFAULTS,
                                         POSITION_COLUMNS, POSITION_KEY, WINDOW_COLUMNS, WINDOW_KEY, Evaluation,
                                         check_feasible, evaluate, passes)
from pe_bench.evaluate.repetition import REPETITION_COLUMNS, REPETITION_KEY, distances, passage_tokens
from pe_bench.model.decoder import Decoder
from pe_bench.progress import duration, run_summary, say
from pe_bench.runs import (Run, RunBusy, RunFileError, Status, check_checkpoint, digest, file_sha256, identity, read_csv,
                           write_csv)
from pe_bench.tasks import TaskData
from pe_bench.tracking import open_tracker
from pe_bench.train import Diverged, load_trained, train

WINDOWS_CSV = "windows.csv"


def pin_threads(cfg: Config) -> None:
    """The run's CPU thread count (train.threads; null: torch's default), for its training and for every later
    evaluation of it alike: a reduction over another thread count is other numerics than the run records."""
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)


def run_one(cfg: Config, progress: bool = True) -> Run:
    """Train (resuming from a checkpoint if one exists) and evaluate one config. Returns its run directory.

    A finished run is never trained or re-recorded again: only evaluation rows missing for the current eval
    settings are added. Any failure is recorded in the run's meta.json (status failed/interrupted/diverged, error)
    before it propagates. Under torchrun/DDP every process trains and rank 0 alone writes the run directory and
    evaluates. Another process holding the run → RunBusy, and this one touches nothing."""
    run = Run.for_config(cfg)
    pin_threads(cfg)
    device = resolve_device(cfg.train.device)
    world = world_from_env(device)
    problem = compile_problem(cfg.train, device.type, world.size)
    if problem:
        raise ConfigError(problem)
    try:
        corpus = load_data(cfg)
        if isinstance(corpus, TokenizedCorpus):  # bad input fails before the run directory exists
            check_feasible(cfg, len(corpus.splits[cfg.eval.split]))
        with ExitStack() as held:
            # Rank 0 takes the lock before anything is written (of two processes, the loser touches nothing) and
            # decides for every rank: busy / unreadable, finished, or to train. Under DDP the decision is shared
            # so that no rank waits for a collective the others never reach.
            refusal, done = None, False
            if world.is_main:
                run.path.mkdir(parents=True, exist_ok=True)
                try:
                    held.enter_context(run.lock())
                    done = run.is_trained()  # its evaluation rows may be gone: evaluated again, never retrained
                except (RunBusy, RunFileError) as e:
                    refusal = e
            if any_across(world, refusal is not None, device):
                if refusal is not None:
                    raise refusal
                return run
            if any_across(world, done, device):  # finished: never trained or re-recorded; add missing rows only
                if world.is_main:
                    check_same_run(run, cfg)
                    evaluate_run(run, cfg, corpus, device, only_missing=True)
                barrier(world)
                return run
            if not world.is_main:  # a DDP worker: trains its share, writes nothing
                train(cfg, run, corpus, device, progress=False, world=world)
                barrier(world)  # rank 0 evaluates; the others wait for it before leaving the process group
                return run
            _train_and_evaluate(run, cfg, corpus, device, world, progress)
    finally:
        shutdown(world)
    return run


def _train_and_evaluate(run: Run, cfg: Config, corpus: TokenizedCorpus | TaskData, device: torch.device,
                        world: World, progress: bool) -> None:
    """Rank 0's part of a run to train, with its lock held: refuse a resume that cannot be one, record the run,
    train, evaluate, and print its summary line; a failure is recorded in meta.json before it propagates."""
    check_resume(run, cfg, corpus, device)  # a refused resume writes nothing in the run directory
    run.create(cfg)
    for stale in run.retire_analyses():  # made from a checkpoint this training moves past
        say(f"{stale.name}: an analysis of an earlier checkpoint, renamed (run `pe-bench analyze` again)")
    t0 = time.perf_counter()
    run.update_meta(status=Status.RUNNING, run_name=run.path.name, scheme=cfg.scheme["name"],
                    started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), error=None, processes=world.size,
                    data_fingerprint=getattr(corpus, "fingerprint", None), **Run.environment(device),
                    attention_backend=cfg.attention.backend,
                    precision="bf16" if use_bf16(cfg.train, device) else "fp32",
                    compiled=use_compile(cfg.train, device), **_plugins(cfg),
                    **({"parent": {"run": cfg.finetune.parent, "path": cfg.finetune.from_run,
                                   "steps_before": cfg.finetune.data_offset}} if cfg.finetune.from_run else {}))
    tracker = None
    try:
        tracker = open_tracker(cfg.logger, run.path, run.path.name, to_dict(cfg))  # a logger that fails: failed run
        model = train(cfg, run, corpus, device, progress, world, tracker)
        t1 = time.perf_counter()
        rows = evaluate_run(run, cfg, corpus, device, model, progress=progress)
        run.update_meta(eval_seconds=round(time.perf_counter() - t1, 2))
        tracker.summary(final_metrics(rows, model.scheme.label(), cfg.task.name))
        barrier(world)
    except BaseException as e:
        record_failure(run, e, time.perf_counter() - t0)
        raise
    finally:
        if tracker is not None:
            tracker.close()
    wall = time.perf_counter() - t0
    meta = run.update_meta(status=Status.DONE, wall_seconds=round(wall, 2))
    label = model.scheme.label()  # the base scheme's rows, not its eval-time variants'
    if isinstance(corpus, TaskData):  # and the task's own rows, not its evaluation variants' (flip-flop's densities)
        own = [r for r in rows if r["scheme"] == label and r["task"] == cfg.task.name]
        say(f"{run.path.name}: {accuracy_summary(own, reference_length(cfg))}"
            f" (train loss {meta.final_train_loss}, {duration(wall)})")
    else:
        say(run_summary(run.path.name, meta.final_train_loss,
                        [r for r in rows if r["scheme"] == label and r["split"] == cfg.eval.split],
                        reference_length(cfg), wall))


def _plugins(cfg: Config) -> dict[str, dict[str, str]]:
    """``{"plugins": {"scheme tilt": origin, ...}, "plugin_sha256": {"scheme tilt": sha256, ...}}`` for a scheme (or
    a composite's part) or a task that is not pe-bench's own (pe_bench.plugins), so that a report without the plugin
    can say which one it needs and an evaluation refuses one whose code changed since; {} otherwise."""
    out = {key: origin for key, (origin, _) in _plugin_files(cfg).items()}
    return {"plugins": out, "plugin_sha256": plugin_hashes(cfg)} if out else {}


def _plugin_files(cfg: Config) -> dict[str, tuple[str, Path]]:
    """"scheme tilt" / "task x" → (where the plugin came from, its module's file) for the run's plugins."""
    catalog = schemes.catalog()
    names = [cfg.scheme["name"], *(p.get("name") for p in cfg.scheme.get("parts") or [] if isinstance(p, dict))]
    files = {m.name: m.path for kind in ("schemes", "tasks") for m in plugins.modules(kind)}
    out = {f"scheme {n}": (catalog[n].origin, files.get(catalog[n].module)) for n in names
           if n in catalog and catalog[n].origin != "pe-bench"}
    if tasks.origin(cfg.task.name) != "pe-bench":
        module = tasks.get(cfg.task.name).__module__
        out[f"task {cfg.task.name}"] = (tasks.origin(cfg.task.name), files.get(module))
    return out


def plugin_hashes(cfg: Config) -> dict[str, str]:
    """The sha256 of each of the run's plugin files as they are now ("?" where the file is not found)."""
    return {key: file_sha256(path) if path is not None and path.is_file() else "?"
            for key, (_, path) in _plugin_files(cfg).items()}


def check_plugin_code(run: Run, cfg: Config) -> None:
    """Refuse to evaluate a run whose plugin's file changed since it was trained: its rows would come from other
    code under the run's label."""
    recorded = run.meta().plugin_sha256 or {}
    now = plugin_hashes(cfg)
    changed = [k for k, sha in recorded.items() if now.get(k) != sha]
    if changed:
        raise ConfigError(f"the {changed[0]} plugin's file changed since {run.path.name} was trained (sha256 "
                          f"{recorded[changed[0]][:12]} then, {now.get(changed[0], '?')[:12]} now): its rows would "
                          "come from other code; restore the file, or train the run again in a new results_dir")


def final_metrics(rows: list[dict], scheme: str, task: str) -> dict[str, float]:
    """A run's evaluation as tracker metrics, named alike in every run so that runs overlay (the scheme, task and
    seed are in the run's config): ``eval/<mode>/ppl@<L>`` or ``eval/exact_match@<L>[/depth=<d>]`` for the run's own
    scheme (``scheme``: its label) and task, with ``/<label>`` after it for an eval-time variant or a task's evaluation
    variant; from the rows that hold a number."""
    out = {}
    for r in rows:
        if r.get("status") != "ok":
            continue
        other = [x for x, own in ((r["scheme"], scheme), (r.get("task", task), task)) if x != own]
        suffix = "".join(f"/{x}" for x in other)
        if "ppl" in r:
            out[f"eval/{r['mode']}/ppl@{r['L_eval']}{suffix}"] = float(r["ppl"])
        elif "exact_match" in r:
            depth = f"/depth={r['depth']}" if r.get("depth") not in (None, "") else ""
            out[f"eval/exact_match@{r['L_eval']}{depth}{suffix}"] = float(r["exact_match"])
    return out


def check_numerics(run: Run, device: torch.device) -> None:
    """A run resumed from its checkpoint continues with the numerics it started with (docs/trust.md, "Determinism"):
    another torch, device or CPU thread count would make one history of two kinds of numbers."""
    from pe_bench.runs import numerics

    before = run.meta().numerics
    now = numerics(device)
    if run.checkpoint.exists() and before and before != now:
        threads = re.search(r"(\d+) threads$", before)
        fix = f"pass train.threads={threads.group(1)}" if threads and before.rsplit(",", 1)[0] == now.rsplit(",", 1)[
            0] else "resume it where it started"
        raise ConfigError(f"{run.path.name} was started with {before}; resuming it here ({now}) would mix two kinds "
                          f"of numbers in one run: {fix}, or delete its directory to train it afresh here")


def check_resume(run: Run, cfg: Config, corpus: TokenizedCorpus | TaskData, device: torch.device) -> None:
    """Everything that refuses to resume a run, checked before its config.yaml or meta.json is written (a refusal
    leaves the run directory as it was): other numerics, an edited config.yaml, a checkpoint of another
    configuration (copied in) or trained on other data than the corpus now behind the config (a file changed)."""
    check_numerics(run, device)
    if not run.checkpoint.exists():
        return
    if run.config.exists():
        check_same_run(run, cfg)
    # Memory-mapped on the CPU: only the checkpoint's small entries are read here; training loads it again.
    check_checkpoint(run, run.load_checkpoint("cpu", mmap=True), cfg, corpus)


def record_failure(run: Run, error: BaseException, seconds: float | None = None) -> None:
    """Status (interrupted: resumable; diverged; failed) and the one-line error in the run's meta.json. A failure
    to write it (the disk is full) must not hide the original error."""
    stopped = isinstance(error, (KeyboardInterrupt, StopRequested))
    status = Status.INTERRUPTED if stopped else Status.DIVERGED if isinstance(error, Diverged) else Status.FAILED
    diverged = {"diverged_step": error.step, "diverged_what": error.what,
                "diverged_value": str(error.value)} if isinstance(error, Diverged) else {}
    try:
        if run.meta().status == Status.DONE:  # finished before the error: the run stays finished
            return
        run.update_meta(status=status, error=f"{type(error).__name__}: {error}", **diverged,
                        **({} if seconds is None else {"wall_seconds": round(seconds, 2)}))
    except (OSError, RunFileError):
        pass


def check_same_run(run: Run, cfg: Config) -> None:
    """The run directory's saved config must define the same trained model as ``cfg`` and as the directory's name
    (whose last part is the hash of that identity)."""
    saved = run.load_config()
    name_hash = run.path.name.rsplit("-", 1)[-1]
    if identity(saved) != identity(cfg) or (len(name_hash) == 8 and name_hash != digest(identity(saved))):
        raise RunFileError(f"{run.config} does not match its run directory's name (edited by hand, or copied "
                           "from another run); move the run directory away")


def check_eval_overrides(saved: Config, cfg: Config) -> None:
    """``pe-bench eval`` may change eval.* and the scheme's eval-time options, never the trained model."""
    old, new = dict(saved.scheme), dict(cfg.scheme)
    bad, allowed = fixed_option_changes(old, new)
    if new.get("name") != old.get("name"):
        raise ConfigError(f"scheme={new.get('name')}: this run was trained with {old.get('name')}, and pe-bench eval "
                          f"evaluates a run as what it is; eval-time options of {old.get('name')}: {allowed}; train "
                          f"a {new.get('name')} run with `pe-bench train scheme={new.get('name')}`")
    if bad:
        raise ConfigError(f"scheme.{bad[0]} is fixed at training for {old['name']} (the checkpoint was trained with "
                          f"{old.get(bad[0])!r}); eval-time options of {old['name']}: {allowed}")


def evaluate_run(run: Run, cfg: Config, corpus: TokenizedCorpus | None = None, device: torch.device | None = None,
                 model: Decoder | None = None, only_missing: bool = False, trained: Config | None = None,
                 progress: bool = True) -> list[dict]:
    """Evaluate the run's model and its scheme's eval-time variants and add the rows to eval.csv, positions.csv and
    windows.csv. Rows are keyed by every evaluation setting (EVAL_KEY): new settings add rows beside the old ones;
    the same settings again replace them with the same numbers. ``only_missing`` skips a variant whose rows for
    these settings are all there already. ``trained``: the config the run was trained with, when ``cfg`` carries
    eval-time scheme options (the checkpoint is checked against it). ``progress``: bars on a terminal (one plain
    line per finished length × mode is printed either way). Returns this evaluation's rows."""
    check_plugin_code(run, cfg)
    device = device or resolve_device(cfg.train.device)
    corpus = corpus or load_data(cfg)
    spec = scheme_spec(cfg.scheme)
    specs = [spec] + ([with_options(spec, v) for v in spec.eval_variants] if cfg.eval.variants else [])
    specs = [(sp, False) for sp in specs] + ([(spec, True)] if cfg.eval.logn else [])  # (spec, log-n temperature)
    if isinstance(corpus, TaskData):
        return evaluate_task_run(run, cfg, corpus, device, specs, model, only_missing, trained)
    tokens = corpus.splits[cfg.eval.split]
    # Rows already there, by every key but the span: a row counts if it scored this evaluation's span (or none: n/a)
    have = {(_key(r, EVAL_KEY[:-1]), r.get("tokens_scored")) for r in read_csv(run.eval_csv)} if only_missing else set()
    done = Evaluation()

    def recorded(label: str) -> bool:  # every row of this variant is there ("0": an n/a length is there too)
        return only_missing and all((k, n) in have or (k, "0") in have
                                    for k, n in _expected_keys(cfg, label, cfg.train.steps, device, len(tokens))) \
            and _probed(run, cfg, label, device)

    for m, step in _variant_models(run, cfg, corpus, device, specs, model, trained, recorded):
        done += evaluate(m, cfg, tokens, corpus.token_bytes, device, step, run.path.name, progress)
    rows = done.rows
    if done.repetition:
        merge_csv(run.repetition_csv, done.repetition, REPETITION_COLUMNS, REPETITION_KEY)
    if rows:
        merge_csv(run.path / WINDOWS_CSV, done.windows, WINDOW_COLUMNS, WINDOW_KEY)
        merge_csv(run.positions_csv, done.positions, POSITION_COLUMNS, POSITION_KEY)
        merge_csv(run.context_csv, done.context, CONTEXT_COLUMNS, CONTEXT_KEY)
        merge_csv(run.eval_csv, rows, EVAL_COLUMNS, EVAL_KEY)
        run.update_meta(eval_csv_sha256=file_sha256(run.eval_csv),  # the report refuses an altered eval.csv
                        eval_attention_backend=cfg.attention.backend)
    return rows


def _variant_models(run: Run, cfg: Config, data, device: torch.device, specs: list, model: Decoder | None,
                    trained: Config | None, recorded: Callable[[str], bool]) -> Iterator[tuple[Decoder, int]]:
    """(model, step of its weights) for the scheme and each eval-time variant, once per label, skipping a variant
    whose rows are ``recorded`` already (only_missing is for finished runs, whose weights are from the last step).
    The scheme itself reuses ``model`` when given; the others are loaded from the checkpoint."""
    seen: set[str] = set()
    for i, (sp, logn) in enumerate(specs):
        label = build_scheme(cfg, sp).label() + ("+logn" if logn else "")
        if label in seen or recorded(label):
            continue
        seen.add(label)
        if i == 0 and model is not None:
            yield model, cfg.train.steps
        else:
            m, step = load_trained(run, cfg, device, sp, data, trained)
            if logn:
                m.logn_beyond = cfg.train.seq_len  # the length these weights were trained at
            yield m, step


def evaluate_task_run(run: Run, cfg: Config, data: TaskData, device: torch.device, specs: list,
                      model: Decoder | None, only_missing: bool, trained: Config | None) -> list[dict]:
    """A task run's evaluation: accuracy rows of the model and each eval-time variant, merged into accuracy.csv
    (keyed by ACCURACY_KEY). ``only_missing`` skips a variant whose rows at these lengths are all there."""
    path = run.accuracy_dev_csv if cfg.eval.heldout == "dev" else run.accuracy_csv
    have = {(r["scheme"], r["L_eval"], r["examples"]) for r in read_csv(path)} if only_missing else set()

    def recorded(label: str) -> bool:
        return only_missing and all((label, str(n), str(cfg.task.eval_examples)) in have
                                    for n in run_lengths(cfg))

    rows: list[dict] = []
    for m, step in _variant_models(run, cfg, data, device, specs, model, trained, recorded):
        rows += evaluate_accuracy(m, cfg, data.task, device, step, run.path.name)
    if rows and path == run.accuracy_dev_csv:  # tuning numbers: beside the reported ones, never in them
        merge_csv(path, rows, ACCURACY_COLUMNS, ACCURACY_KEY)
    elif rows:
        merge_csv(run.accuracy_csv, rows, ACCURACY_COLUMNS, ACCURACY_KEY)
        run.update_meta(accuracy_csv_sha256=file_sha256(run.accuracy_csv))  # the report refuses an altered file
    return rows


def _expected_keys(cfg: Config, label: str, step: int, device: torch.device,
                   n_tokens: int) -> set[tuple[tuple[str, ...], str]]:
    """(row key without the span, the span as written) for every row this evaluation would write."""
    precision = "bf16" if use_bf16(cfg.train, device) else "fp32"
    out = set()
    for n in run_lengths(cfg):
        for p in passes(cfg, n, n_tokens):
            if p.mode in cfg.eval.modes:
                key = _key({"scheme": label, "split": cfg.eval.split, "L_eval": n, "mode": p.mode,
                            "stride": p.advance, "S": p.S, "budget": p.budget, "step": step,
                            "precision": precision, "warmup": p.warmup}, EVAL_KEY[:-1])
                out.add((key, str(p.span)))
    return out


def _probed(run: Run, cfg: Config, label: str, device: torch.device) -> bool:
    """True unless eval.modes asks for the repetition probe and repetition.csv lacks a distance of this variant."""
    if "repetition" not in cfg.eval.modes:
        return True
    precision = "bf16" if use_bf16(cfg.train, device) else "fp32"
    L = reference_length(cfg)
    # REPETITION_KEY without the passage count (it depends on the split's length)
    have = {(r["scheme"], r["split"], r["distance"], r["passage_tokens"], r["step"], r["precision"])
            for r in read_csv(run.repetition_csv)}
    return all((label, cfg.eval.split, str(d), str(passage_tokens(L)), str(cfg.train.steps), precision) in have
               for d in distances(L))


def _key(r: dict, key: tuple[str, ...]) -> tuple[str, ...]:
    """A row's key; a column an older file lacks takes its value of then (KEY_DEFAULTS)."""
    return tuple(str(KEY_DEFAULTS[c] if c in KEY_DEFAULTS and r.get(c) in (None, "") else r.get(c)) for c in key)


def merge_csv(path, new: list[dict], columns: list[str], key: tuple[str, ...]) -> None:
    """Rows of ``new`` replace the rows of the file with the same ``key``; the others stay."""
    fresh = {_key(r, key) for r in new}
    kept = [r for r in read_csv(path) if _key(r, key) not in fresh]
    write_csv(path, kept + new, columns)


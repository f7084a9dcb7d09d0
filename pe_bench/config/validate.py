"""Raw (untyped) config → typed Config, every value checked: keys and types, declared ranges, choices, the relations
between fields, the keys the chosen data source and task read, and the scheme."""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pe_bench.config.lengths import run_lengths
from pe_bench.config.schema import (CHOICES, DATA_READS, EVAL_MODES, LOCAL_FILES_UNREAD, LOCAL_SINGLE_UNREAD,
                                    LOGGER_READS, Config, DataConfig, EvalConfig, FinetuneConfig, LoggerConfig,
                                    TrainConfig, preset_names, preset_path)
from pe_bench.config.scheme_options import check_scheme, check_scheme_name
from pe_bench.config.task_options import task_options
from pe_bench.config.typed import omegaconf_message, structured
from pe_bench.errors import ConfigError
from pe_bench.ranges import fmt, range_problem
from pe_bench import tasks
from pe_bench.tasks import SyntheticTask, check_lengths


def validate(raw: DictConfig | dict[str, Any], scheme: bool = True) -> Config:
    """Raw (untyped) config → typed Config, with every value checked: keys and types (the schema), the declared
    range of every number (``ranged``), choices, the relations between fields, the data keys the chosen source
    reads, and the scheme (with each eval variant and composite part) built once for the model's shape.
    ``scheme=False`` checks only the scheme's name: no torch import (``--cfg``, fast errors)."""
    try:
        merged = OmegaConf.merge(structured(Config), raw)
        problem = range_problem(Config, OmegaConf.to_container(merged, resolve=True))
        if problem:
            raise ConfigError(problem)
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise ConfigError(omegaconf_message(e, "", Config)) from None
    cfg.task = task_options(cfg.task)
    for dotted, allowed in CHOICES.items():
        group, key = dotted.split(".")
        value = getattr(getattr(cfg, group), key)
        if value not in allowed:
            raise ConfigError(f"{dotted}={value!r} is not one of: {', '.join(allowed)}")
    bad_modes = [m for m in cfg.eval.modes if m not in EVAL_MODES]
    if bad_modes:
        raise ConfigError(f"eval.modes has {bad_modes}; allowed: {', '.join(EVAL_MODES)}")
    if not cfg.eval.modes:
        raise ConfigError(f"eval.modes=[] is empty: list at least one of {', '.join(EVAL_MODES)}")
    _check_relations(cfg)
    _check_data_reads(cfg.data)
    _check_logger_reads(cfg.logger)
    if scheme:
        check_scheme(cfg)
    else:
        check_scheme_name(cfg.scheme.get("name"))
    return cfg


def _check_relations(cfg: Config) -> None:
    """Checks that involve more than one field (each field's own range is declared on it)."""
    m, t = cfg.model, cfg.train
    if t.random_positions and t.random_positions < t.seq_len:
        raise ConfigError(f"train.random_positions={t.random_positions} must be 0 (off) or at least "
                          f"train.seq_len={t.seq_len}; Ruoss et al. use 2048 for L=40")
    if t.pose_target:
        if t.pose_target <= t.seq_len:
            raise ConfigError(f"train.pose_target={t.pose_target} must be 0 (off) or longer than train.seq_len="
                              f"{t.seq_len}: PoSE trains at seq_len with positions reaching the target, e.g. "
                              f"train.pose_target={8 * t.seq_len}")
        if t.random_positions:
            raise ConfigError("train.pose_target and train.random_positions both choose the training positions; "
                              "set one of them to 0")
        if t.pose_chunks > t.seq_len:
            raise ConfigError(f"train.pose_chunks={t.pose_chunks} must be at most train.seq_len={t.seq_len} (each "
                              "chunk holds at least one token); PoSE's default is 2")
    elif t.pose_chunks != TrainConfig().pose_chunks:
        raise ConfigError(f"train.pose_chunks={t.pose_chunks} is read by PoSE only; set train.pose_target too")
    problem = compile_problem(t, t.device, 1) if t.device == "cpu" else None  # other devices: when resolved
    if problem:
        raise ConfigError(problem)
    f = cfg.finetune
    if f.from_run is None and (f.parent or f.new_positions != FinetuneConfig().new_positions
                               or f.trainable != FinetuneConfig().trainable):
        raise ConfigError("finetune.* is set but there is no parent run: fine-tune with "
                          "`pe-bench finetune RUN_DIR ...` (or finetune.from_run=RUN_DIR)")
    if issubclass(tasks.get(cfg.task.name), SyntheticTask):
        if cfg.eval.split != EvalConfig().split:
            raise ConfigError(f"eval.split={cfg.eval.split} is not read by task={cfg.task.name}: a task is evaluated "
                              "on its held-out examples, which belong to no data split; remove eval.split")
        check_lengths(cfg.task, t.seq_len, run_lengths(cfg))
    elif cfg.eval.heldout != EvalConfig().heldout:
        raise ConfigError(f"eval.heldout={cfg.eval.heldout} is read by the synthetic tasks only (task={cfg.task.name} "
                          "is scored on eval.split); remove eval.heldout")
    if m.d_model % m.n_heads:
        raise ConfigError(f"model.d_model={m.d_model} must be divisible by model.n_heads={m.n_heads}")
    if int(m.mlp_ratio * m.d_model) < 1:
        raise ConfigError(f"model.mlp_ratio={fmt(m.mlp_ratio)} gives an MLP of int({fmt(m.mlp_ratio)} × "
                          f"model.d_model={m.d_model}) = 0 units; raise model.mlp_ratio")
    if not cfg.eval.lengths:
        short = [r for r in cfg.eval.ratios if round(r * t.seq_len) < 1]
        if short:
            raise ConfigError(f"eval.ratios has {fmt(short[0])}, an eval length of round({fmt(short[0])} × "
                              f"train.seq_len={t.seq_len}) = 0 tokens; use ratios >= {fmt(0.5 / t.seq_len)} "
                              "or eval.lengths=[...]")


def compile_problem(tc: TrainConfig, device_type: str, processes: int) -> str | None:
    """One line saying why ``train.compile`` cannot train on a ``device_type`` device with ``processes`` processes,
    or None. CUDA graphs need one CUDA GPU and one micro-batch a step: with accumulation, a micro-batch's replay
    would overwrite the gradients the last one left in the graphs' memory."""
    if tc.compile != "graphs":
        return None
    if device_type != "cuda":
        return (f"train.compile=graphs records CUDA graphs, and training runs on {device_type}; use "
                "train.compile=on (or auto) there")
    if processes > 1:
        return ("train.compile=graphs trains on one GPU (CUDA graphs do not capture DDP's all-reduce here); use "
                "train.compile=on under torchrun")
    if tc.grad_accum > 1:
        return (f"train.compile=graphs takes one micro-batch a step, and train.grad_accum={tc.grad_accum}; use "
                f"train.batch_size={tc.batch_size * tc.grad_accum} train.grad_accum=1, or train.compile=on")
    return None


def _check_logger_reads(lg: LoggerConfig) -> None:
    """Every logger key set away from its default must be read by the chosen logger (see LOGGER_READS)."""
    default = LoggerConfig()
    for key in ("project", "mode"):
        if key not in LOGGER_READS[lg.name] and getattr(lg, key) != getattr(default, key):
            raise ConfigError(f"logger.{key}={getattr(lg, key)} is not read by logger={lg.name}; it is an option of "
                              "logger=wandb")


def _check_data_reads(d: DataConfig) -> None:
    """Every data key that is set must be read by the chosen source and tokenizer (see DATA_READS)."""
    if d.source != "embedded" and not (d.path or d.files.given()):
        raise ConfigError(f"data.source={d.source} needs data.path=... (or data.files for local splits)")
    unknown_splits = sorted(set(d.splits) - {"train", "validation", "test"})
    if unknown_splits:
        raise ConfigError(f"unknown config key 'data.splits.{unknown_splits[0]}'; valid keys in data.splits: "
                          "train, validation, test")
    reader = f"data.source={d.source} (data={d.name})"
    unread = {f.name for f in dataclasses.fields(DataConfig)} - {"name", "source", "tokenizer", "vocab_size"}
    unread -= DATA_READS[d.source]
    if d.source == "local":
        if d.files.given():
            unread |= LOCAL_FILES_UNREAD
            reader = f"data.source=local with data.files.* (data={d.name})"
        else:
            unread |= LOCAL_SINGLE_UNREAD
    default = DataConfig()
    for key in sorted(unread, key=[f.name for f in dataclasses.fields(DataConfig)].index):
        value = getattr(d, key)
        if value == getattr(default, key):
            continue
        if key == "files":
            split, value = next(iter(d.files.given().items()))
            key = f"files.{split}"
        raise ConfigError(f"data.{key}={fmt(value)} is not read by {reader}; {_data_fix(d, key)}")
    if d.tokenizer != "bpe" and d.vocab_size != default.vocab_size:
        raise ConfigError(f"data.vocab_size={d.vocab_size} is not read by data.tokenizer={d.tokenizer} (a fixed "
                          "256-byte vocabulary); add data.tokenizer=bpe to train a BPE vocabulary of that size")


def _data_fix(d: DataConfig, key: str) -> str:
    field_name = key.split(".")[0]
    if d.source == "local" and d.files.given() and field_name in LOCAL_FILES_UNREAD:
        if field_name == "path":
            return "give either data.path (one file, split by fractions) or data.files.* (one per split), not both"
        return "the fractions split a single data.path; data.files.* already gives every split"
    if d.source == "local" and field_name in LOCAL_SINGLE_UNREAD:
        return ("a single data.path becomes one document per split, so there is nothing to cap; it applies to hub "
                "corpora and to data.files.* globs")
    if field_name in DATA_READS["local"]:
        return f"use data=local data.{key}=..."
    if field_name in DATA_READS["hub"]:
        hub = [p for p in preset_names("data") if _preset_source(p) == "hub"]
        return f"use a hub preset ({', '.join(f'data={p}' for p in hub)}) or data.source=hub data.path=<dataset id>"
    return "remove it"


def _preset_source(name: str) -> str:
    return str(OmegaConf.load(preset_path("data", name)).get("source", "embedded"))

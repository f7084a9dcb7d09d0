"""Hydra compose + typed dataclass schemas. The only module that knows about Hydra/OmegaConf.

Every entry point turns ``key=value`` overrides into a validated :class:`Config`; anything wrong (an unknown key, a
value of the wrong type, an unknown scheme or preset) becomes one :class:`ConfigError` line naming the fix.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pe_bench import schemes
from pe_bench.errors import ConfigError
from pe_bench.tasks import TASK_READS, TaskConfig, check_lengths
from pe_bench.ranges import fmt, range_problem, ranged

GROUPS = ("scheme", "task", "model", "data", "train", "eval")


def config_dir() -> Path:
    """configs/ in a source checkout, pe_bench/configs/ in an installed wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError("pe-bench's configs/ directory is missing from this installation; reinstall pe-bench")


# ---------------------------------------------------------------------------------------------------------------
# Schemas. Plain strings and numbers only: configs stay serializable, the code resolves them.
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class ModelConfig:
    name: str = "tiny"
    n_layers: int = ranged(4, ge=1)
    d_model: int = ranged(128, ge=1)
    n_heads: int = ranged(4, ge=1)
    mlp_ratio: float = ranged(4.0, gt=0)  # MLP width = int(mlp_ratio · d_model), at least 1
    dropout: float = ranged(0.0, ge=0, lt=1)


@dataclass
class SplitFiles:
    train: str | None = None
    validation: str | None = None
    test: str | None = None

    def given(self) -> dict[str, str]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v}


@dataclass
class DataConfig:
    """Which keys each source reads (any other key set away from its default is refused, see ``DATA_READS``):
    embedded — doc_separator, tokenizer (+ vocab_size for bpe); hub — path, hub_config, splits, text_field,
    doc_separator, max_train_docs, tokenizer; local — path *or* files, format, text_field, doc_separator, tokenizer,
    and valid_fraction/test_fraction with a single path, max_train_docs with data.files."""

    name: str = "shakespeare"
    source: str = "embedded"  # embedded | hub | local
    path: str | None = None  # hub: dataset id; local: a file, or a directory/glob of files (one document each)
    hub_config: str | None = None  # hub: the dataset's config name, e.g. wikitext-103-raw-v1
    format: str = "text"  # local: the datasets builder — text | json | parquet
    text_field: str = "text"  # hub, local: the column holding the text
    splits: dict[str, str] = field(  # hub: the dataset's split name for each of train/validation/test
        default_factory=lambda: {"train": "train", "validation": "validation", "test": "test"}
    )
    files: SplitFiles = field(default_factory=lambda: SplitFiles())  # local: one file per split
    # local single source: last fractions become validation/test (contiguous)
    valid_fraction: float = ranged(0.05, gt=0, lt=0.5)
    test_fraction: float = ranged(0.05, gt=0, lt=0.5)
    doc_separator: str = "\n\n"  # joins documents (use "" for line-per-row corpora like WikiText)
    max_train_docs: int | None = ranged(None, ge=1)  # cap for huge corpora (PG-19): hub, local data.files
    tokenizer: str = "byte"  # byte (vocab 256) | bpe (trained locally on the train split)
    vocab_size: int = ranged(4096, ge=257, hint="256 would be the byte alphabet alone; use data.tokenizer=byte")  # bpe


@dataclass
class TrainConfig:
    name: str = "quick"
    seq_len: int = ranged(64, ge=1)
    batch_size: int = ranged(32, ge=1)
    grad_accum: int = ranged(1, ge=1)
    steps: int = ranged(1000, ge=1)
    lr: float = ranged(2e-3, gt=0)
    min_lr_ratio: float = ranged(0.1, ge=0, le=1)
    warmup_steps: int = ranged(50, ge=0)
    weight_decay: float = ranged(0.1, ge=0)
    beta1: float = ranged(0.9, ge=0, lt=1)
    beta2: float = ranged(0.95, ge=0, lt=1)
    grad_clip: float = ranged(1.0, ge=0, hint="0 turns clipping off")
    log_interval: int = ranged(10, ge=1)
    val_interval: int = ranged(250, ge=1)
    val_batches: int = ranged(8, ge=1)
    ckpt_interval: int = ranged(0, ge=0, hint="0 checkpoints only at the end")  # 0: checkpoint only at the end
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: str = "auto"  # auto (bf16 on cuda, fp32 on cpu) | fp32 | bf16
    compile: str = "auto"  # auto (on for cuda) | on | off
    threads: int | None = ranged(None, ge=1, hint="null = torch's default")  # CPU threads; None = torch default
    # Randomized positions (Ruoss et al. 2023): each batch uses a sorted random subset of [0, random_positions)
    # instead of 0..seq_len-1, in training and in evaluation. 0 = off.
    random_positions: int = ranged(0, ge=0, hint="0 turns randomized positions off")
    # PoSE (Zhu et al. 2023, arXiv:2309.10400): train at seq_len with position ids that skip ahead so that they
    # cover [0, pose_target): the window is cut into pose_chunks contiguous chunks, chunk i's ids shifted by a
    # skip u_i (u_0 = 0, u_i ~ U{u_(i-1) .. pose_target - seq_len}), drawn per batch. 0 = off. Training only:
    # validation and evaluation use 0..n-1.
    pose_target: int = ranged(0, ge=0, hint="0 turns PoSE off")
    pose_chunks: int = ranged(2, ge=1)


@dataclass
class EvalConfig:
    name: str = "default"
    split: str = "validation"  # train | validation | test
    # eval lengths as multiples of L (each round(ratio·L) >= 1)...
    ratios: list[float] = ranged(default_factory=lambda: [1, 2, 4, 8], gt=0, nonempty=True,
                                 hint="e.g. eval.ratios=[1,2,4,8]")
    # ...unless given explicitly (null = use ratios)
    lengths: list[int] | None = ranged(None, ge=1, nonempty=True,
                                       hint="e.g. eval.lengths=[64,128] (null: eval.ratios × L)")
    modes: list[str] = field(default_factory=lambda: ["nonoverlapping", "sliding", "per_position"])
    stride: int | None = ranged(None, ge=1, hint="null = the training length L")  # sliding-window stride S
    max_tokens: int = ranged(65536, ge=1)  # tokens scored per length (nonoverlapping, per_position)
    # tokens scored per length in sliding mode (costs length/S forwards per S)
    sliding_max_tokens: int = ranged(16384, ge=1)
    tokens_per_batch: int = ranged(16384, ge=1)  # windows are batched up to this many tokens per forward
    position_buckets: int = ranged(16, ge=1)
    variants: bool = True  # also evaluate the scheme's eval_variants (e.g. learned with clamp/extend)
    # also evaluate with the training-free log-n attention temperature beyond L (rows <scheme>+logn; every scheme)
    logn: bool = False


@dataclass
class FinetuneConfig:
    """Where a fine-tuned run starts (``pe-bench finetune RUN_DIR``): its parent's trained weights. Every field but
    ``new_positions`` is filled in from the parent; ``from_run`` (where the parent lies) is not part of the run's
    identity, the parent's run name (with the hash of its own identity) is."""

    from_run: str | None = None  # the parent run directory
    parent: str | None = None  # the parent's run name
    parent_config: str | None = None  # the hash of the parent's configuration without its seed (report rows)
    original_seq_len: int | None = ranged(None, ge=1)  # the first ancestor's train.seq_len: lengths are relative to it
    data_offset: int = ranged(0, ge=0)  # steps trained by the ancestors: the batches continue their stream
    # learned: rows past the parent's table — extend (new rows drawn like scheme.beyond_table=extend's) |
    # interpolate (the parent's table resampled linearly over the new range, position interpolation for a table)
    new_positions: str = "extend"


@dataclass
class AttentionConfig:
    """How attention is computed — not what it computes: every backend gives the same numbers (tested), so this is
    not part of a run's identity and may change between training and evaluation."""

    backend: str = "auto"  # auto | sdpa | flex | explicit (pe_bench/attention.py)


@dataclass
class Config:
    scheme: dict[str, Any] = field(default_factory=lambda: {"name": "alibi"})
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    seed: int = ranged(0, ge=0, le=2**63 - 1)
    results_dir: str = "results"
    cache_dir: str = "~/.cache/pe-bench"


CHOICES = {
    "data.source": ("embedded", "hub", "local"),
    "data.tokenizer": ("byte", "bpe"),
    "data.format": ("text", "json", "parquet", "csv", "arrow"),
    "train.precision": ("auto", "fp32", "bf16"),
    "train.compile": ("auto", "on", "off"),
    "attention.backend": ("auto", "sdpa", "flex", "explicit"),
    "eval.split": ("train", "validation", "test"),
    "task.name": ("lm", "passkey", "assoc_recall", "copy", "reverse", "addition"),
    "task.train_lengths": ("uniform", "curriculum", "fixed"),
    "task.filler": ("random", "text"),
    "finetune.new_positions": ("extend", "interpolate"),
}
EVAL_MODES = ("nonoverlapping", "sliding", "per_position")

# The data keys each source reads (pe_bench/data.py); name, source and tokenizer are always read, vocab_size with
# tokenizer=bpe only. A key outside this set that differs from its default is refused: it would be a silent no-op.
DATA_READS = {
    "embedded": {"doc_separator"},
    "hub": {"path", "hub_config", "splits", "text_field", "doc_separator", "max_train_docs"},
    "local": {"path", "files", "format", "text_field", "doc_separator", "valid_fraction", "test_fraction",
              "max_train_docs"},
}
# data=local reads either one data.path (split by valid_fraction/test_fraction into one document per split) or
# data.files (one file, or glob, per split; max_train_docs caps the train documents).
LOCAL_SINGLE_UNREAD = {"files", "max_train_docs"}
LOCAL_FILES_UNREAD = {"path", "valid_fraction", "test_fraction"}


# ---------------------------------------------------------------------------------------------------------------
# Scheme options: each scheme's own dataclass, validated the same way.
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class SchemeSpec:
    cls: type[schemes.Scheme]
    options: Any
    eval_variants: list[dict[str, Any]]


def scheme_spec(scheme_cfg: dict[str, Any]) -> SchemeSpec:
    cfg = dict(scheme_cfg)
    name = cfg.pop("name", None)
    variants = cfg.pop("eval_variants", None) or []
    _check_scheme_name(name)
    cls = schemes.get(name)
    _check_part_maps(cls, cfg, "scheme")
    options = _typed(cls.Options, cfg, "scheme")
    _check_parts(cls, options, "scheme")
    if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
        raise ConfigError(f"scheme.eval_variants={variants} must be a list of option maps, e.g. "
                          "[{beyond_table: clamp}] (null or [] for none)")
    return SchemeSpec(cls, options, [dict(v) for v in variants])


def fixed_option_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], str]:
    """The options of a trained run's scheme (``old``, its saved scheme config) that ``new`` changes although the
    weights fix them (not in the scheme's ``eval_options``), and the options that may change, as text."""
    cls = scheme_spec(old).cls
    allowed = ", ".join(f"scheme.{k}.*" if isinstance(old.get(k), dict) else f"scheme.{k}"
                        for k in cls.eval_options) or "none"
    changed = sorted(k for k in set(old) | set(new) if k not in ("eval_variants", "name") and old.get(k) != new.get(k))
    return [k for k in changed if k not in cls.eval_options], allowed


def _check_scheme_name(name: Any) -> None:
    if name not in schemes.available():
        raise ConfigError(f"unknown scheme {name!r}; choose one of: {', '.join(schemes.available())} "
                          "(`pe-bench schemes` describes them)")


def with_options(spec: SchemeSpec, overrides: dict[str, Any], prefix: str = "scheme") -> SchemeSpec:
    """The spec with some options replaced (an eval variant); ``prefix`` names them in error messages."""
    base = dataclasses.asdict(spec.options)
    base.update(overrides)
    _check_part_maps(spec.cls, base, prefix)
    options = _typed(spec.cls.Options, base, prefix)
    _check_parts(spec.cls, options, prefix)
    return SchemeSpec(spec.cls, options, [])


def _check_part_maps(cls: type, values: dict[str, Any], prefix: str) -> None:
    from pe_bench.schemes.hybrid import Composite

    parts = values.get("parts")
    if issubclass(cls, Composite) and isinstance(parts, list):
        for i, part in enumerate(parts):
            if not isinstance(part, dict):
                raise ConfigError(f"{prefix}.parts[{i}]={fmt(part)} must be a map of a scheme and its options, "
                                  f"e.g. {{name: {part if isinstance(part, str) and part in schemes.available() else 'alibi'}}}")


def _check_parts(cls: type, options: Any, prefix: str) -> None:
    """A composite's parts are dicts ({name: ..., <option>: ...}): each goes through its scheme's typed schema."""
    from pe_bench.schemes.hybrid import Composite

    if not issubclass(cls, Composite):
        return
    for i, part in enumerate(options.parts):
        values = {k: v for k, v in part.items() if k != "name"}
        _typed(schemes.get(part["name"]).Options, values, f"{prefix}.parts[{i}]")


def _typed(schema: type, values: Any, prefix: str) -> Any:
    """Merge plain values into a dataclass schema; unknown keys, bad types and values out of their declared range
    become ConfigError."""
    try:
        merged = OmegaConf.merge(_structured(schema), values)
        problem = range_problem(schema, OmegaConf.to_container(merged, resolve=True), prefix)
        if problem:
            raise ConfigError(problem)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(omegaconf_message(e, prefix, schema)) from None
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:  # __post_init__ checks
        raise ConfigError(_reprefix(str(e).splitlines()[0], prefix)) from None


@functools.lru_cache(maxsize=None)
def _structured(schema: type) -> DictConfig:
    """The schema's empty structured config, built once (OmegaConf.merge copies it, never changes it)."""
    return OmegaConf.structured(schema)


def _reprefix(message: str, prefix: str) -> str:
    """Scheme code names its options ``scheme.KEY``; for a composite's part or an eval variant they are
    ``scheme.parts[i].KEY`` / ``scheme.eval_variants[i].KEY``."""
    if prefix in ("", "scheme"):
        return message
    return re.sub(r"\bscheme\.", f"{prefix}.", message)


def omegaconf_message(e: OmegaConfBaseException, prefix: str, schema: type) -> str:
    key = getattr(e, "full_key", None) or ""
    full = f"{prefix}.{key}" if prefix and key else (key or prefix)
    text = str(e).splitlines()[0]
    if "not in" in text or "Key '" in text and "not" in text:
        return f"unknown config key '{full}'{_keys_hint(key, schema if prefix else Config, prefix)}"
    if "could not be converted" in text or "Invalid type" in text or "Value '" in text:
        return f"bad value for '{full}': {text}"
    return f"bad config at '{full}': {text}"


def _keys_hint(key: str, schema: type = Config, prefix: str = "") -> str:
    """'; valid keys in model: name, n_layers, ...' for an unknown dotted key (relative to ``schema``, shown under
    ``prefix``), walking the dataclass schema down to the key's parent (a scheme's nested options included)."""
    parts = key.split(".")[:-1]
    if schema is Config and parts[:1] == ["scheme"]:
        return "; see configs/scheme/<name>.yaml for that scheme's options"
    for i, part in enumerate(parts):
        f = {f.name: f for f in dataclasses.fields(schema)}.get(part)
        if f is None:  # the unknown key is higher up: name the level where it goes wrong
            group = ".".join(p for p in (prefix, *parts[:i]) if p) or "the config"
            return f"; valid keys in {group}: {', '.join(f.name for f in dataclasses.fields(schema))}"
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            schema = type(f.default_factory())  # type: ignore[misc]
        elif dataclasses.is_dataclass(f.default):
            schema = type(f.default)
        else:
            return ""
        if not dataclasses.is_dataclass(schema):
            return ""
    group = ".".join(p for p in (prefix, *parts) if p) or "the config"
    return f"; valid keys in {group}: {', '.join(f.name for f in dataclasses.fields(schema))}"


def validate(raw: DictConfig | dict[str, Any], scheme: bool = True) -> Config:
    """Raw (untyped) config → typed Config, with every value checked: keys and types (the schema), the declared
    range of every number (``ranged``), choices, the relations between fields, the data keys the chosen source
    reads, and the scheme (with each eval variant and composite part) built once for the model's shape.
    ``scheme=False`` checks only the scheme's name: no torch import (``--cfg``, fast errors)."""
    try:
        merged = OmegaConf.merge(_structured(Config), raw)
        problem = range_problem(Config, OmegaConf.to_container(merged, resolve=True))
        if problem:
            raise ConfigError(problem)
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise ConfigError(omegaconf_message(e, "", Config)) from None
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
    _check_task_reads(cfg.task)
    if scheme:
        check_scheme(cfg)
    else:
        _check_scheme_name(cfg.scheme.get("name"))
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
    f = cfg.finetune
    if f.from_run is None and (f.parent or f.new_positions != FinetuneConfig().new_positions):
        raise ConfigError("finetune.* is set but there is no parent run: fine-tune with "
                          "`pe-bench finetune RUN_DIR ...` (or finetune.from_run=RUN_DIR)")
    if cfg.task.name != "lm":
        if cfg.eval.split != EvalConfig().split:
            raise ConfigError(f"eval.split={cfg.eval.split} is not read by task={cfg.task.name}: a task is evaluated "
                              "on its held-out examples, which belong to no data split; remove eval.split")
        check_lengths(cfg.task, t.seq_len, run_lengths(cfg))
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


def _check_task_reads(t: TaskConfig) -> None:
    """Every task key set away from its default must be read by the chosen task (see TASK_READS)."""
    default = TaskConfig()
    for f in dataclasses.fields(TaskConfig):
        if f.name == "name" or f.name in TASK_READS[t.name] or getattr(t, f.name) == getattr(default, f.name):
            continue
        readers = [n for n, keys in TASK_READS.items() if f.name in keys]
        raise ConfigError(f"task.{f.name}={fmt(getattr(t, f.name))} is not read by task={t.name}; it is an option of "
                          f"{', '.join(f'task={n}' for n in readers)}")
    if t.name == "passkey" and t.symbols != default.symbols and t.filler == "text":
        raise ConfigError("task.symbols is not read by task.filler=text (the filler is the corpus's bytes); remove it "
                          "or use task.filler=random")


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
    return str(OmegaConf.load(config_dir() / "data" / f"{name}.yaml").get("source", "embedded"))


def eval_lengths(ecfg: EvalConfig, train_len: int) -> list[int]:
    """eval.lengths, or eval.ratios × ``train_len``, sorted and distinct."""
    if ecfg.lengths:
        return sorted({int(x) for x in ecfg.lengths})
    return sorted({round(r * train_len) for r in ecfg.ratios})


def reference_length(cfg: Config) -> int:
    """The L of a run's rows (column L_train, ratios, the sliding stride's default): its training length, or for a
    fine-tune its first ancestor's, so that a fine-tuned run's rows line up with its parent's."""
    return cfg.finetune.original_seq_len or cfg.train.seq_len


def run_lengths(cfg: Config) -> list[int]:
    """A run's eval lengths: eval.lengths, or eval.ratios × L — for a fine-tune × the original L and × its own (a
    fine-tune's default eval.lengths are its parent's lengths and its own L: pe_bench.finetune)."""
    lengths = set(eval_lengths(cfg.eval, reference_length(cfg)))
    if cfg.finetune.original_seq_len:
        lengths |= set(eval_lengths(cfg.eval, cfg.train.seq_len))
    return sorted(lengths)


def model_shape(cfg: Config) -> schemes.ModelShape:
    """What the scheme sees of the model (pe_bench.build uses the same)."""
    m = cfg.model
    return schemes.ModelShape(d_model=m.d_model, n_heads=m.n_heads, head_dim=m.d_model // m.n_heads,
                              train_seq_len=cfg.train.seq_len, n_layers=m.n_layers,
                              max_train_position=cfg.train.random_positions or cfg.train.pose_target or None,
                              original_seq_len=cfg.finetune.original_seq_len)


def check_scheme(cfg: Config) -> None:
    """Type the scheme's options (and each eval variant's, and each composite part's) and build each once for the
    model's shape, so that checks needing the shape (alibi heads <= model.n_heads, rotary schemes' even head
    dimension, ...) fail here and not after the run directory exists."""
    from pe_bench.attention import backend_problem

    spec = scheme_spec(cfg.scheme)
    shape = model_shape(cfg)
    problem = backend_problem(cfg.attention.backend, _build(spec, shape, "scheme"),
                              cpu_training=cfg.train.device == "cpu")
    if problem:
        raise ConfigError(problem)
    for i, variant in enumerate(spec.eval_variants):
        prefix = f"scheme.eval_variants[{i}]"
        variant_spec = with_options(spec, variant, prefix)  # typed and range-checked even when not evaluated
        fixed = sorted(set(variant) - set(spec.cls.eval_options))
        if fixed:  # a variant evaluates the same weights: it may change only options that act at evaluation
            allowed = ", ".join(f"scheme.{k}" for k in spec.cls.eval_options) or "none"
            raise ConfigError(f"{prefix} changes {', '.join(fixed)}, which {spec.cls.name} fixes at training; "
                              f"eval-time options of {spec.cls.name}: {allowed}")
        if cfg.eval.variants:
            _build(variant_spec, shape, prefix)


BUILD_ON_META_ABOVE = 2**24  # elements: a scheme this large is built on the meta device (no memory)


def _build(spec: SchemeSpec, shape: schemes.ModelShape, prefix: str) -> schemes.Scheme:
    """Build the scheme and drop it: on the CPU, leaving the global RNG as it was (milliseconds for these small
    modules); on the meta device when its tables could be large (the meta device costs a second to warm up)."""
    import torch

    largest = shape.d_model * max(shape.position_range, shape.n_layers * shape.d_model)
    device = torch.device("meta") if largest > BUILD_ON_META_ABOVE else torch.device("cpu")
    try:
        with torch.random.fork_rng(devices=[]), device:
            return spec.cls(spec.options, shape)
    except (ValueError, TypeError) as e:
        raise ConfigError(_reprefix(str(e).splitlines()[0], prefix)) from None
    except ArithmeticError as e:
        raise ConfigError(f"{prefix} ({spec.cls.name}) cannot be built for model.d_model={shape.d_model}, "
                          f"model.n_heads={shape.n_heads}: {type(e).__name__}: {e}") from None


# ---------------------------------------------------------------------------------------------------------------
# Composition
# ---------------------------------------------------------------------------------------------------------------
def compose(overrides: list[str] | tuple[str, ...] = (), scheme: bool = True) -> Config:
    """configs/config.yaml + Hydra overrides (``scheme=rope model.n_layers=2 eval.lengths=[64,128]``) → Config.
    ``train=smoke`` without an ``eval=`` choice brings ``eval=smoke``: a smoke run is smoke end to end; a task
    (``task=passkey``) without a ``train=`` choice brings ``train=task``, the recipe the tasks are tuned for.
    ``scheme=False``: every check but building the scheme (no torch import; see ``validate``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.errors import MissingConfigException

    ConfigStore.instance().store(name="pe_bench_schema", node=Config)  # config.yaml's first default
    overrides = list(overrides)
    check_override_words(overrides)
    if finetune_parent(overrides) is not None:  # a fine-tune's base is its parent's config, not config.yaml
        raise ConfigError("finetune.from_run is set: a fine-tune's config is its parent's; compose it with "
                          "pe_bench.finetune.compose_run (`pe-bench finetune RUN_DIR ...`)")
    _check_group_choices(overrides)
    chosen = {o.partition("=")[0].lstrip("+~"): o.partition("=")[2] for o in overrides}
    if chosen.get("train") == "smoke" and "eval" not in chosen:
        overrides.append("eval=smoke")
    if chosen.get("task", "lm") != "lm" and "train" not in chosen:
        overrides.append("train=task")  # a synthetic task trains with its recipe (configs/train/task.yaml)
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            raw = hydra_compose(config_name="config", overrides=overrides)
    except MissingConfigException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    except Exception as e:  # noqa: BLE001 - Hydra/OmegaConf raise many unrelated types for bad overrides
        default = OmegaConf.load(config_dir() / "config.yaml").defaults[1].scheme
        raise ConfigError(_hydra_message(e, chosen.get("scheme", default))) from None
    return validate(raw, scheme=scheme)


def finetune_parent(overrides: list[str]) -> tuple[str, list[str]] | None:
    """(parent run directory, the other overrides) when the overrides name finetune.from_run, else None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    for i, o in enumerate(parsed):
        if o.key_or_group == "finetune.from_run" and o.value() is not None:
            return str(o.value()), overrides[:i] + overrides[i + 1:]
    return None


def check_override_words(words: list[str], command: str = "train") -> None:
    """Hints for the two slips people make: a missing ``=`` (``scheme rope``) and a sweep axis (``a=1,2``) given
    to a command that runs one configuration."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for i, w in enumerate(words):
        if "=" in w or w.startswith("~"):
            continue
        after = words[i + 1] if i + 1 < len(words) else None
        if after is not None and "=" not in after:
            raise ConfigError(f"'{w} {after}': overrides are KEY=VALUE; did you mean {w}={after}?")
        raise ConfigError(f"'{w}' is not KEY=VALUE; write e.g. {w}=... (`pe-bench {command} --help` lists the "
                          "config groups and their presets)")
    try:
        parsed = OverridesParser.create().parse_overrides(list(words))
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors are several unrelated classes
        raise ConfigError(f"cannot parse overrides: {str(e).splitlines()[0]}") from None
    for o in parsed:
        if o.is_sweep_override():
            raise ConfigError(f"'{o.input_line}' is a sweep axis (several values) but `pe-bench {command}` runs "
                              f"one configuration: use `pe-bench sweep {o.input_line} ...`, or give one value")


def hydra_quoted(value: str) -> str:
    """A path as one quoted Hydra override value: `~`, spaces, `=`, `,` and the like are not read as syntax (the
    default cache_dir, ~/.cache/pe-bench, is not a valid unquoted value)."""
    doubled = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, str(value))  # Hydra: escaped before a quote or the end
    return "'" + doubled.replace("'", "\\'") + "'"


def _check_group_choices(overrides: list[str]) -> None:
    for o in overrides:
        key, _, value = o.partition("=")
        key = key.lstrip("+~")
        if key in GROUPS and value and "," not in value:
            options = preset_names(key)
            if value not in options:
                what = "scheme" if key == "scheme" else f"{key} preset"
                raise ConfigError(f"unknown {what} {value!r}; choose one of: {', '.join(options)}")


def preset_names(group: str) -> list[str]:
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def _hydra_message(e: BaseException, scheme_name: str | None = None) -> str:
    """Hydra's error → one line. ``scheme_name``: the chosen scheme, to list its options for an unknown key."""
    while not str(e).strip() and e.__cause__ is not None:  # Hydra wraps parse errors in an empty exception
        e = e.__cause__
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = " ".join(lines)
    if text.startswith("Error merging override") and e.__cause__ is not None:
        key = text.split("override ", 1)[1].split("=", 1)[0]
        cause = str(e.__cause__).strip().splitlines()[0]
        return f"bad value for '{key}': {cause}"
    if "Could not override" in text or "not in struct" in text or "Key '" in text:
        key = lines[0].split("'")[1] if "'" in lines[0] else "?"
        if key.startswith("scheme.") and scheme_name in schemes.available():
            return f"unknown config key '{key}'{_keys_hint(key[7:], schemes.get(scheme_name).Options, 'scheme')}"
        return f"unknown config key '{key}'{_keys_hint(key)}"
    return lines[0] if lines else repr(e)


def apply_overrides(cfg: Config, overrides: list[str], allowed: tuple[str, ...] = GROUPS + ("seed",)) -> Config:
    """Overrides on an existing (e.g. saved) config, restricted to the given top-level keys. ``eval=NAME`` loads
    a preset of that group."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    raw = OmegaConf.structured(cfg)
    OmegaConf.set_struct(raw, False)
    check_override_words(list(overrides), "eval")
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    for o in parsed:
        key = o.key_or_group
        if key.split(".")[0] not in allowed:
            raise ConfigError(f"'{key}' cannot be changed here; allowed: {', '.join(a + '.*' for a in allowed)}")
        value = o.value()
        if key in GROUPS:
            _check_group_choices([f"{key}={value}"])
            preset = OmegaConf.load(config_dir() / key / f"{value}.yaml")
            current = getattr(cfg, key)  # a typed group takes the preset through its schema
            raw[key] = OmegaConf.merge(_structured(type(current)), preset) if dataclasses.is_dataclass(current) \
                else preset
        else:
            try:
                OmegaConf.update(raw, key, value, merge=True)
            except OmegaConfBaseException as e:
                raise ConfigError(omegaconf_message(e, "", Config)) from None
    return validate(raw)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def from_yaml(path: Path) -> Config:
    return validate(OmegaConf.load(path))


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)

"""The typed schemas of a configuration, one dataclass per group (plain strings and numbers only: configs stay
serializable, the code resolves them), the choices of its string keys, and where the YAML presets live."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pe_bench.ranges import ranged
from pe_bench import plugins, tasks
from pe_bench.errors import ConfigError


GROUPS = ("scheme", "task", "model", "data", "train", "eval", "logger")


def config_dir() -> Path:
    """configs/ in a source checkout, pe_bench/configs/ in an installed wheel."""
    here = Path(__file__).resolve().parents[1]  # the pe_bench package
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError("pe-bench's configs/ directory is missing from this installation; reinstall pe-bench")


def preset_dirs() -> list[Path]:
    """Where presets are looked for, in order: pe-bench's configs/, then the plugins' (pe_bench.plugins)."""
    return [config_dir(), *plugins.config_dirs()]


def preset_names(group: str) -> list[str]:
    return sorted({p.stem for d in preset_dirs() for p in (d / group).glob("*.yaml")})


def preset_path(group: str, name: str) -> Path:
    """configs/<group>/<name>.yaml: pe-bench's own, else the first plugin directory's that has it (a path that does
    not exist when none has it). A plugin preset of the same name as another one is refused, never silently
    shadowed: ConfigError naming both files."""
    found = [d / group / f"{name}.yaml" for d in preset_dirs() if (d / group / f"{name}.yaml").is_file()]
    if len(found) > 1:
        raise ConfigError(f"{group}={name} is defined twice, by {found[0]} and {found[1]}: rename the plugin's preset")
    for d in preset_dirs():
        if (d / group / f"{name}.yaml").is_file():
            return d / group / f"{name}.yaml"
    return config_dir() / group / f"{name}.yaml"


@dataclass
class ModelConfig:
    name: str = "tiny"
    n_layers: int = ranged(4, ge=1)
    d_model: int = ranged(128, ge=1)
    n_heads: int = ranged(4, ge=1)
    mlp_ratio: float = ranged(4.0, gt=0)  # MLP width = int(mlp_ratio · d_model), at least 1
    dropout: float = ranged(0.0, ge=0, lt=1)
    qk_norm: bool = False  # RMS-normalise q and k per head (learnt gain) before the scheme acts on them
    # gpt2: N(0, 0.02), LM head tied to the embedding; fan_in: embeddings N(0, 1), an LM head of its own, other
    # matrices N(0, 1/(3·fan_in)) (pe_bench.model.decoder.Decoder._init_weights)
    init: str = "gpt2"


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
    # auto (on for cuda) | on | off | graphs: on, with CUDA graphs (torch.compile mode="reduce-overhead"; one CUDA GPU)
    compile: str = "auto"
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
    stride: int | None = ranged(None, ge=1, hint="null = L/4")  # sliding-window stride S
    # tokens scored per length (nonoverlapping, per_position, context use); null = the whole split
    max_tokens: int | None = ranged(None, ge=1, hint="e.g. eval.max_tokens=65536 (null: the whole split)")
    # tokens scored per length in sliding mode (costs length/S forwards per S)
    sliding_max_tokens: int = ranged(16384, ge=1)
    tokens_per_batch: int = ranged(16384, ge=1)  # windows are batched up to this many tokens per forward
    position_buckets: int = ranged(16, ge=1)
    variants: bool = True  # also evaluate the scheme's eval_variants (e.g. learned with clamp/extend)
    # also evaluate with the training-free log-n attention temperature beyond L (rows <scheme>+logn; every scheme)
    logn: bool = False
    # a task's held-out examples: test (what reports read: accuracy.csv) or dev (for tuning a recipe: accuracy_dev.csv,
    # which no report reads)
    heldout: str = "test"


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
    # all | scheme: only the scheme's parameters train (NoPE's head scales: HeadScale), the model keeps the parent's
    trainable: str = "all"


@dataclass
class AttentionConfig:
    """How attention is computed — not what it computes: every backend gives the same numbers (tested), so this is
    not part of a run's identity and may change between training and evaluation."""

    backend: str = "auto"  # auto | sdpa | flex | explicit (pe_bench/model/attention.py)


@dataclass
class LoggerConfig:
    """Where training and evaluation are tracked besides train.csv and eval.csv (always written): nothing more (csv),
    TensorBoard event files, or a Weights & Biases run — all inside the run directory. Not part of a run's identity."""

    name: str = "csv"  # csv | tensorboard | wandb
    project: str = "pe-bench"  # wandb: the project the run is filed under
    mode: str = "offline"  # wandb: offline (no network; `wandb sync` uploads it later) | online
    group: str | None = None  # wandb: the run's group (a sweep sets its name: its runs' curves side by side)


LOGGER_READS = {"csv": {"group"}, "tensorboard": {"group"}, "wandb": {"project", "mode", "group"}}
LOGGER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}  # logger → the package it needs (an extra)


@dataclass
class Config:
    scheme: dict[str, Any] = field(default_factory=lambda: {"name": "alibi"})
    # The chosen task's own Options (pe_bench.tasks; typed by pe_bench.config.task_options when a config is
    # validated): an open node to Hydra, since its keys depend on the task.
    task: Any = field(default_factory=lambda: {"name": tasks.DEFAULT})
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    seed: int = ranged(0, ge=0, le=2**63 - 1)
    results_dir: str = "results"
    cache_dir: str = "~/.cache/pe-bench"


CHOICES = {
    "data.source": ("embedded", "hub", "local"),
    "data.tokenizer": ("byte", "bpe"),
    "data.format": ("text", "json", "parquet", "csv", "arrow"),
    "model.init": ("gpt2", "fan_in"),
    "train.precision": ("auto", "fp32", "bf16"),
    "train.compile": ("auto", "on", "off", "graphs"),
    "attention.backend": ("auto", "sdpa", "flex", "explicit"),
    "eval.split": ("train", "validation", "test"),
    "eval.heldout": ("test", "dev"),
    "finetune.new_positions": ("extend", "interpolate"),
    "finetune.trainable": ("all", "scheme"),
    "logger.name": ("csv", "tensorboard", "wandb"),
    "logger.mode": ("offline", "online"),
}


EVAL_MODES = ("nonoverlapping", "sliding", "per_position", "repetition")


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

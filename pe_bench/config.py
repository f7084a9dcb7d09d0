"""Hydra compose + typed dataclass schemas. The only module that knows about Hydra/OmegaConf.

Every entry point turns ``key=value`` overrides into a validated :class:`Config`; anything wrong (an unknown key, a
value of the wrong type, an unknown scheme or preset) becomes one :class:`ConfigError` line naming the fix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pe_bench import schemes

GROUPS = ("scheme", "model", "data", "train", "eval")


class ConfigError(ValueError):
    """A user-facing configuration problem; its message is one line that names the fix."""


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
    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    mlp_ratio: float = 4.0
    dropout: float = 0.0


@dataclass
class SplitFiles:
    train: str | None = None
    validation: str | None = None
    test: str | None = None

    def given(self) -> dict[str, str]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v}


@dataclass
class DataConfig:
    name: str = "shakespeare"
    source: str = "embedded"  # embedded | hub | local
    path: str | None = None  # hub: dataset id; local: a file, or a directory/glob of files (one document each)
    hub_config: str | None = None  # hub: the dataset's config name, e.g. wikitext-103-raw-v1
    format: str = "text"  # local: the datasets builder — text | json | parquet
    text_field: str = "text"
    splits: dict[str, str] = field(
        default_factory=lambda: {"train": "train", "validation": "validation", "test": "test"}
    )
    files: SplitFiles = field(default_factory=lambda: SplitFiles())  # local: one file per split
    valid_fraction: float = 0.05  # local single source: last fractions become validation/test (contiguous)
    test_fraction: float = 0.05
    doc_separator: str = "\n\n"  # joins documents (use "" for line-per-row corpora like WikiText)
    max_train_docs: int | None = None  # cap for huge corpora (PG-19)
    tokenizer: str = "byte"  # byte (vocab 256) | bpe (trained locally on the train split)
    vocab_size: int = 4096  # bpe only


@dataclass
class TrainConfig:
    name: str = "quick"
    seq_len: int = 64
    batch_size: int = 32
    grad_accum: int = 1
    steps: int = 1000
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    log_interval: int = 10
    val_interval: int = 250
    val_batches: int = 8
    ckpt_interval: int = 0  # 0: checkpoint only at the end
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: str = "auto"  # auto (bf16 on cuda, fp32 on cpu) | fp32 | bf16
    compile: str = "auto"  # auto (on for cuda) | on | off
    threads: int | None = None  # CPU threads; None = torch default
    # Randomized positions (Ruoss et al. 2023): each batch uses a sorted random subset of [0, random_positions)
    # instead of 0..seq_len-1, in training and in evaluation. 0 = off.
    random_positions: int = 0


@dataclass
class EvalConfig:
    name: str = "default"
    split: str = "validation"
    ratios: list[float] = field(default_factory=lambda: [1, 2, 4, 8])  # eval lengths as multiples of L...
    lengths: list[int] | None = None  # ...unless given explicitly
    modes: list[str] = field(default_factory=lambda: ["nonoverlapping", "sliding", "per_position"])
    stride: int | None = None  # sliding-window stride S; None = the training length L
    max_tokens: int = 65536  # tokens scored per length (nonoverlapping, per_position)
    sliding_max_tokens: int = 16384  # tokens scored per length in sliding mode (costs length/S forwards per S)
    tokens_per_batch: int = 16384  # windows are batched up to this many tokens per forward
    position_buckets: int = 16
    variants: bool = True  # also evaluate the scheme's eval_variants (e.g. learned with clamp/extend)


@dataclass
class Config:
    scheme: dict[str, Any] = field(default_factory=lambda: {"name": "alibi"})
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0
    results_dir: str = "results"
    cache_dir: str = "~/.cache/pe-bench"


CHOICES = {
    "data.source": ("embedded", "hub", "local"),
    "data.tokenizer": ("byte", "bpe"),
    "data.format": ("text", "json", "parquet", "csv", "arrow"),
    "train.precision": ("auto", "fp32", "bf16"),
    "train.compile": ("auto", "on", "off"),
}
EVAL_MODES = ("nonoverlapping", "sliding", "per_position")


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
    if name not in schemes.REGISTRY:
        raise ConfigError(f"unknown scheme {name!r}; choose one of: {', '.join(schemes.available())} "
                          "(`pe-bench schemes` describes them)")
    cls = schemes.get(name)
    return SchemeSpec(cls, _typed(cls.Options, cfg, "scheme"), [dict(v) for v in variants])


def with_options(spec: SchemeSpec, overrides: dict[str, Any]) -> SchemeSpec:
    base = dataclasses.asdict(spec.options)
    base.update(overrides)
    return SchemeSpec(spec.cls, _typed(spec.cls.Options, base, "scheme"), [])


def _typed(schema: type, values: Any, prefix: str) -> Any:
    """Merge plain values into a dataclass schema; unknown keys and bad types become ConfigError."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), values)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(_omegaconf_message(e, prefix, schema)) from None
    except (ValueError, TypeError) as e:  # __post_init__ checks
        raise ConfigError(str(e).splitlines()[0]) from None


def _omegaconf_message(e: OmegaConfBaseException, prefix: str, schema: type) -> str:
    key = getattr(e, "full_key", None) or ""
    full = f"{prefix}.{key}" if prefix and key else (key or prefix)
    text = str(e).splitlines()[0]
    if "not in" in text or "Key '" in text and "not" in text:
        return f"unknown config key '{full}'{_keys_hint(full, schema if prefix else Config)}"
    if "could not be converted" in text or "Invalid type" in text or "Value '" in text:
        return f"bad value for '{full}': {text}"
    return f"bad config at '{full}': {text}"


def _keys_hint(full_key: str, schema: type = Config) -> str:
    """'; valid keys in model: name, n_layers, ...' for an unknown dotted key, walking the dataclass schema
    (a scheme's own Options when given as schema)."""
    parts = full_key.split(".")[:-1]
    if schema is Config:
        if parts[:1] == ["scheme"]:
            return "; see configs/scheme/<name>.yaml for that scheme's options"
        for part in parts:
            f = {f.name: f for f in dataclasses.fields(schema)}.get(part)
            if f is None or f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                return ""
            schema = type(f.default_factory())  # type: ignore[misc]
            if not dataclasses.is_dataclass(schema):
                return ""
    group = ".".join(parts) or "the config"
    return f"; valid keys in {group}: {', '.join(f.name for f in dataclasses.fields(schema))}"


def validate(raw: DictConfig | dict[str, Any]) -> Config:
    """Raw (untyped) config → typed Config, with every value checked."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), raw)
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise ConfigError(_omegaconf_message(e, "", Config)) from None
    for dotted, allowed in CHOICES.items():
        group, key = dotted.split(".")
        value = getattr(getattr(cfg, group), key)
        if value not in allowed:
            raise ConfigError(f"{dotted}={value!r} is not one of: {', '.join(allowed)}")
    bad_modes = [m for m in cfg.eval.modes if m not in EVAL_MODES]
    if bad_modes:
        raise ConfigError(f"eval.modes has {bad_modes}; allowed: {', '.join(EVAL_MODES)}")
    for name, value in [("train.seq_len", cfg.train.seq_len), ("train.steps", cfg.train.steps),
                        ("train.batch_size", cfg.train.batch_size), ("train.grad_accum", cfg.train.grad_accum),
                        ("model.n_layers", cfg.model.n_layers), ("model.n_heads", cfg.model.n_heads)]:
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    if cfg.train.random_positions and cfg.train.random_positions < cfg.train.seq_len:
        raise ConfigError(f"train.random_positions={cfg.train.random_positions} must be 0 (off) or at least "
                          f"train.seq_len={cfg.train.seq_len}; Ruoss et al. use 2048 for L=40")
    if cfg.model.d_model % cfg.model.n_heads:
        raise ConfigError(f"model.d_model={cfg.model.d_model} must be divisible by model.n_heads={cfg.model.n_heads}")
    if cfg.data.source != "embedded" and not (cfg.data.path or cfg.data.files.given()):
        raise ConfigError(f"data.source={cfg.data.source} needs data.path=... (or data.files for local splits)")
    scheme_spec(cfg.scheme)
    return cfg


# ---------------------------------------------------------------------------------------------------------------
# Composition
# ---------------------------------------------------------------------------------------------------------------
def compose(overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """configs/config.yaml + Hydra overrides (``scheme=rope model.n_layers=2 eval.lengths=[64,128]``) → Config."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.errors import MissingConfigException

    ConfigStore.instance().store(name="pe_bench_schema", node=Config)  # config.yaml's first default
    overrides = list(overrides)
    _check_group_choices(overrides)
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            raw = hydra_compose(config_name="config", overrides=overrides)
    except MissingConfigException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    except Exception as e:  # noqa: BLE001 - Hydra/OmegaConf raise many unrelated types for bad overrides
        raise ConfigError(_hydra_message(e)) from None
    return validate(raw)


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


def _hydra_message(e: BaseException) -> str:
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
        return f"unknown config key '{key}'{_keys_hint(key)}"
    return lines[0] if lines else repr(e)


def apply_overrides(cfg: Config, overrides: list[str], allowed: tuple[str, ...] = GROUPS + ("seed",)) -> Config:
    """Overrides on an existing (e.g. saved) config, restricted to the given top-level keys. ``eval=NAME`` loads
    a preset of that group."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    raw = OmegaConf.structured(cfg)
    OmegaConf.set_struct(raw, False)
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors are several unrelated classes
        raise ConfigError(f"cannot parse overrides: {str(e).splitlines()[0]}") from None
    for o in parsed:
        key = o.key_or_group
        if key.split(".")[0] not in allowed:
            raise ConfigError(f"'{key}' cannot be changed here; allowed: {', '.join(a + '.*' for a in allowed)}")
        if o.is_sweep_override():
            raise ConfigError(f"'{o.input_line}' is a sweep; use `pe-bench sweep` for several values")
        value = o.value()
        if key in GROUPS:
            _check_group_choices([f"{key}={value}"])
            raw[key] = OmegaConf.load(config_dir() / key / f"{value}.yaml")
        else:
            OmegaConf.update(raw, key, value, merge=True)
    return validate(raw)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def from_yaml(path: Path) -> Config:
    return validate(OmegaConf.load(path))


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)

"""Fine-tuning from another run (``pe-bench finetune RUN_DIR ...``): the child's config — its parent's, with a
fine-tuning recipe — and the parent's final weights as its starting point.

What a fine-tune may change is what does not change the meaning of the parent's weights: the training recipe
(``train.*``, ``train=finetune`` unless another preset is named), the evaluation, the scheme's eval-time options
(RoPE's ``scheme.scaling``, NoPE's ``scheme.head_scale``), ``finetune.new_positions`` and what trains
(``finetune.trainable``). The model, data, task, scheme and seed are the parent's.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from pe_bench.config import (Config, ConfigError, apply_overrides, check_override_words, compose, finetune_parent,
                             fixed_option_changes, model_shape, run_lengths, scheme_spec, validate)
from pe_bench.runs import Run, digest, identity

PRESET = "finetune"  # configs/train/finetune.yaml: the recipe of a fine-tune that names no train preset
CHANGEABLE = ("train", "eval", "scheme", "finetune", "attention", "results_dir", "cache_dir")
FILLED = ("from_run", "parent", "parent_config", "original_seq_len", "data_offset")  # finetune.* taken from the parent


def finetune_tag(cfg: Config) -> str:
    """What a fine-tuned run's table rows add to the scheme label: PoSE's target (and chunks), the learned table's
    growth policy when not the default, `` scheme-only`` when the rest was frozen, `` ft<steps>@<L>`` — e.g.
    ``rope+yarn×8 ft100@512``, ``rope+yarn×8 PoSE→512 ft100@64``. Empty for a run trained from scratch."""
    return method_tag(cfg).replace(" @", f" ft{cfg.train.steps}@") if cfg.finetune.from_run else ""


def method_tag(cfg: Config) -> str:
    """A fine-tune's method without its budget (``finetune_tag`` without the steps): `` PoSE→512 @64``."""
    if not cfg.finetune.from_run:
        return ""
    t = cfg.train
    pose = f" PoSE→{t.pose_target}" + (f"/{t.pose_chunks} chunks" if t.pose_chunks != 2 else "") if t.pose_target else ""
    grow = " interpolated" if cfg.finetune.new_positions != "extend" else ""
    only = f" {cfg.finetune.trainable}-only" if cfg.finetune.trainable != "all" else ""
    return f"{pose}{grow}{only} @{t.seq_len}"


def parent_run(path: str | Path) -> tuple[Run, Config]:
    """The parent run and its config; one ConfigError line when it cannot be fine-tuned from (not a run directory,
    not finished, its weights gone)."""
    run = Run(Path(path).expanduser())
    if not run.config.is_file():
        raise ConfigError(f"{path} is not a run directory (no config.yaml); give one, e.g. results/runs/<name>")
    cfg = run.load_config()
    if not run.is_done():
        raise ConfigError(f"{run.path.name} is not finished (status {run.status}): a fine-tune starts from a finished "
                          "run's final weights; finish it first (the same `pe-bench train ...` command resumes it)")
    if not run.checkpoint.exists():
        raise ConfigError(f"{run.checkpoint} is missing: the parent's weights are gone, so nothing can be fine-tuned "
                          "from it; train the parent again in a new results_dir")
    return run, cfg


def compose_run(overrides: list[str] | tuple[str, ...] = (), scheme: bool = True) -> Config:
    """One run's config from Hydra overrides: a fine-tune's (``compose_finetune``) when they name
    finetune.from_run — ``pe-bench train finetune.from_run=RUN_DIR`` is ``pe-bench finetune RUN_DIR`` — else
    ``config.compose`` (``scheme``: see there)."""
    check_override_words(list(overrides))
    parent = finetune_parent(list(overrides))
    if parent is not None:
        return compose_finetune(*parent)
    return compose(overrides, scheme=scheme)


def compose_finetune(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The config of a fine-tune of the run at ``path``: the parent's config, ``train=finetune`` (unless the
    overrides name a train preset), no eval-time variants (unless given), then ``overrides``. Unless they set
    eval.lengths, eval.ratios or an eval preset, eval.lengths are the parent's eval lengths and the fine-tune's L."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parent, pcfg = parent_run(path)
    words = list(overrides)
    check_override_words(words, "finetune")
    keys = [o.key_or_group for o in OverridesParser.create().parse_overrides(words)]
    for key, word in zip(keys, words):
        top = key.split(".")[0]
        if top not in CHANGEABLE or key == "scheme" and word.partition("=")[2] != pcfg.scheme["name"]:
            raise ConfigError(f"'{word}': a fine-tune keeps its parent's model, data, task, scheme and seed (its "
                              f"weights are {parent.path.name}'s); it may change train.*, eval.*, the scheme's "
                              "eval-time options, finetune.new_positions and finetune.trainable — train another "
                              "parent for the rest")
        if key.startswith("finetune.") and key.split(".")[1] in FILLED:
            raise ConfigError(f"'{word}': finetune.{key.split('.')[1]} is taken from the parent run; give the parent as "
                              "`pe-bench finetune RUN_DIR`")
    words = [w for k, w in zip(keys, words) if k != "scheme"]
    raw = OmegaConf.structured(pcfg)
    if not any(k == "scheme.eval_variants" for k in keys):
        raw.scheme.eval_variants = []  # the parent's eval-time variants would undo the fine-tune's own options
    raw.results_dir = str(parent.path.parent.parent)  # beside the parent (results_dir=... moves it)
    # the parent is filled in before the overrides are checked: finetune.new_positions needs a parent
    raw.finetune.from_run = str(parent.path)
    raw.finetune.parent = parent.path.name
    raw.finetune.parent_config = digest(identity(pcfg, seed=False))
    raw.finetune.original_seq_len = pcfg.finetune.original_seq_len or pcfg.train.seq_len
    raw.finetune.data_offset = pcfg.finetune.data_offset + pcfg.train.steps
    base = validate(raw)
    preset = [] if "train" in keys else [f"train={PRESET}"]
    cfg = apply_overrides(base, preset + words, allowed=CHANGEABLE)
    _check_scheme_options(pcfg, cfg)
    _check_trainable(cfg)
    if cfg.train.seq_len < pcfg.train.seq_len:
        raise ConfigError(f"train.seq_len={cfg.train.seq_len} is shorter than the parent's L={pcfg.train.seq_len}: a "
                          f"fine-tune extends the context; give train.seq_len >= {pcfg.train.seq_len} (or "
                          f"train.pose_target for PoSE at the parent's L)")
    if not {"eval", "eval.lengths", "eval.ratios"} & set(keys):  # by default: the parent's lengths and its own L
        raw = OmegaConf.structured(cfg)
        raw.eval.lengths = sorted(set(run_lengths(pcfg)) | {cfg.train.seq_len})
        cfg = validate(raw)
    return cfg


def warmup_warning(cfg: Config) -> str | None:
    """A line when a fine-tune's warmup is longer than its budget (its learning rate never reaches train.lr)."""
    t = cfg.train
    if not cfg.finetune.from_run or t.warmup_steps <= t.steps:
        return None
    return (f"warning: train.warmup_steps={t.warmup_steps} exceeds the fine-tune's train.steps={t.steps}: its learning "
            f"rate never reaches train.lr={t.lr:g}; lower train.warmup_steps or raise train.steps")


def _check_scheme_options(parent: Config, cfg: Config) -> None:
    """Only the scheme's eval-time options may differ from the parent's: the others define what its weights mean."""
    old = dict(parent.scheme)
    fixed, allowed = fixed_option_changes(old, dict(cfg.scheme))
    if fixed:
        raise ConfigError(f"scheme.{fixed[0]} is fixed by the parent's weights for {old['name']} (trained with "
                          f"{old.get(fixed[0])!r}); options a fine-tune of {old['name']} may change: {allowed}")


def _check_trainable(cfg: Config) -> None:
    """finetune.trainable=scheme needs a scheme with parameters to train."""
    if cfg.finetune.trainable != "scheme":
        return
    spec = scheme_spec(cfg.scheme)
    if not any(True for _ in spec.cls(spec.options, model_shape(cfg)).parameters()):
        raise ConfigError(f"finetune.trainable=scheme but scheme {cfg.scheme['name']} with these options has no "
                          "parameters to train (e.g. NoPE's head scales need scheme.head_scale=<start>); set them or "
                          "finetune.trainable=all")

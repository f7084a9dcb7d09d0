"""Hydra composition: configs/config.yaml, presets and ``key=value`` overrides → a validated Config; overrides on a
saved config; YAML in and out. The only place that knows Hydra."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pe_bench import plugins, schemes, tasks
from pe_bench.config.schema import GROUPS, LOGGER_PACKAGES, Config, config_dir, preset_dirs, preset_names, preset_path
from pe_bench.config.typed import keys_hint, omegaconf_message, structured
from pe_bench.config.validate import validate
from pe_bench.errors import ConfigError


def compose(overrides: list[str] | tuple[str, ...] = (), scheme: bool = True) -> Config:
    """configs/config.yaml + Hydra overrides (``scheme=rope model.n_layers=2 eval.lengths=[64,128]``) → Config.
    ``train=smoke`` without an ``eval=`` choice brings ``eval=smoke``: a smoke run is smoke end to end; a task
    (``task=passkey``) without a ``train=`` choice brings its recipe (``train=task``, the recipe the tasks are tuned
    for, unless the task names another), and without a ``model=`` choice the task's model preset if it names one.
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
    if chosen.get("train") == "smoke" and "task.eval_examples" not in chosen:
        overrides += _smoke_examples(chosen.get("task"))
    task = _task_class(chosen.get("task"))
    if task is not None and task.recipe and "train" not in chosen:
        overrides.append(f"train={task.recipe}")  # a synthetic task trains with its recipe (configs/train/task.yaml)
    if task is not None and task.model and "model" not in chosen:
        overrides.append(f"model={task.model}")
    # task.* is an open node (its keys are the chosen task's, pe_bench.config.task_options): a key its preset does not
    # list is added, not refused by Hydra as new
    overrides = [f"++{o}" if o.startswith("task.") else o for o in overrides]
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            raw = hydra_compose(config_name="config", overrides=overrides + _search_path())
    except MissingConfigException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    except Exception as e:  # noqa: BLE001 - Hydra/OmegaConf raise many unrelated types for bad overrides
        default = OmegaConf.load(config_dir() / "config.yaml").defaults[1].scheme
        raise ConfigError(_hydra_message(e, chosen.get("scheme", default))) from None
    cfg = validate(raw, scheme=scheme)
    check_logger_package(cfg)
    return cfg


def check_logger_package(cfg: Config) -> None:
    """The package a run's logger needs, installed — checked when a run is composed to train (a report of the run
    elsewhere needs no tracker)."""
    import importlib.util

    package = LOGGER_PACKAGES.get(cfg.logger.name)
    if package and importlib.util.find_spec(package) is None:
        raise ConfigError(f"logger={cfg.logger.name} needs the {package} package: pip install 'pe-bench[{package}]' "
                          "(or logger=csv)")


def _search_path() -> list[str]:
    """Hydra's override that adds the plugins' configs/ directories to its search path (pe_bench.plugins)."""
    extra = preset_dirs()[1:]
    return [f"hydra.searchpath=[{','.join(hydra_quoted(d.as_uri()) for d in extra)}]"] if extra else []


def _task_class(preset: str | None) -> type[tasks.Task] | None:
    """The task a task preset names, whose ``recipe`` and ``model`` presets a run brings (None: no such preset)."""
    path = preset_path("task", preset) if preset is not None else None
    if path is None or not path.is_file():
        return None
    name = OmegaConf.load(path).get("name", tasks.DEFAULT)
    return tasks.get(name) if name in tasks.names() else None


SMOKE_EXAMPLES = 40  # held-out examples per length of a synthetic task under train=smoke (a check, not a number)


def _smoke_examples(preset: str | None) -> list[str]:
    """``task.eval_examples`` for a smoke run of a synthetic task: about SMOKE_EXAMPLES per length, over all its
    depths where it is evaluated by depth; [] for language modelling."""
    task = _task_class(preset)
    if task is None or preset is None or task.metric == "perplexity":
        return []
    depths = OmegaConf.load(preset_path("task", preset)).get("depths")
    if depths is None:
        depths = getattr(task.Options(), "depths", 1)
    return [f"task.eval_examples={max(1, SMOKE_EXAMPLES // int(depths))}"]


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
        key = w.partition("=")[0]
        if key.lstrip("+~").split(".")[0] == "hydra":
            raise ConfigError(f"'{w}': pe-bench does not use Hydra's own settings; a run's directory is "
                              "<results_dir>/runs/<name> (set results_dir=DIR), and `pe-bench sweep` runs sweeps")
        if key.startswith("+"):
            raise ConfigError(f"'{w}': every key pe-bench reads is in its config already, and a new one would be "
                              f"ignored; write {w.lstrip('+')} (`pe-bench {command} --cfg` prints the keys)")
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
            preset_path(key, value)  # a preset defined twice is refused here
            options = preset_names(key)
            if value not in options:
                what = "scheme" if key == "scheme" else f"{key} preset"
                raise ConfigError(f"unknown {what} {value!r}; choose one of: {', '.join(options)}"
                                  f"{plugin_problems()}")


def plugin_problems() -> str:
    """The plugins left out (read once by the registries), as the end of an "unknown name" message."""
    schemes.catalog()
    tasks.registry()
    return plugins.problems_said()


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
            return f"unknown config key '{key}'{keys_hint(key[7:], schemes.get(scheme_name).Options, 'scheme')}"
        return f"unknown config key '{key}'{keys_hint(key)}"
    return lines[0] if lines else repr(e)


def apply_overrides(cfg: Config, overrides: list[str], allowed: tuple[str, ...] = GROUPS + ("seed",)) -> Config:
    """Overrides on an existing (e.g. saved) config, restricted to the given top-level keys. ``eval=NAME`` loads
    a preset of that group."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    raw = OmegaConf.structured(cfg)
    OmegaConf.set_struct(raw, False)
    raw.task = OmegaConf.create(dataclasses.asdict(cfg.task))  # an open node: its keys depend on the task chosen
    check_override_words(list(overrides), "eval")
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    for o in parsed:
        key = o.key_or_group
        if key.split(".")[0] not in allowed:
            raise ConfigError(f"'{key}' cannot be changed here; allowed: {', '.join(a + '.*' for a in allowed)}")
        value = o.value()
        if key in GROUPS:
            _check_group_choices([f"{key}={value}"])
            preset = OmegaConf.load(preset_path(key, value))
            current = getattr(cfg, key)  # a typed group takes the preset through its schema (a task: its own)
            typed_group = dataclasses.is_dataclass(current) and key != "task"
            raw[key] = OmegaConf.merge(structured(type(current)), preset) if typed_group else preset
        else:
            try:
                OmegaConf.update(raw, key, value, merge=True)
            except OmegaConfBaseException as e:
                raise ConfigError(omegaconf_message(e, "", Config)) from None
    return validate(raw)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def from_yaml(path: Path) -> Config:
    """A saved config (a run's config.yaml); options added since with a model-changing default are read with the
    value its run was made with (``Scheme.legacy_options``)."""
    return from_yaml_text(path.read_text(encoding="utf-8"))


def from_yaml_text(text: str) -> Config:
    """:func:`from_yaml` of a config file's text."""
    raw = OmegaConf.to_container(OmegaConf.load(io.StringIO(text)), resolve=False)
    if isinstance(raw, dict) and "scheme" in raw:
        raw["scheme"] = schemes.with_legacy_options(raw["scheme"])
    return validate(raw)


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)

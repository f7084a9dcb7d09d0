"""Configuration: typed dataclass schemas, Hydra composition and validation. The only package that knows
Hydra/OmegaConf.

Every entry point turns ``key=value`` overrides into a validated :class:`Config`; anything wrong (an unknown key, a
value of the wrong type, an unknown scheme or preset) becomes one :class:`ConfigError` line naming the fix.

- ``schema``: the dataclasses (one per group), the choices of string keys, the presets' directory;
- ``typed``: plain values into a dataclass schema, problems as one line;
- ``scheme_options``: a scheme's options typed by its own ``Options`` and built once for the model's shape;
- ``task_options``: a task's options typed by its own ``Options``;
- ``validate``: a raw config checked whole; ``lengths``: a run's eval lengths;
- ``compose``: Hydra composition, overrides on a saved config, YAML in and out.
"""

from pe_bench.config.compose import (apply_overrides, check_override_words, compose, finetune_parent, from_yaml,
                                     from_yaml_text, hydra_quoted, to_dict, to_yaml)
from pe_bench.config.lengths import eval_lengths, reference_length, run_lengths
from pe_bench.config.schema import (CHOICES, DATA_READS, EVAL_MODES, GROUPS, AttentionConfig, Config, DataConfig,
                                    EvalConfig, FinetuneConfig, LoggerConfig, ModelConfig, SplitFiles, TrainConfig,
                                    config_dir, preset_dirs, preset_names, preset_path)
from pe_bench.config.scheme_options import (SchemeSpec, check_scheme, fixed_option_changes, model_shape, scheme_spec,
                                            with_options)
from pe_bench.config.typed import omegaconf_message
from pe_bench.config.validate import compile_problem, validate
from pe_bench.errors import ConfigError
from pe_bench.config.task_options import task_options

__all__ = ["CHOICES", "DATA_READS", "EVAL_MODES", "GROUPS", "AttentionConfig", "Config", "ConfigError", "DataConfig",
           "EvalConfig", "FinetuneConfig", "LoggerConfig", "ModelConfig", "SchemeSpec", "SplitFiles", "TrainConfig",
           "apply_overrides", "check_override_words", "check_scheme", "compile_problem", "compose", "config_dir",
           "eval_lengths", "finetune_parent", "fixed_option_changes", "from_yaml", "from_yaml_text", "hydra_quoted",
           "model_shape",
           "omegaconf_message", "preset_dirs", "preset_names", "preset_path", "reference_length", "run_lengths",
           "scheme_spec", "task_options", "to_dict", "to_yaml", "validate", "with_options"]

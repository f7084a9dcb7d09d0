"""Bad input is refused at compose time: one line, exit code 2, before anything is created.

Three layers: (1) every numeric field of every schema (the config groups, every scheme's Options, nested ones)
declares a range, and (2) a value just outside it is refused with the out-of-range message, generated from the
schemas themselves, so a new field or a new scheme is covered without editing this file, also inside a composite's
parts and an eval variant; (3) a catalogue of the other families through the CLI (relations between fields, keys the
chosen preset does not read, shape checks that need the scheme built, composite parts, eval variants).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import yaml
from typer.testing import CliRunner

from pe_bench import schemes
from pe_bench.cli import app
from pe_bench.config import Config, ConfigError, config_dir, preset_names, validate
from pe_bench.ranges import fmt, numeric_fields, range_problem

runner = CliRunner()
SCHEMES = schemes.available()
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="train.compile=graphs trains where a GPU is visible")
PARTS = [n for n in SCHEMES if n != "hybrid"]


def scheme_yaml(name: str) -> dict:
    return yaml.safe_load((config_dir() / "scheme" / f"{name}.yaml").read_text())


def nested(dotted: str, value) -> dict:
    """'train.lr', 3 -> {'train': {'lr': 3}}."""
    out: dict = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def refused(raw: dict) -> str:
    with pytest.raises(ConfigError) as e:
        validate(raw)
    message = str(e.value)
    assert "\n" not in message
    return message


def bad_values(field) -> list:
    """Values just outside a field's declared range (below its lower bound, above its upper bound)."""
    r, out = field.range, []
    if r.ge is not None:
        out.append(r.ge - 1)
    elif r.gt is not None:
        out.append(r.gt)
    if r.le is not None:
        out.append(r.le + 1)
    elif r.lt is not None:
        out.append(r.lt)
    return [int(v) if field.type is int else v for v in out]


def out_of_range(key: str, field, value) -> str:
    key = f"{key}[0]" if field.is_list else key
    rule = field.range.rule() + (" (or null)" if field.optional and not field.is_list else "")
    return f"{key}={fmt(value)} is out of range: {rule}"


# ---------------------------------------------------------------------------------------------------------------
# 1. Every numeric field declares a range, and every default lies inside it
# ---------------------------------------------------------------------------------------------------------------
SCHEMAS = [("", Config)] + [(f"scheme={n}", schemes.get(n).Options) for n in SCHEMES]


@pytest.mark.parametrize("where,schema", SCHEMAS, ids=[w or "config" for w, _ in SCHEMAS])
def test_every_numeric_field_declares_a_range(where, schema):
    assert dataclasses.is_dataclass(schema)
    missing = [f.key for f in numeric_fields(schema) if f.range is None]
    assert not missing, f"{where or 'Config'}: numeric fields without a declared range (use ranged(...)): {missing}"
    assert range_problem(schema, schema()) is None  # the defaults are valid


def test_the_walker_sees_nested_and_list_fields():
    keys = {f.key for f in numeric_fields(Config)}
    assert {"train.lr", "eval.ratios", "eval.lengths", "data.vocab_size", "seed"} <= keys
    assert "scaling.factor" in {f.key for f in numeric_fields(schemes.get("rope").Options)}


# ---------------------------------------------------------------------------------------------------------------
# 2. Generated from the schemas: a value just outside each declared range is refused, naming key, value and rule
# ---------------------------------------------------------------------------------------------------------------
CONFIG_CASES = [(f.key, f, v) for f in numeric_fields(Config) for v in bad_values(f)]


@pytest.mark.parametrize("key,field,value", CONFIG_CASES, ids=[f"{k}={v}" for k, _, v in CONFIG_CASES])
def test_config_field_out_of_range(key, field, value):
    message = refused(nested(key, [value] if field.is_list else value))
    assert message.startswith(out_of_range(key, field, value)), message


SCHEME_CASES = [(n, f.key, f, v) for n in SCHEMES for f in numeric_fields(schemes.get(n).Options)
                for v in bad_values(f)]
SCHEME_IDS = [f"{n}.{k}={v}" for n, k, _, v in SCHEME_CASES]


@pytest.mark.parametrize("name,key,field,value", SCHEME_CASES, ids=SCHEME_IDS)
def test_scheme_option_out_of_range(name, key, field, value):
    scheme = {**scheme_yaml(name), **nested(key, [value] if field.is_list else value)}
    message = refused({"scheme": scheme})
    assert message.startswith(out_of_range(f"scheme.{key}", field, value)), message


PART_CASES = [c for c in SCHEME_CASES if c[0] in PARTS]


@pytest.mark.parametrize("name,key,field,value", PART_CASES, ids=[f"{n}.{k}={v}" for n, k, _, v in PART_CASES])
def test_composite_part_option_out_of_range(name, key, field, value):
    parts = [{"name": "sinusoidal"}, {"name": name, **nested(key, [value] if field.is_list else value)}]
    message = refused({"scheme": {"name": "hybrid", "parts": parts}})
    assert message.startswith(out_of_range(f"scheme.parts[1].{key}", field, value)), message


@pytest.mark.parametrize("name,key,field,value", SCHEME_CASES, ids=SCHEME_IDS)
def test_eval_variant_option_out_of_range(name, key, field, value):
    scheme = {**scheme_yaml(name), "eval_variants": [nested(key, [value] if field.is_list else value)]}
    message = refused({"scheme": scheme})
    assert message.startswith(out_of_range(f"scheme.eval_variants[0].{key}", field, value)), message


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_numbers_are_refused(value):
    assert refused(nested("model.mlp_ratio", value)).startswith(f"model.mlp_ratio={value} is not a finite number")


def test_every_preset_and_scheme_composes():
    """No false refusals: every preset of every group, and every scheme on every model preset, is valid."""
    def preset(group, name):
        return yaml.safe_load((config_dir() / group / f"{name}.yaml").read_text())

    for group in ("data", "train", "eval"):
        for name in preset_names(group):
            values = preset(group, name)
            if values.get("source") == "local":
                values["path"] = "corpus.txt"  # the one key data=local needs from the user
            validate({group: values})
    for model in preset_names("model"):
        for name in SCHEMES:
            validate({"scheme": scheme_yaml(name), "model": preset("model", model)})


# ---------------------------------------------------------------------------------------------------------------
# 3. The catalogue, through the CLI: one line, exit 2, no traceback, nothing created
# ---------------------------------------------------------------------------------------------------------------
CATALOGUE = [
    # numeric ranges: negative, zero, above a maximum, empty list, list element, non-finite (every other numeric
    # field is covered by the generated tests above, through validate)
    (["eval.stride=-1"], "eval.stride=-1 is out of range: must be >= 1 (or null); null = L/4"),
    (["eval.stride=0"], "eval.stride=0 is out of range: must be >= 1"),
    (["eval.lengths=[-64]"], "eval.lengths[0]=-64 is out of range: must be >= 1"),
    (["eval.lengths=[64,0]"], "eval.lengths[1]=0 is out of range: must be >= 1"),
    (["eval.lengths=[]"], "eval.lengths=[] is empty: list at least one value"),
    (["eval.ratios=[]"], "eval.ratios=[] is empty: list at least one value; e.g. eval.ratios=[1,2,4,8]"),
    (["eval.ratios=[1,-2]"], "eval.ratios[1]=-2 is out of range: must be > 0"),
    (["train.lr=-1"], "train.lr=-1 is out of range: must be > 0"),
    (["train.lr=0"], "train.lr=0 is out of range: must be > 0"),
    (["train.lr=inf"], "train.lr=inf is not a finite number: must be > 0"),
    (["model.dropout=1.5"], "model.dropout=1.5 is out of range: must be in [0, 1)"),
    (["train.beta2=1.0"], "train.beta2=1 is out of range: must be in [0, 1)"),
    (["train.grad_clip=-1"], "train.grad_clip=-1 is out of range: must be >= 0; 0 turns clipping off"),
    (["train.threads=0"], "train.threads=0 is out of range: must be >= 1 (or null)"),
    (["seed=-1"], "seed=-1 is out of range: must be in [0, 9223372036854775807]"),
    (["data=local", "data.path=a.txt", "data.tokenizer=bpe", "data.vocab_size=256"],
     "data.vocab_size=256 is out of range: must be >= 257"),
    (["scheme=alibi", "scheme.heads=0"], "scheme.heads=0 is out of range: must be >= 1 (or null)"),
    (["scheme=rope", "scheme.scaling.factor=0.5"], "scheme.scaling.factor=0.5 is out of range: must be >= 1"),
    # relations between fields
    (["eval.ratios=[0.001]"], "eval.ratios has 0.001, an eval length of round(0.001 × train.seq_len=64) = 0 tokens"),
    (["model.mlp_ratio=0.001"], "model.mlp_ratio=0.001 gives an MLP of int(0.001 × model.d_model=128) = 0 units"),
    (["train.random_positions=10"], "train.random_positions=10 must be 0 (off) or at least train.seq_len=64"),
    (["model.d_model=100", "model.n_heads=3"], "model.d_model=100 must be divisible by model.n_heads=3"),
    (["scheme=t5", "scheme.num_buckets=64", "scheme.max_distance=20"],
     "scheme.max_distance=20 must exceed scheme.num_buckets // 2 = 32"),
    (["scheme=rope", "scheme.scaling.type=llama3", "scheme.scaling.factor=8", "scheme.scaling.low_freq_factor=4"],
     "scheme.scaling.high_freq_factor=4 must exceed scheme.scaling.low_freq_factor=4"),
    (["scheme=rope", "scheme.scaling.type=yarn", "scheme.scaling.factor=8", "scheme.scaling.beta_fast=0.5"],
     "scheme.scaling.beta_fast=0.5 must exceed scheme.scaling.beta_slow=1"),
    (["scheme=sandwich", "scheme.dim=5"], "scheme.dim=5 must be even"),
    # choices and lists of names
    (["eval.split=dev"], "eval.split='dev' is not one of: train, validation, test"),
    (["eval.modes=[]"], "eval.modes=[] is empty: list at least one of nonoverlapping, sliding, per_position"),
    # shape checks: the scheme (and each eval variant) is built once for the model's shape
    (["scheme=alibi", "scheme.heads=99"], "scheme.heads=99 exceeds model.n_heads=4; use at most 4, or null"),
    (["scheme=rope", "model.d_model=132"], "rope rotates pairs of dimensions, but the head dimension "
     "model.d_model/model.n_heads = 132/4 = 33 is odd; choose d_model and n_heads with an even quotient, "
     "e.g. model.d_model=136"),
    (["scheme=xpos", "model.d_model=132"], "xpos rotates pairs of dimensions, but the head dimension"),
    (["scheme=rope", "scheme.rotary_fraction=0.01"], "scheme.rotary_fraction=0.01 rotates no dimension of a 32-dim"),
    (["scheme=rope", "model.d_model=8", "model.n_heads=4"],
     "scheme.eval_variants[1].scaling.type=ntk needs a rotary dimension above 2"),
    # composite parts: the same typed schema as the scheme itself
    (["scheme=hybrid", "scheme.parts=[{name:alibi,headz:2}]"],
     "unknown config key 'scheme.parts[0].headz'; valid keys in scheme.parts[0]: learned_slopes, heads"),
    (["scheme=hybrid", "scheme.parts=[{name:alibi,heads:two}]"], "bad value for 'scheme.parts[0].heads'"),
    (["scheme=hybrid", "scheme.parts=[{name:sinusoidal},{name:alibi,heads:0}]"],
     "scheme.parts[1].heads=0 is out of range: must be >= 1 (or null)"),
    (["scheme=hybrid", "scheme.parts=[{name:sinusoidal},{name:alibi,heads:99}]"],
     "scheme.parts[1].heads=99 exceeds model.n_heads=4"),
    (["scheme=hybrid", "scheme.parts=[{name:rope,scaling:{type:linear,beta_fast:3}}]"],
     "scheme.parts[0].scaling.beta_fast=3 is not read by scheme.parts[0].scaling.type=linear"),
    (["scheme=hybrid", "scheme.parts=[{name:rope},{name:alibi}]", "model.d_model=132"],
     "rope rotates pairs of dimensions"),
    (["scheme=hybrid", "scheme.parts=[alibi]"], "scheme.parts[0]=alibi must be a map of a scheme and its options"),
    (["scheme=hybrid", "scheme.parts=[{name:hybrid}]"], "scheme.parts[0].name: 'hybrid' is not a scheme to compose"),
    (["scheme=hybrid", "scheme.parts=[]"], "scheme.parts is empty"),
    # eval variants: typed, range-checked and built like the scheme
    (["scheme=learned", "scheme.eval_variants=[{beyond_tabel:clamp}]"],
     "unknown config key 'scheme.eval_variants[0].beyond_tabel'; valid keys in scheme.eval_variants[0]: "
     "beyond_table"),
    (["scheme=learned", "scheme.eval_variants=[{beyond_table:wrap}]"],
     "scheme.eval_variants[0].beyond_table must be one of na, clamp, extend"),
    (["scheme=rope", "scheme.eval_variants=[{scaling:{type:linear,factor:0.5}}]"],
     "scheme.eval_variants[0].scaling.factor=0.5 is out of range: must be >= 1"),
    (["scheme=rope", "scheme.eval_variants=[{scaling:{type:linear,factor:8,beta_fast:3}}]"],
     "scheme.eval_variants[0].scaling.beta_fast=3 is not read by scheme.eval_variants[0].scaling.type=linear"),
    (["scheme=learned", "scheme.eval_variants=[clamp]"],
     "scheme.eval_variants=['clamp'] must be a list of option maps"),
    # keys the chosen preset does not read
    (["data.path=/nonexistent/corpus.txt"], "data.path=/nonexistent/corpus.txt is not read by data.source=embedded "
     "(data=shakespeare); use data=local data.path=..."),
    (["data.text_field=body"], "data.text_field=body is not read by data.source=embedded (data=shakespeare)"),
    (["data.files.train=a.txt"], "data.files.train=a.txt is not read by data.source=embedded"),
    (["data.hub_config=wikitext-2-raw-v1"], "data.hub_config=wikitext-2-raw-v1 is not read by data.source=embedded "
     "(data=shakespeare); use a hub preset (data=pg19"),
    (["data=wikitext2", "data.valid_fraction=0.1"], "data.valid_fraction=0.1 is not read by data.source=hub "
     "(data=wikitext2); use data=local data.valid_fraction=..."),
    (["data=wikitext2", "data.format=json"], "data.format=json is not read by data.source=hub (data=wikitext2)"),
    (["data=local", "data.path=a.txt", "data.hub_config=x"], "data.hub_config=x is not read by data.source=local"),
    (["data=local", "data.path=a.txt", "data.splits.train=dev"], "data.splits"),
    (["data=local", "data.path=a.txt", "data.files.train=b.txt"],
     "data.path=a.txt is not read by data.source=local with data.files.* (data=local); give either data.path"),
    (["data=local", "data.files.train=a.txt", "data.test_fraction=0.2"],
     "data.test_fraction=0.2 is not read by data.source=local with data.files.*"),
    (["data=local", "data.path=a.txt", "data.max_train_docs=3"], "data.max_train_docs=3 is not read by "
     "data.source=local (data=local); a single data.path becomes one document per split"),
    (["data.vocab_size=1000"], "data.vocab_size=1000 is not read by data.tokenizer=byte"),
    (["scheme=rope", "scheme.scaling.beta_fast=16"],
     "scheme.scaling.beta_fast=16 is not read by scheme.scaling.type=none; use scheme.scaling.type=yarn"),
    (["scheme=rope", "scheme.scaling.factor=8"], "scheme.scaling.factor=8 is not read by scheme.scaling.type=none"),
    (["scheme=rope", "scheme.scaling.type=linear", "scheme.scaling.factor=8", "scheme.scaling.original_length=64"],
     "scheme.scaling.original_length=64 is not read by scheme.scaling.type=linear"),
    # CUDA graphs need a CUDA GPU: asked on the CPU by name, and by auto on a machine without one (as here)
    (["train.device=cpu", "train.compile=graphs"], ("train.compile=graphs records CUDA graphs, and training runs "
                                                    "on cpu; use train.compile=on (or auto) there")),
    (["train=smoke", "train.compile=graphs"], "train.compile=graphs records CUDA graphs, and training runs on cpu"),
]


@pytest.mark.parametrize("args,message", CATALOGUE, ids=[" ".join(a) for a, _ in CATALOGUE])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(args, message, tmp_path):
    results = tmp_path / "results"
    r = runner.invoke(app, ["train", *args, f"results_dir={results}"])
    assert r.exit_code == 2, r.output
    assert message in r.output, r.output
    assert "Traceback" not in r.output
    assert r.output.strip().count("\n") == 0, r.output
    assert not results.exists()  # nothing was created


@pytest.mark.parametrize(("args", "message"), [
    (["train", "task=addition", "task.abacus_max_offset=5000"], "task.abacus_max_offset=5000 is out of range"),
    (["train", "task=copy", "task.symbols=10000000000"], "task.symbols=10000000000 is out of range"),
    (["train", "scheme=layered", "scheme.chunked=true"], "set scheme.window too"),
    (["train", "+foo=1"], "write foo=1"),
    (["train", "hydra.run.dir=/tmp/elsewhere"], "does not use Hydra's own settings"),
    (["sweep", "+train.lr=1", "--dry-run"], "write train.lr=1"),
    (["train", "-m", "scheme=rope,alibi"], "pe-bench sweeps with `pe-bench sweep"),
    *[pytest.param(["sweep", "scheme=nope", "seed=0", "train=smoke", "train.compile=graphs", *dry],
                   "train.compile=graphs records CUDA graphs, and training runs on cpu", marks=NO_GPU)
      for dry in ([], ["--dry-run"])],
])
def test_hydra_habits_and_values_training_would_die_on_are_one_line_before_anything_exists(args, message, tmp_path):
    r = runner.invoke(app, [*args, f"results_dir={tmp_path}"])
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output and not (tmp_path / "runs").exists()


def test_cfg_refuses_what_train_refuses():
    r = runner.invoke(app, ["train", "scheme=rope", "scheme.base=-1", "--cfg"])
    assert r.exit_code == 2 and "scheme.base=-1 is out of range" in r.output
    if not torch.cuda.is_available():  # auto resolves to this machine's CPU
        r = runner.invoke(app, ["train", "train.compile=graphs", "--cfg"])
        assert r.exit_code == 2 and "train.compile=graphs records CUDA graphs" in r.output

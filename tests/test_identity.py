"""A run's identity (pe_bench.runs.identity, hashed into its run name and directory) holds every setting that changes
the trained model and nothing else. Generated from the config schema: every field of every group is changed in turn,
so a field added later — or one dropped from the identity by mistake (train.pose_chunks: 2 and 4 chunks would share
one run directory) — is caught without a test of its own. The deliberate exclusions are listed here, each with why.
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib
from typing import Any

import pytest

from pe_bench import schemes
from pe_bench.config import Config, compose
from pe_bench.runs import BOOKKEEPING, digest, identity, run_name

Path = tuple[Any, ...]  # attribute names / dict keys / list indices from the Config down to one leaf

# How often to log, validate, checkpoint, and how many CPU threads: the same weights either way.
BOOKKEEPING_FIELDS = {"log_interval", "val_interval", "val_batches", "ckpt_interval", "threads"}
# Groups and top-level keys never in the identity: evaluation, how attention is computed (every backend gives the
# same numbers), and where files lie.
NEVER = {("eval",), ("attention",), ("logger",), ("results_dir",), ("cache_dir",)}


def leaves(obj: Any, path: Path = ()) -> list[Path]:
    """Every leaf below ``obj``: dataclass fields and dict keys recursively, lists and scalars as leaves — except a
    list of option maps (a composite scheme's parts), whose maps are walked too."""
    if dataclasses.is_dataclass(obj):
        return [p for f in dataclasses.fields(obj) for p in leaves(getattr(obj, f.name), (*path, f.name))]
    if isinstance(obj, dict) and obj:
        return [p for k, v in obj.items() for p in leaves(v, (*path, k))]
    if isinstance(obj, list) and obj and all(isinstance(v, dict) for v in obj):
        return [p for i, v in enumerate(obj) for p in leaves(v, (*path, i))]
    return [path]


def other(value: Any) -> Any:
    """A value different from ``value`` (identity does not validate: only difference matters)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str):
        return value + "_other"
    if value is None:
        return 3
    if isinstance(value, list):
        return [*value, value[-1]] if value else [3]
    if isinstance(value, dict):
        return {**value, "other": 3}
    raise TypeError(f"no other value for {value!r}")


def changed(cfg: Config, path: Path) -> Config:
    out = copy.deepcopy(cfg)
    *parents, leaf = path
    where: Any = out
    for p in parents:
        where = where[p] if isinstance(where, (dict, list)) else getattr(where, p)
    if isinstance(where, (dict, list)):
        where[leaf] = other(where[leaf])
    else:
        setattr(where, leaf, other(getattr(where, leaf)))
    return out


def under(path: Path, prefixes: set[Path]) -> bool:
    return any(path[: len(p)] == p for p in prefixes)


def check_identity(cfg: Config, excluded: set[Path], seed: bool = True) -> None:
    """Changing any leaf of ``cfg`` changes identity(cfg, seed) and the run name's hash unless the leaf is under one
    of ``excluded``; changing an excluded leaf changes neither."""
    base = identity(cfg, seed=seed)
    name = run_name(cfg)
    moved, stayed = [], []
    for path in leaves(cfg):
        other_cfg = changed(cfg, path)
        same = identity(other_cfg, seed=seed) == base
        if seed and not same:  # the run name's hash is the identity's: a changed identity is a new directory
            assert digest(identity(other_cfg)) != digest(base) and run_name(other_cfg) != name, path
        if under(path, excluded):
            if not same:
                moved.append(".".join(map(str, path)))
        elif same:
            stayed.append(".".join(map(str, path)))
    assert not stayed, f"settings missing from the run identity (two configurations would share a run): {stayed}"
    assert not moved, f"excluded settings that change the run identity: {moved}"


def fields_but(group: str, kept: str = "") -> set[Path]:
    """Every field of a Config group but ``kept`` (which stays in the identity); the task group: the keys of a config
    that names no task (the default task's)."""
    default = getattr(Config(), group)
    keys = default if isinstance(default, dict) else [f.name for f in dataclasses.fields(default)]
    return {(group, k) for k in keys if k != kept}


def out_of_identity(*, task: bool = False, corpus: bool = True, pose: bool = False, finetune: bool = False,
                    seed: bool = True) -> set[Path]:
    """The deliberate exclusions, for a run that is (not) a synthetic task, whose task does (not) read the corpus, with
    PoSE on (off), a fine-tune (or not), and for identity(cfg, seed=seed)."""
    out = set(NEVER)
    out |= {("train", k) for k in BOOKKEEPING_FIELDS}
    out.add(("scheme", "eval_variants"))  # evaluated on the same weights
    if not task:  # a language model's identity is what it was before tasks existed: committed run names stand
        out |= fields_but("task", "name")  # (task.name is in: another task is another run)
    if not corpus:  # a task that reads no corpus (all but passkey with text filler)
        out |= fields_but("data")
    if not pose:  # PoSE came later: runs without it (train.pose_target=0, itself in) keep their names
        out.add(("train", "pose_chunks"))
    if finetune:  # where the parent lies is not part of a fine-tune: its parent's run name is (seed-less: its hash)
        out |= {("finetune", "from_run"), ("finetune", "parent_config" if seed else "parent")}
    else:  # no fine-tune, no fine-tune settings (finetune.from_run is in: setting it makes a fine-tune)
        out |= fields_but("finetune", "from_run")
    if not seed:
        out.add(("seed",))
    return out


def test_bookkeeping_is_the_stated_list():
    assert set(BOOKKEEPING) == BOOKKEEPING_FIELDS
    assert BOOKKEEPING_FIELDS <= {f.name for f in dataclasses.fields(Config().train)}


@pytest.mark.parametrize("seed", [True, False])
def test_a_language_model_runs_identity_is_every_model_data_train_field(seed):
    """task=lm: model.*, data.*, train.* (but bookkeeping and pose_chunks without PoSE), scheme.*, seed (but in the
    seed-less identity that seed replicas share)."""
    cfg = compose(["scheme=rope"])
    assert cfg.task.name == "lm" and cfg.train.pose_target == 0 and cfg.finetune.from_run is None
    # a late scheme option changed from its default is in (its run is new); at the default, see the test below
    check_identity(cfg, out_of_identity(seed=seed), seed=seed)


def test_pose_chunks_are_part_of_a_pose_runs_identity():
    """With PoSE on, train.pose_target and train.pose_chunks (2 and 4 chunks train other models) are both in."""
    cfg = compose(["scheme=rope", "train.pose_target=256"])
    check_identity(cfg, out_of_identity(pose=True))
    four = compose(["scheme=rope", "train.pose_target=256", "train.pose_chunks=4"])
    assert run_name(four) != run_name(cfg)


@pytest.mark.parametrize("task, corpus", [(["task=copy"], False), (["task=passkey", "task.filler=text"], True),
                                          (["task=passkey", "task.filler=random"], False)])
def test_a_task_runs_identity_is_every_task_field_and_the_corpus_only_if_read(task, corpus):
    """A synthetic task: every task.* field is in; data.* only when the task reads the corpus (passkey with text
    filler)."""
    check_identity(compose(["scheme=alibi", *task]), out_of_identity(task=True, corpus=corpus))


@pytest.mark.parametrize("seed", [True, False])
def test_a_finetunes_identity_is_its_parent_and_its_settings_not_where_the_parent_lies(seed):
    """A fine-tune: every finetune.* field but from_run (the parent's directory) — its parent by run name, or, for
    the seed-less identity seed replicas share, by the hash of the parent's configuration without its seed."""
    cfg = compose(["scheme=rope"])
    cfg.finetune.from_run, cfg.finetune.parent, cfg.finetune.parent_config = "/x/parent", "rope-p-1234abcd", "feedbeef"
    cfg.finetune.original_seq_len = 64
    check_identity(cfg, out_of_identity(finetune=True, seed=seed), seed=seed)


@pytest.mark.parametrize("scheme", schemes.available())
def test_every_scheme_option_is_in_the_identity_but_its_eval_variants(scheme):
    """Each scheme's options as its preset gives them (composite schemes' parts included): all in, but
    scheme.eval_variants (evaluated on the same weights)."""
    cfg = compose([f"scheme={scheme}"])
    check_identity(cfg, out_of_identity())
    with_variants = copy.deepcopy(cfg)
    with_variants.scheme["eval_variants"] = [{"other": 1}]
    assert identity(with_variants) == identity(cfg)


@pytest.mark.parametrize("scheme, dotted", [(s, d) for s, e in schemes.catalog().items() for d in e.late_options])
def test_a_late_scheme_option_at_its_default_leaves_the_identity_of_runs_named_before_it(scheme, dotted):
    """Options added after runs of the scheme were named (the scheme's late_options) are out of the identity while
    they hold their preset's default — the config of an old run, which lacks the key, has the same identity — and in
    as soon as they differ."""
    cfg = compose([f"scheme={scheme}"])
    *parents, leaf = dotted.split(".")
    old = copy.deepcopy(cfg)
    where = old.scheme
    for p in parents:
        where = where[p]
    assert leaf in where
    del where[leaf]
    assert identity(old) == identity(cfg)
    assert identity(changed(cfg, ("scheme", *parents, leaf))) != identity(cfg)


@pytest.mark.parametrize("scheme, key", [(s, k) for s, e in schemes.catalog().items() for k in e.legacy_options])
def test_a_legacy_scheme_option_reads_old_runs_as_they_were_made_and_names_new_ones_apart(scheme, key, tmp_path):
    """An option added later whose default changes the model (the scheme's legacy_options): a saved config without
    it is read with the legacy value, keeps its name and is labelled by it; a run at the new default is another run,
    and one that asks for the legacy value now is the old run."""
    import yaml

    from pe_bench.config import from_yaml, model_shape, scheme_spec

    legacy = schemes.catalog()[scheme].legacy_options[key]
    new = compose([f"scheme={scheme}"])
    assert new.scheme[key] != legacy
    saved = dataclasses.asdict(new)
    del saved["scheme"][key]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    old = from_yaml(tmp_path / "config.yaml")
    assert old.scheme[key] == legacy
    assert run_name(old) != run_name(new)
    asked = compose([f"scheme={scheme}", f"scheme.{key}={legacy}"])
    assert run_name(asked) == run_name(old)
    spec = scheme_spec(old.scheme)
    assert f"{key}={legacy}" in spec.cls(spec.options, model_shape(old)).label()


def test_every_committed_run_directory_is_named_by_its_own_config():
    """Run names are stable across versions: each committed run directory's config.yaml still gives its name (the
    readable prefix and the identity hash), so a later pe-bench resumes and reports those runs as the same runs."""
    from pe_bench.runs import Run

    root = pathlib.Path(__file__).parent.parent / "results"
    dirs = sorted(p.parent for p in root.glob("*/runs/*/config.yaml"))
    assert len(dirs) >= 230 and len({d.parent.parent.name for d in dirs}) >= 8  # every committed report's runs
    wrong = [str(d.relative_to(root)) for d in dirs if run_name(Run(d).load_config()) != d.name]
    assert not wrong, wrong


def test_run_names_spell_out_the_configuration_and_end_in_the_identity_hash():
    lm = compose(["scheme=alibi", "model=tiny", "train.seq_len=48", "seed=2"])
    assert run_name(lm) == f"alibi-tiny-{lm.data.name}-L48-s2-{digest(identity(lm))}"
    task = compose(["scheme=rope", "task=copy", "model=tiny", "train.seq_len=32"])
    assert run_name(task) == f"copy-rope-tiny-L32-s0-{digest(identity(task))}"
    ft = compose(["scheme=rope", "train.seq_len=128", "train.steps=50"])
    ft.finetune.from_run, ft.finetune.parent, ft.finetune.original_seq_len = "/x/p", "rope-tiny-d-L64-s0-1234abcd", 64
    assert run_name(ft) == f"rope-tiny-d-L64-s0-ft50-L128-{digest(identity(ft))}"
    # finetune.trainable at its default ("all") stays out: fine-tunes made before it existed keep their names
    assert identity(ft)["finetune"] == {k: v for k, v in dataclasses.asdict(ft.finetune).items()
                                        if k not in ("from_run", "parent_config", "trainable")}
    ft.finetune.trainable = "scheme"
    assert identity(ft)["finetune"]["trainable"] == "scheme"
    ft.finetune.trainable = "all"
    ft.train.pose_target = 512
    assert run_name(ft) == f"rope-tiny-d-L64-s0-ft50-L128-pose512-{digest(identity(ft))}"
    ft.finetune.parent = None  # a parent known only by its directory: "run" stands for its name
    assert run_name(ft) == f"run-ft50-L128-pose512-{digest(identity(ft))}"


def test_the_identity_hash_is_the_sha256_of_the_sorted_json():
    import hashlib
    import json

    d = {"b": [1, 2.5], "a": {"y": None, "x": "s"}, "p": pathlib.Path("/q")}
    want = hashlib.sha256(json.dumps({"a": {"x": "s", "y": None}, "b": [1, 2.5], "p": "/q"}, sort_keys=True)
                          .encode()).hexdigest()
    assert digest(d) == want[:8] and digest(d, 12) == want[:12]
    assert digest(dict(reversed(list(d.items())))) == digest(d)  # key order never matters


def test_leaving_out_the_late_defaults_leaves_the_config_it_reads_untouched():
    from pe_bench.runs.naming import _without_late_defaults

    scheme = copy.deepcopy(compose(["scheme=rope"]).scheme)
    before = copy.deepcopy(scheme)
    out = _without_late_defaults(scheme)
    assert "window" in before["scaling"] and "window" not in out["scaling"]  # a nested late option at its default
    assert scheme == before

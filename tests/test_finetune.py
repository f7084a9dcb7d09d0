"""Fine-tuning from a finished run (pe-bench finetune): the spec of issue 12.

A fine-tune starts from exactly its parent's weights (bit-identical logits before its first update, for every
scheme), has its own identity (parent + fine-tuning settings), resumes bit-identically, and is refused in one line
when it cannot be what it claims. PoSE's position ids cover the target with the documented distribution.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import pe_bench.train as train_mod
from pe_bench import schemes
from pe_bench.build import build_model
from pe_bench.cli import app
from pe_bench.config import ConfigError, compose, with_options, scheme_spec
from pe_bench.data import load_tokens
from pe_bench.experiment import run_one
from pe_bench.finetune import compose_finetune, compose_run
from pe_bench.train import load_parent
from pe_bench.model.decoder import pose_positions
from pe_bench.runs import Run, read_csv, run_name
from pe_bench.train import batch_positions, load_trained, train

DEV = torch.device("cpu")
runner = CliRunner()
TINY = ["train=smoke", "train.steps=3", "eval=smoke", "eval.lengths=[32]", "eval.modes=[nonoverlapping]",
        "eval.variants=false", "model.n_layers=2", "model.d_model=32", "model.n_heads=2", "train.threads=1"]


@pytest.fixture(scope="module")
def parents(tmp_path_factory) -> dict[str, Run]:
    """A finished tiny run (L = 32) of every scheme, trained once for this module."""
    root = tmp_path_factory.mktemp("parents")
    out = {}
    for name in schemes.available():
        cfg = compose([f"scheme={name}", *TINY, f"results_dir={root}"])
        out[name] = run_one(cfg, progress=False)
    return out


@pytest.mark.parametrize("name", schemes.available())
def test_a_finetune_starts_from_exactly_its_parents_weights(parents, name):
    """Before its first update a fine-tune at 2L gives the parent's logits bit for bit, at every position up to 2L
    (the learned table's new rows are the eval-time `extend` policy's rows, so it is compared with that)."""
    parent = parents[name]
    pcfg = parent.load_config()
    child = compose_finetune(parent.path, ["train.seq_len=64", "train.batch_size=2", "train.steps=1"])
    corpus = load_tokens(child.data, child.cache_dir)
    torch.manual_seed(123)
    model = build_model(child, corpus.vocab_size)
    load_parent(model, child, DEV, corpus)
    spec = scheme_spec(pcfg.scheme)
    if name == "learned":
        spec = with_options(spec, {"beyond_table": "extend"})
    reference, _ = load_trained(parent, pcfg, DEV, spec, corpus)
    x = torch.from_numpy(corpus.splits["validation"][:128].astype("int64")).view(2, 64)
    with torch.no_grad():
        assert torch.equal(model.eval()(x), reference(x))


def test_the_fine_tune_trains_evaluates_and_records_its_parent(parents):
    parent = parents["rope"]
    cfg = compose_finetune(parent.path, ["train.seq_len=64", "train.batch_size=4", "train.steps=2",
                                         "scheme.scaling.type=yarn", "scheme.scaling.factor=8"])
    run = run_one(cfg, progress=False)
    assert run.path.parent == parent.path.parent  # beside its parent
    assert run.path.name.startswith(parent.path.name.rsplit("-", 1)[0] + "-ft2-L64-")
    meta = run.meta()
    assert meta.status == "done"
    assert meta.parent == {"run": parent.path.name, "path": str(parent.path), "steps_before": 3}
    rows = read_csv(run.eval_csv)
    # the parent's lengths (eval.lengths=[32] here) and the fine-tune's own L, rows relative to the original L
    assert {r["L_eval"] for r in rows} == {"32", "64"} and {r["L_train"] for r in rows} == {"32"}
    assert {r["scheme"] for r in rows} == {"rope+yarn×8"}  # no eval-time variants of the parent's


def test_identity_includes_the_parent_and_the_finetuning_settings(parents):
    parent = parents["rope"]
    base = ["train.seq_len=64", "train.batch_size=4"]
    names = {run_name(compose_finetune(parent.path, [*base, f"train.steps={n}"])) for n in (25, 100)}
    names.add(run_name(compose_finetune(parent.path, [*base, "train.steps=25", "scheme.scaling.type=linear",
                                                      "scheme.scaling.factor=8"])))
    names.add(run_name(compose_finetune(parents["alibi"].path, [*base, "train.steps=25"])))
    names.add(parent.path.name)
    assert len(names) == 5
    # the path is not part of it: the same fine-tune of a moved parent is the same run
    cfg = compose_finetune(parent.path, [*base, "train.steps=25"])
    assert cfg.finetune.parent == parent.path.name and cfg.finetune.original_seq_len == 32
    assert cfg.finetune.data_offset == 3  # the parent's steps: the batches continue its stream


def test_a_finetune_of_a_finetune_keeps_the_original_length(parents, tmp_path):
    parent = parents["alibi"]
    first = run_one(compose_finetune(parent.path, ["train.seq_len=64", "train.batch_size=2", "train.steps=1"]),
                    progress=False)
    second = compose_finetune(first.path, ["train.seq_len=128", "train.batch_size=1", "train.steps=1"])
    assert second.finetune.original_seq_len == 32 and second.finetune.data_offset == 4
    assert second.finetune.parent == first.path.name


def test_resume_of_a_finetune_is_bit_identical(parents, tmp_path, monkeypatch):
    parent = parents["t5"]
    cfg = compose_finetune(parent.path, ["train.seq_len=64", "train.batch_size=2", "train.steps=6",
                                         "train.ckpt_interval=0"])
    corpus = load_tokens(cfg.data, cfg.cache_dir)
    straight = Run(tmp_path / "straight")
    straight.create(cfg)
    train(cfg, straight, corpus, DEV, progress=False)
    interrupted = Run(tmp_path / "interrupted")
    interrupted.create(cfg)
    real, calls = train_mod.random_batch, {"n": 0}

    def dies_in_step_5(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "random_batch", dies_in_step_5)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, interrupted, corpus, DEV, progress=False)
    assert torch.load(interrupted.checkpoint, weights_only=False)["step"] == 4
    monkeypatch.setattr(train_mod, "random_batch", real)
    train(cfg, interrupted, corpus, DEV, progress=False)  # resumes from its own checkpoint, not the parent's
    a = torch.load(straight.checkpoint, weights_only=False)
    b = torch.load(interrupted.checkpoint, weights_only=False)
    assert a["step"] == b["step"] == 6
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert [r["loss"] for r in read_csv(straight.train_csv)] == [r["loss"] for r in read_csv(interrupted.train_csv)]


def test_learned_table_growth_policies_by_hand():
    """interpolate: row m of the new table is the old table at m·L/L' (position interpolation); extend: the old rows
    then the eval-time `extend` rows."""
    from pe_bench.schemes.base import ModelShape
    from pe_bench.schemes.learned import Learned, LearnedOptions

    new = Learned(LearnedOptions(), ModelShape(d_model=2, n_heads=1, head_dim=2, train_seq_len=4))
    old = torch.tensor([[0.0, 10.0], [2.0, 20.0]])
    state = {"scheme.table": old.clone()}
    new.inherit(state, "scheme.", "interpolate")  # s = 2: m/s = 0, 0.5, 1, 1.5 (clamped to the last row)
    assert torch.equal(state["scheme.table"], torch.tensor([[0.0, 10.0], [1.0, 15.0], [2.0, 20.0], [2.0, 20.0]]))
    state = {"scheme.table": old.clone()}
    new.inherit(state, "scheme.", "extend")
    assert torch.equal(state["scheme.table"][:2], old)
    assert torch.equal(state["scheme.table"][2:], new._untrained_rows(2, old))


def test_pose_position_ids_cover_the_target_with_the_documented_distribution():
    L, target, g = 64, 512, torch.Generator().manual_seed(0)
    skips, seen = [], torch.zeros(target, dtype=torch.bool)
    for _ in range(3000):
        p = pose_positions(L, target, 2, g)
        assert p.shape == (L,) and p.dtype == torch.long
        assert p[0] == 0 and int(p.max()) <= target - 1 and bool((p[1:] > p[:-1]).all())
        jumps = (p[1:] - p[:-1] - 1).nonzero()
        assert len(jumps) <= 1  # two chunks: consecutive ids with at most one skip
        skips.append(int(p[-1]) - (L - 1))  # u_1, the second chunk's shift
        seen[p] = True
    assert bool(seen.all())  # every position of the target window is reached
    u = torch.tensor(skips, dtype=torch.float64)
    assert int(u.min()) == 0 and int(u.max()) == target - L  # u_1 ~ U{0, …, target − L}
    assert abs(float(u.mean()) - (target - L) / 2) < 0.05 * (target - L)
    for _ in range(200):  # more chunks: the skips never decrease, each chunk is contiguous
        p = pose_positions(L, target, 4, g)
        shift = p - torch.arange(L)
        assert p[0] == 0 and int(p.max()) <= target - 1 and bool((shift[1:] >= shift[:-1]).all())
        assert len(torch.unique(shift)) <= 4


def test_pose_acts_in_training_only(parents):
    cfg = compose_finetune(parents["rope"].path, ["train.seq_len=32", "train.batch_size=4", "train.pose_target=256"])
    g = torch.Generator().manual_seed(1)
    assert int(batch_positions(cfg.train, g, DEV).max()) < 256
    assert batch_positions(cfg.train, g, DEV, training=False) is None  # validation and evaluation: 0..n-1
    assert cfg.train.seq_len == 32 and "pose256" in run_name(cfg)


@pytest.mark.parametrize("args, says", [
    (["scheme.scaling.type=yarn"], "unknown config key 'scheme.scaling'"),
    (["train.seq_len=16"], "is shorter than the parent's L=32"),
    (["train.seq_len=32", "train.pose_target=32"], "train.pose_target=32 must be 0 (off) or longer"),
    (["model.n_layers=4"], "a fine-tune keeps its parent's model"),
    (["scheme=rope"], "a fine-tune keeps its parent's model, data, task, scheme"),
    (["seed=3"], "a fine-tune keeps its parent's"),
    (["finetune.parent=x"], "finetune.parent is taken from the parent run"),
    (["scheme.learned_slopes=true"], "scheme.learned_slopes is fixed by the parent's weights for alibi"),
])
def test_bad_finetunes_are_one_line_and_exit_2(parents, args, says):
    r = runner.invoke(app, ["finetune", str(parents["alibi"].path), *args])
    assert r.exit_code == 2, r.output
    assert says in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_a_scheme_option_fixed_at_training_is_refused(parents):
    r = runner.invoke(app, ["finetune", str(parents["rope"].path), "scheme.base=500"])
    assert r.exit_code == 2 and "scheme.base is fixed by the parent's weights for rope" in r.output, r.output


def test_an_unfinished_or_missing_parent_is_refused(parents, tmp_path):
    r = runner.invoke(app, ["finetune", str(tmp_path / "nowhere")])
    assert r.exit_code == 2 and "is not a run directory" in r.output
    cfg = compose(["scheme=nope", *TINY, f"results_dir={tmp_path}", "train.steps=5"])
    run = Run.for_config(cfg)
    run.create(cfg)
    run.update_meta(status="running")  # a status is reached through running
    run.update_meta(status="interrupted")
    r = runner.invoke(app, ["finetune", str(run.path)])
    assert r.exit_code == 2 and "is not finished (status interrupted)" in r.output, r.output
    with pytest.raises(ConfigError, match="is not finished"):
        compose_run([f"finetune.from_run={run.path}"])  # `pe-bench train finetune.from_run=...` is the same path


def test_the_extension_sweep_reports_methods_by_budget(tmp_path):
    """Parents first, then methods × budgets; budget 0 is the parent evaluated with the method's options; the table
    and the plot come out with one row per method and budget."""
    ext = ["sweep=extension", "train=smoke", "model.n_layers=2", "model.d_model=32", "model.n_heads=2",
           "eval=smoke", f"results_dir={tmp_path}", "sweep.extension.steps=[0,2]",
           "sweep.extension.overrides=[train=finetune,eval=smoke,'eval.modes=[nonoverlapping]',eval.variants=false,"
           "train.seq_len=64,train.batch_size=2,train.threads=1]",
           "sweep.extension.methods={plain: [], yarn: [scheme.scaling.type=yarn,scheme.scaling.factor=8], "
           "pose: [train.seq_len=32,train.batch_size=4,train.pose_target=256,scheme.scaling.type=yarn,"
           "scheme.scaling.factor=8]}"]
    r = runner.invoke(app, ["sweep", *ext, "--no-progress"])
    assert r.exit_code == 0, r.output
    t = pd.read_csv(tmp_path / "extension" / "extension.csv", dtype=str)
    assert list(t["method"]) == ["rope @64 · train.batch_size=2", "rope @64 · train.batch_size=2",
                                 "rope+yarn×8 @64 · train.batch_size=2", "rope+yarn×8 @64 · train.batch_size=2",
                                 "rope+yarn×8 PoSE→256 @32 · train.batch_size=4",
                                 "rope+yarn×8 PoSE→256 @32 · train.batch_size=4"]
    assert list(t["steps"]) == ["0", "2"] * 3
    parent = next(p for p in (tmp_path / "runs").iterdir() if "-ft" not in p.name)
    rows = {(r["scheme"], r["L_eval"], r["mode"]): r["ppl"] for r in read_csv(parent / "eval.csv")}
    for method, scheme in (("rope @64", "rope"), ("rope+yarn×8 @64", "rope+yarn×8")):
        budget0 = t[(t["method"].str.startswith(method)) & (t["steps"] == "0")].iloc[0]
        assert float(budget0["32"]) == pytest.approx(float(rows[(scheme, "32", "nonoverlapping")]), abs=1e-3)
    assert (tmp_path / "extension" / "ppl_vs_finetune_steps.png").stat().st_size > 0
    comparison = (tmp_path / "extension" / "comparison.md").read_text()
    assert "rope+yarn×8 ft2@64" in comparison and "rope+yarn×8 PoSE→256 ft2@32" in comparison
    # run again: everything is finished, nothing is trained or evaluated twice
    again = runner.invoke(app, ["sweep", *ext, "--no-progress"])
    assert again.exit_code == 0 and "0 trained" in again.output, again.output


# ---------------------------------------------------------------------------------------------------------------
# The commands of docs/fine-tuning.md, the default evaluation of a fine-tune, a warmup longer than its budget
# ---------------------------------------------------------------------------------------------------------------
def finished_looking(root: Path, *overrides: str) -> Run:
    """A parent directory as a fine-tune's composition sees a finished run (config, status done, checkpoint and
    eval.csv present), without training it: for tests that only compose."""
    cfg = compose([*overrides, f"results_dir={root}"], scheme=False)
    run = Run.for_config(cfg)
    run.create(cfg)
    run.update_meta(status="running")  # a status is reached through running
    run.update_meta(status="done")
    run.eval_csv.write_text("")
    run.checkpoint.write_bytes(b"")
    return run


@pytest.fixture(scope="module")
def learned_parent(tmp_path_factory) -> Run:
    """One finished tiny run of the learned table (L = 32), for the growth policies."""
    cfg = compose(["scheme=learned", *TINY, f"results_dir={tmp_path_factory.mktemp('learned')}"])
    return run_one(cfg, progress=False)


def test_the_readmes_interpolating_finetune_runs(learned_parent):
    """`pe-bench finetune RUN finetune.new_positions=interpolate train.seq_len=…` (docs/fine-tuning.md) trains and
    records it."""
    r = runner.invoke(app, ["finetune", str(learned_parent.path), "finetune.new_positions=interpolate",
                            "train.seq_len=64", "train.steps=1", "train.batch_size=2", "train.warmup_steps=0",
                            "--no-progress"])
    assert r.exit_code == 0, r.output
    child = Run(next(p for p in learned_parent.path.parent.iterdir() if "-ft1-L64-" in p.name))
    assert child.is_done() and child.load_config().finetune.new_positions == "interpolate"
    assert child.load_config().finetune.parent == learned_parent.path.name


def test_a_finetune_is_evaluated_at_its_parents_lengths_and_its_own(tmp_path):
    """By default: the parent's eval lengths plus the fine-tune's own L (not the ratios × its own L: 4096 here)."""
    from pe_bench.config import run_lengths

    parent = finished_looking(tmp_path, "scheme=rope", "train=smoke")  # L = 32, eval=smoke: 32 … 256
    child = compose_finetune(parent.path)  # train=finetune: L' = 512
    assert run_lengths(child) == [32, 64, 128, 256, 512]
    assert run_lengths(compose_finetune(parent.path, ["eval.lengths=[32,1024]"])) == [32, 1024]  # as given
    # ratios given: × the original L and × the fine-tune's own, as the extension sweep's eval=extension asks
    assert run_lengths(compose_finetune(parent.path, ["eval.ratios=[1,2]"])) == [32, 64, 512, 1024]


def test_a_warmup_longer_than_the_finetune_is_warned_about(tmp_path):
    parent = finished_looking(tmp_path, "scheme=alibi", "train=smoke")
    r = runner.invoke(app, ["finetune", str(parent.path), "train.steps=5", "--cfg"])
    assert r.exit_code == 0, r.output
    assert "warning: train.warmup_steps=10 exceeds the fine-tune's train.steps=5" in r.output, r.output
    r = runner.invoke(app, ["finetune", str(parent.path), "train.steps=10", "--cfg"])
    assert r.exit_code == 0 and "warning:" not in r.output, r.output


@pytest.mark.parametrize("pose, part", [(0, ""), (512, "-pose512")])
def test_a_finetunes_run_name_is_its_parents_without_the_hash_then_ft_steps_L_and_pose(pose, part):
    """results/runs/<parent name without hash>-ft<steps>-L<L>[-pose<target>]-<hash>: beside its parent."""
    from pe_bench.runs import digest, identity

    cfg = compose(["scheme=rope", "train.steps=200", "train.seq_len=64", f"train.pose_target={pose}"])
    cfg.finetune.from_run, cfg.finetune.parent = "/x/rope-tiny-shakespeare-L64-s0-1234abcd", \
        "rope-tiny-shakespeare-L64-s0-1234abcd"
    cfg.finetune.parent_config, cfg.finetune.original_seq_len = "feedbeef", 64
    assert run_name(cfg) == f"rope-tiny-shakespeare-L64-s0-ft200-L64{part}-{digest(identity(cfg))}"


def test_pose_cuts_every_window_at_a_uniform_point_and_the_generator_alone_decides_where():
    """chunks = 2: one cut, at any of the length − 1 points between tokens, and the second chunk's skip drawn from the
    same generator (the same ids for the same seed)."""
    jumps = set()
    for seed in range(200):
        p = pose_positions(8, 1000, 2, torch.Generator().manual_seed(seed))
        assert torch.equal(p, pose_positions(8, 1000, 2, torch.Generator().manual_seed(seed)))
        steps = (p[1:] - p[:-1]).tolist()
        assert p[0] == 0 and sum(s != 1 for s in steps) == 1, (seed, p.tolist())  # one cut, one skip
        jumps.add(next(i + 1 for i, s in enumerate(steps) if s != 1))
    assert jumps == set(range(1, 8))

"""Daily use: configs you can inspect (--cfg, --version, presets in --help), hints for common slips, one-line errors
in every command, text that rich never eats, fast answers without torch, smoke runs that are smoke end to end."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from pe_bench import schemes
from pe_bench.cli import app
from pe_bench.config import GROUPS, preset_names

runner = CliRunner()


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pe_bench", *args], capture_output=True, text=True, cwd=cwd,
                          check=False)


def test_help_lists_every_config_group_with_its_presets_and_the_sweeps():
    for command in ([], ["train"], ["sweep"]):
        out = runner.invoke(app, [*command, "--help"]).output
        for group in GROUPS:
            assert f"{group}=" in out and ", ".join(preset_names(group)) in out, (command, group)
        assert "sweep=" in out and "paper" in out


def test_version_and_schemes():
    from pe_bench import __version__

    assert runner.invoke(app, ["--version"]).output.strip() == f"pe-bench {__version__}"
    lines = runner.invoke(app, ["schemes"]).output.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == schemes.available()


def test_the_scheme_catalog_read_from_source_equals_the_registry_built_by_importing():
    """`pe-bench schemes` and the scheme names come from the source files without importing torch; they must say
    exactly what the classes say."""
    catalog = schemes.catalog()
    assert sorted(catalog) == sorted(schemes.REGISTRY)
    for name, cls in schemes.REGISTRY.items():
        entry = catalog[name]
        assert (entry.description, entry.citation, entry.acts_on) == (cls.description, cls.citation,
                                                                      tuple(cls.acts_on)), name
        assert (entry.late_options, entry.style, entry.variant_styles) == (tuple(cls.late_options), cls.style,
                                                                           dict(cls.variant_styles)), name
        assert entry.legacy_options == dict(cls.legacy_options), name
        assert cls.__module__ == f"pe_bench.schemes.{entry.module}"


def test_cfg_prints_the_resolved_config_and_the_run_directory_and_runs_nothing(tmp_path):
    import yaml

    r = runner.invoke(app, ["train", "scheme=rope", "model.n_layers=2", f"results_dir={tmp_path}", "--cfg"])
    assert r.exit_code == 0, r.output
    cfg = yaml.safe_load(r.output)
    assert cfg["scheme"]["name"] == "rope" and cfg["model"]["n_layers"] == 2 and cfg["train"]["seq_len"] == 64
    assert f"# run directory: {tmp_path}/runs/rope-tiny-shakespeare-L64-s0-" in r.output
    assert not (tmp_path / "runs").exists()
    bad = runner.invoke(app, ["train", "model.n_layers=0", "--cfg"])
    assert bad.exit_code == 2 and "model.n_layers=0 is out of range" in bad.output


def test_help_schemes_version_and_config_errors_never_import_torch(tmp_path):
    """`--cfg` builds the scheme as training does (so it refuses what training refuses) and may import torch; help,
    the listing and the errors composing finds do not."""
    probe = ("import sys, runpy; sys.argv = ['pe-bench', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('pe_bench', run_name='__main__')\n"
             "except SystemExit as e:\n    code = e.code\n"
             "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', code, file=sys.stderr)")
    for args in (["--help"], ["schemes"], ["--version"], ["train", "--help"],
                 ["train", "model.n_layer=2"], ["train", "scheme", "rope"], ["train", "scheme=nosuch"],
                 ["train", "train.seq_len=64,128"], ["train", "model.n_layers=-1"]):
        p = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=tmp_path,
                           check=False)
        assert "NO-TORCH" in p.stderr.splitlines()[-1], (args, p.stderr)


@pytest.mark.parametrize("args,message", [
    (["train", "scheme", "rope"], "'scheme rope': overrides are KEY=VALUE; did you mean scheme=rope?"),
    (["train", "model.n_layers"], "'model.n_layers' is not KEY=VALUE"),
    (["train", "train.seq_len=64,128"], "'train.seq_len=64,128' is a sweep axis (several values) but `pe-bench "
                                        "train` runs one configuration: use `pe-bench sweep train.seq_len=64,128"),
    (["train", "scheme=rope", "scheme.scaling.typ=yarn"], "unknown config key 'scheme.scaling.typ'; valid keys in "
                                                          "scheme.scaling: type, factor"),
    (["train", "scheme.scaling.type=yarn"], "unknown config key 'scheme.scaling.type'; valid keys in scheme: "
                                            "learned_slopes"),
])
def test_common_slips_get_a_hint(args, message, tmp_path):
    r = runner.invoke(app, [*args, f"results_dir={tmp_path}"])
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output
    assert not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory):
    """One finished RoPE smoke run, trained by `train=smoke` alone: eval=smoke comes with it."""
    root = tmp_path_factory.mktemp("daily")
    r = runner.invoke(app, ["train", "scheme=rope", "train=smoke", "model.n_layers=1", "model.d_model=32",
                            f"results_dir={root}", "--no-progress"])
    assert r.exit_code == 0, r.output
    (run,) = (root / "runs").iterdir()
    return run


def test_train_smoke_brings_the_smoke_evaluation(rope_run):
    cfg = (rope_run / "config.yaml").read_text()
    assert "name: smoke" in cfg.split("eval:")[1].splitlines()[1]
    from pe_bench.config import compose

    assert compose(["train=smoke"]).eval.name == "smoke"
    assert compose(["train=smoke", "eval=default"]).eval.name == "default"  # an explicit choice wins


@pytest.mark.parametrize("args,message", [
    (["eval.lenghts=[64]"], "unknown config key 'eval.lenghts'; valid keys in eval: name, split, ratios, lengths"),
    (["scheme.scaling.typ=yarn"], "unknown config key 'scheme.scaling.typ'; valid keys in scheme.scaling: type"),
    (["eval.lengths=[64],[128]"], "is a sweep axis (several values) but `pe-bench eval` runs one configuration"),
    (["eval.lengths"], "'eval.lengths' is not KEY=VALUE"),
    (["model.n_layers=3"], "'model.n_layers' cannot be changed here"),
])
def test_eval_errors_are_one_line_and_exit_2_like_train(rope_run, args, message):
    r = runner.invoke(app, ["eval", str(rope_run), *args])
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split()) and "Traceback" not in r.output


def test_eval_cfg_prints_the_run_config_with_the_overrides(rope_run):
    import yaml

    r = runner.invoke(app, ["eval", str(rope_run), "eval.lengths=[32,1024]", "scheme.scaling.type=yarn",
                            "scheme.scaling.factor=4", "--cfg"])
    assert r.exit_code == 0, r.output
    cfg = yaml.safe_load(r.output)
    assert cfg["eval"]["lengths"] == [32, 1024] and cfg["scheme"]["scaling"]["type"] == "yarn"


def test_text_with_brackets_is_printed_whole(monkeypatch, capsys):
    """Rich markup must never eat user-visible text: only our own [bold red]error:[/] is markup."""
    from pe_bench import cli

    cli.say("pip install 'pe-bench[plots]' [red]not markup[/red]")
    cli.warn("plots skipped: pip install 'pe-bench[plots]'")
    cli.error("a [b]bracketed[/b] value")
    out = capsys.readouterr()
    assert "pip install 'pe-bench[plots]' [red]not markup[/red]" in out.out
    assert "pip install 'pe-bench[plots]'" in out.err and "a [b]bracketed[/b] value" in out.err


def test_every_run_records_what_its_numbers_depend_on(rope_run):
    import torch

    meta = json.loads((rope_run / "meta.json").read_text())
    isa = torch.backends.cpu.get_cpu_capability()
    assert meta["numerics"] == f"torch {torch.__version__}, cpu {isa}, {torch.get_num_threads()} threads"


def test_outputs_of_documented_commands_are_git_ignored_and_committed_reports_are_not():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["results/runs/x/meta.json", "results/smoke/comparison.csv", "results/report/comparison.md",
             "results/slurm/1/log.out", "results/mysweep/comparison.csv", "results/paper/runs/x/checkpoint.pt",
             "results/paper/comparison.md", "results/default/comparison.csv", "results/benchmarks/cpu.md"]
    # every report the README links to (`](results/NAME/`) is committed, so it is no dead link on a fresh clone
    linked = sorted(set(re.findall(r"\]\((results/[\w.-]+)/", (root / "README.md").read_text())))
    assert "results/code_regime_12m" in linked and "results/paper" in linked
    assert [d for d in linked if not (root / d).is_dir()] == []
    p = subprocess.run(["git", "check-ignore", "--no-index", *paths, *(f"{d}/README.md" for d in linked)],
                       capture_output=True, text=True, cwd=root, check=False)
    assert p.stdout.split() == paths[:6]


def test_the_readmes_perplexity_tables_are_the_committed_reports_rows():
    """Every perplexity table quoted in the README or a docs page ('| scheme | L | …') is a block of rows of a committed
    report (results/paper, results/default or one of the code regime's: results/code_regime_12m, code_regime_test or
    code_regime_schemes comparison.md),
    so a number in the docs is a number the report wrote."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent

    def blocks(text: str) -> list[str]:
        out, cur = [], []
        for line in text.splitlines() + [""]:
            if line.startswith("|"):
                cur.append(line)
            elif cur:
                out.append("\n".join(cur))
                cur = []
        return [b for b in out if b.startswith("| scheme | L |")]

    committed = "\n\n".join((root / "results" / d / "comparison.md").read_text()
                              for d in ("paper", "default", "code_regime_12m", "code_regime_test", "code_regime_schemes"))
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    quoted = [b for page in pages for b in blocks(page.read_text())]
    # the README's two (the code regime at 12.3M tokens on the test split, the main job); docs/results.md's six (the
    # code regime's test split at both budgets, the main job, every scheme of the code regime, the main job's sliding
    # and context-use tables, the default sweep)
    assert len(quoted) == 8
    for block in quoted:
        assert block in committed, block.splitlines()[2]

"""Comparison tables: mean over seeds, 'n/a' for not applicable, '—' for not evaluated, the longest/L ratio."""

import math
import re

import pandas as pd
import pytest

from pe_bench.report import comparison, write_tables


def rows():
    def row(scheme, n, ppl, seed=0, status="ok"):
        return {"run": f"{scheme}-{seed}", "scheme": scheme, "L_train": 64, "L_eval": n, "mode": "nonoverlapping",
                "split": "validation", "stride": n, "ppl": ppl, "seed": seed, "status": status, "tokens_scored": 100}

    return pd.DataFrame([
        row("alibi", 64, 10.0), row("alibi", 512, 9.0), row("alibi", 64, 12.0, seed=1), row("alibi", 512, 11.0, seed=1),
        row("learned", 64, 10.0), row("learned", 512, float("nan"), status="not_applicable"),
        row("rope", 64, 8.0),  # never evaluated at 512
    ])


def test_a_length_only_some_seeds_reached_is_said_and_longest_over_l_is_read_where_all_seeds_are():
    """One extra evaluation length on one seed (eval.lengths=[1024] on seed 0): its cell says how many seeds it
    holds, and longest/L and the context use are read at the longest length every seed reached."""
    d = rows()
    d = pd.concat([d, d[d["scheme"] == "alibi"].query("L_eval == 512 and seed == 0").assign(L_eval=1024, ppl=20.0)])
    t = comparison(d, "nonoverlapping")
    assert t.loc[("alibi", 64), "1024"] == "20.0 (1 of 2 seeds)"
    assert t.loc[("alibi", 64), "longest/L"] == f"{10 / 11:.3f} (at 512)"
    assert t.loc[("alibi", 64), "seeds"] == 2


def test_a_row_trained_at_the_tables_longest_length_has_no_longest_over_l():
    d = rows()
    d = pd.concat([d, d[d["scheme"] == "alibi"].assign(L_train=512, run=lambda x: x["run"] + "-long")])
    t = comparison(d, "nonoverlapping")
    assert t.loc[("alibi", 512), "longest/L"] == "n/a"  # no length past its L: no ratio, never a 1.0
    assert t.loc[("alibi", 64), "longest/L"] == round(10 / 11, 3)


def test_comparison_means_over_seeds_and_marks_missing_cells():
    t = comparison(rows(), "nonoverlapping")
    assert list(t.columns) == ["64", "512", "longest/L", "seeds", "interval"]
    # mean ± std [95% t interval over 2 seeds on the log scale: exp(mean ln ppl ± 12.706 · std(ln ppl) / √2)]
    def log_t(a: float, b: float) -> str:
        m, sd = (math.log(a) + math.log(b)) / 2, abs(math.log(a) - math.log(b)) / math.sqrt(2)
        return f"[{math.exp(m - 12.706204736 * sd / math.sqrt(2)):.3f}, {math.exp(m + 12.706204736 * sd / math.sqrt(2)):.3f}]"

    assert t.loc[("alibi", 64)].tolist() == [f"11.000 ± 1.414 {log_t(10, 12)}", f"10.000 ± 1.414 {log_t(9, 11)}",
                                             round(10 / 11, 3), 2, "t on log, 2 seeds"]
    assert log_t(10, 12) == "[3.440, 34.885]"  # never below 0, as a t interval on perplexity itself would be
    # one seed, no per-window losses: the mean alone, to 3 decimals, and no interval
    assert t.loc[("learned", 64)].tolist() == [10.0, "n/a", "n/a", 1, "—"]
    assert t.loc[("rope", 64)].tolist() == [8.0, "—", "n/a", 1, "—"]
    d = rows()
    d.loc[d["scheme"] == "rope", "ppl"] = 6.75349
    assert comparison(d, "nonoverlapping").loc[("rope", 64), "64"] == 6.753
    assert comparison(rows(), "sliding").empty
    assert comparison(rows(), "nonoverlapping", split="test").empty


def test_longest_over_l_names_a_broken_cell_at_l_or_at_the_longest_length_instead_of_a_ratio():
    """longest/L is the word ('diverged', 'nan') of a cell at L or at the longest length that holds no number, the
    cell at L first; 'n/a' where a row has no cell at its own L."""
    def row(scheme, n, ppl, status="ok", L=64):
        return {"run": f"{scheme}-0", "scheme": scheme, "L_train": L, "L_eval": n, "mode": "nonoverlapping",
                "split": "validation", "stride": n, "ppl": ppl, "seed": 0, "status": status, "tokens_scored": 100}

    nan = float("nan")
    t = comparison(pd.DataFrame([
        row("xl", 64, 10.0), row("xl", 512, nan, "diverged"),
        row("t5", 64, nan, "nonfinite"), row("t5", 512, 9.0),
        row("fire", 64, nan, "nonfinite"), row("fire", 512, nan, "diverged"),
        row("cope", 64, 10.0, L=48), row("cope", 512, 20.0, L=48)]), "nonoverlapping")
    assert t["longest/L"].to_dict() == {("xl", 64): "diverged", ("t5", 64): "nan", ("fire", 64): "nan",
                                        ("cope", 48): "n/a"}


def test_tables_are_written_deterministically(tmp_path):
    a = write_tables(rows(), tmp_path / "a", "t")
    b = write_tables(rows(), tmp_path / "b", "t")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert "| learned | 64 | 10.0 | n/a | n/a | 1 | — |" in (tmp_path / "a" / "comparison.md").read_text()


def test_report_command_writes_tables_and_plots_deterministically(smoke_args, tmp_path):
    from typer.testing import CliRunner

    from pe_bench.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["sweep", "scheme=nope,alibi", "seed=0,1", "eval.variants=false", *smoke_args,
                            "--no-progress"])
    assert r.exit_code == 0, r.output
    results = tmp_path / "results"
    outs = []
    for name in ("a", "b"):
        r = runner.invoke(app, ["report", str(results), "--out", str(tmp_path / name), "--mode", "nonoverlapping"])
        assert r.exit_code == 0, r.output
        outs.append(tmp_path / name)
    files = sorted(p.name for p in outs[0].iterdir())
    assert files == ["README.md", "comparison.csv", "comparison.md", "eval_long.csv", "index.html",
                     "loss_vs_position.png", "ppl_vs_length_nonoverlapping.png", "results.json"]
    assert all((outs[0] / f).read_bytes() == (outs[1] / f).read_bytes() for f in files)
    readme = (outs[0] / "README.md").read_text()
    assert f"```bash\npe-bench report {results} --mode nonoverlapping\n```" in readme  # --out: this directory
    assert "- 4 runs: 4 done\n" in readme and "| 4 | cpu" in readme
    body = (outs[0] / "comparison.md").read_text().split("\n", 1)[1].strip()  # its precondition line, then tables
    assert body.startswith("**Precondition**: ") and re.sub(r"^#(#+) ", r"##\1 ", body, flags=re.M) in readme
    assert "![ppl_vs_length_nonoverlapping.png](ppl_vs_length_nonoverlapping.png)" in readme
    check_pages(outs[0], f"pe-bench report {results} --mode nonoverlapping", runs=4)
    table = pd.read_csv(outs[0] / "comparison.csv")
    assert set(table["seeds"]) == {2} and table["32"].str.contains(" ± ").all()  # mean ± std over 2 seeds
    long = pd.read_csv(outs[0] / "eval_long.csv")
    assert len(long) == 2 * 2 * 4 and set(long["seed"]) == {0, 1}
    only = runner.invoke(app, ["report", str(results / "runs" / "alibi-*"), "--out", str(tmp_path / "c"),
                               "--scheme", "alibi", "--no-plots"])
    assert only.exit_code == 0 and set(pd.read_csv(tmp_path / "c" / "comparison.csv")["scheme"]) == {"alibi"}
    kept = runner.invoke(app, ["report", str(results), "--out", str(tmp_path / "d"), "--scheme", "alibi",
                               "--no-plots"])  # every page of a filtered report counts the runs it holds, not all read
    assert kept.exit_code == 0 and all((tmp_path / "d" / f).read_text().startswith("# pe-bench report: 2 runs\n")
                                       for f in ("comparison.md", "README.md"))
    bad = runner.invoke(app, ["report", str(tmp_path / "nowhere")])
    assert bad.exit_code == 2 and "no evaluated run directories" in bad.output


def check_pages(out, command: str, runs: int) -> None:
    """results.json holds every wide table as written, the runs and what made the report; every link and image of
    index.html is a file of the directory."""
    import csv
    import json
    import re

    doc = json.loads((out / "results.json").read_text())
    assert doc["command"] == command and len(doc["runs"]) == runs and doc["made_by"]["pe_bench"]
    from pe_bench.report.pages import cell_value

    for name, rows in doc["tables"].items():
        with (out / name).open(newline="") as f:
            assert rows == [{k: cell_value(v) for k, v in r.items()} for r in csv.DictReader(f)], name
    assert set(doc["files"]) | {"README.md", "results.json", "index.html"} == {p.name for p in out.iterdir()}
    page = (out / "index.html").read_text()
    assert "&#x27;mean&#x27;" not in page  # the page shows the cells as the CSVs write them
    targets = re.findall(r'(?:href|src)="([^"]+)"', page)
    assert targets and all((out / t).is_file() for t in targets), targets
    assert {p.name for p in out.iterdir()} - {"index.html"} <= set(targets)  # every file is linked or shown


def test_the_committed_default_runs_rebuild_the_committed_default_tables(tmp_path):
    """results/default/COMMAND.txt: `pe-bench report results/default/runs` rebuilds the committed tables — every
    number, interval, bold mark and label of 46 real runs, byte for byte (the title line aside: the committed one
    was written by the sweep)."""
    from pathlib import Path

    from typer.testing import CliRunner

    from pe_bench.cli import app

    committed = Path(__file__).resolve().parent.parent / "results" / "default"
    r = CliRunner().invoke(app, ["report", str(committed / "runs"), "--out", str(tmp_path), "--no-plots"])
    assert r.exit_code == 0, r.output
    for name in ("comparison.csv", "eval_long.csv"):
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name
    body = [(d / "comparison.md").read_text().split("\n", 1)[1] for d in (tmp_path, committed)]
    assert body[0] == body[1]


def test_the_report_is_the_same_bytes_from_two_processes(smoke_args, tmp_path):
    """The promise of docs/trust.md: the report of the same runs is the same bytes — across processes too (another hash
    seed, so no set or dict order can leak into a file)."""
    import os
    import subprocess
    import sys

    from typer.testing import CliRunner

    from pe_bench.cli import app

    r = CliRunner().invoke(app, ["sweep", "scheme=nope,alibi", "seed=0", "eval.variants=false", *smoke_args,
                                 "--no-progress"])
    assert r.exit_code == 0, r.output
    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"rep{hash_seed}"
        p = subprocess.run([sys.executable, "-c", "from pe_bench.cli import main; main()", "report",
                            str(tmp_path / "results"), "--out", str(out)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": hash_seed}, timeout=600)
        assert p.returncode == 0, p.stderr
        outs.append(out)
    files = sorted(f.name for f in outs[0].iterdir())
    assert "comparison.md" in files and "loss_vs_position.png" in files
    assert files == sorted(f.name for f in outs[1].iterdir())
    assert all((outs[0] / f).read_bytes() == (outs[1] / f).read_bytes() for f in files)


def test_sliding_strides_of_one_configuration_are_rows_of_their_own_labelled_S():
    """One configuration evaluated with sliding strides S=32 and S=8: two rows (· S=32, · S=8), each its own numbers
    and one seed, never a mean over the two strides."""

    def row(n, S, ppl):
        return {"run": "alibi-0", "scheme": "alibi", "L_train": 64, "L_eval": n, "mode": "sliding",
                "split": "validation", "stride": min(S, n), "S": str(S), "ppl": ppl, "seed": 0, "status": "ok",
                "tokens_scored": 100}

    df = pd.DataFrame([row(64, 32, 10.0), row(128, 32, 9.0), row(64, 8, 8.0), row(128, 8, 7.0)])
    t = comparison(df, "sliding")
    assert sorted(t.index.get_level_values(0)) == ["alibi · S=32", "alibi · S=8"]
    assert t.loc[("alibi · S=32", 64), ["64", "128", "seeds"]].tolist() == [10.0, 9.0, 1]
    assert t.loc[("alibi · S=8", 64), ["64", "128", "seeds"]].tolist() == [8.0, 7.0, 1]
    one = comparison(df[df["S"] == "32"], "sliding")  # one stride only: nothing to tell apart, no label
    assert list(one.index.get_level_values(0)) == ["alibi"]


def _compared_rows(shift: float, windows_of_b: bool = True, more: tuple[tuple[str, float | None], ...] = ()):
    """Schemes A and B of one table group at L=64, 400 windows each on the same text: B = A + shift nats/token;
    ``more``: further rows (name, shift against A, or None for A's very losses)."""
    import numpy as np

    from pe_bench.report import Collected, window_key

    rng = np.random.default_rng(0)
    difficulty = rng.gamma(4.0, 0.5, 400)
    tokens = np.full(400, 64.0)
    rows, win = [], {}
    for name, extra in (("A", 0.0), ("B", shift), *more):
        nll = rows_nll[0] if extra is None else (difficulty + extra + rng.normal(0, 0.02, 400)) * tokens
        rows_nll = [nll] if name == "A" else rows_nll
        r = {"run": f"{name}-0", "scheme": name, "label": name, "config": name, "group": "g", "L_train": 64,
             "L_eval": 64, "mode": "nonoverlapping", "split": "validation", "stride": 64, "S": "", "budget": "25600",
             "step": 10, "steps": 10, "precision": "fp32", "seed": 0, "status": "ok", "tokens_scored": 25600,
             "ppl": float(np.exp(nll.sum() / tokens.sum())), "data": "d", "model": "m"}
        rows.append(r)
        if name == "A" or windows_of_b:
            win[window_key(r["run"], r)] = (nll, tokens)
    return Collected(pd.DataFrame(rows), win)


def table_rows(md: str) -> dict[str, str]:
    return {line.split(" | ")[0].lstrip("| "): line for line in md.splitlines()
            if line.startswith(("| A", "| B", "| C"))}


def test_comparison_md_bolds_the_best_row_only_where_a_paired_test_separates_it_from_every_other(tmp_path):
    write_tables(_compared_rows(0.05), tmp_path / "gap", "t")
    rows = table_rows((tmp_path / "gap" / "comparison.md").read_text())
    assert "| **" in rows["A"] and "**" not in rows["B"]  # B is clearly worse: A alone is bold
    write_tables(_compared_rows(0.0), tmp_path / "null", "t")
    rows = table_rows((tmp_path / "null" / "comparison.md").read_text())
    assert "**" not in rows["A"] and "**" not in rows["B"]  # not separated: no claim, no bold
    write_tables(_compared_rows(0.05, more=(("C", 0.0),)), tmp_path / "near", "t")
    rows = table_rows((tmp_path / "near" / "comparison.md").read_text())
    assert not any("**" in row for row in rows.values())  # C is as good as A: the best is not separated from it
    write_tables(_compared_rows(0.05, more=(("A+twin", None),)), tmp_path / "twin", "t")
    rows = table_rows((tmp_path / "twin" / "comparison.md").read_text())
    assert "| **" in rows["A"] and "| **" in rows["A+twin"] and "**" not in rows["B"]  # the same losses share it
    alone = _compared_rows(0.05)
    alone = type(alone)(alone.df[alone.df["scheme"] == "A"].reset_index(drop=True), alone.windows)
    write_tables(alone, tmp_path / "alone", "t")
    rows = table_rows((tmp_path / "alone" / "comparison.md").read_text())
    assert set(rows) == {"A"} and "**" not in rows["A"]  # nothing to be separated from: no mark


def test_a_group_with_a_row_without_per_window_losses_gets_no_bold_marks(tmp_path):
    write_tables(_compared_rows(0.05, windows_of_b=False), tmp_path, "t")
    md = (tmp_path / "comparison.md").read_text()
    assert set(table_rows(md)) == {"A", "B"} and "| **" not in md  # nothing is claimed


def _paired_rows(rng, specs, suffix="", group="g", windows=True, seed=0):
    """Collected rows of one seed with per-window losses; spec = (scheme, split, L_eval, step, extra nats/token);
    each row's label is its scheme plus ``suffix`` (a configuration's changed settings)."""
    import numpy as np

    from pe_bench.report import Collected, window_key

    rows, win = [], {}
    difficulty = rng.gamma(4.0, 0.5, 200)
    tokens = np.full(200, 32.0)
    for scheme, split, n, step, extra in specs:
        nll = (difficulty + extra + rng.normal(0, 0.02, 200)) * tokens
        r = {"run": f"{scheme}-{group}-{seed}", "scheme": scheme, "label": scheme + suffix, "L_train": 32,
             "L_eval": n, "mode": "nonoverlapping", "split": split, "stride": n, "S": "", "budget": "6400",
             "step": step, "steps": 10, "seed": seed, "status": "ok", "tokens_scored": int(tokens.sum()),
             "precision": "", "ppl": float(np.exp(nll.sum() / tokens.sum())), "config": scheme + suffix, "group": group}
        rows.append(r)
        if windows:
            win[window_key(r["run"], r)] = (nll, tokens)
    return Collected(pd.DataFrame(rows), win)


def test_compare_by_default_pairs_only_the_validation_rows_of_the_two_schemes_of_finished_runs():
    """Defaults: the validation split, both modes, finished evaluations only. Rows of the test split (where B is the
    better one), of a third scheme and of a partial evaluation never enter the paired difference; the partial
    setting is named as left out and nothing else is; rows come out by mode and length, whatever the input order."""
    import numpy as np

    from pe_bench.report import compare

    col = _paired_rows(np.random.default_rng(0), [
        ("A", "validation", 128, 10, 0.0), ("B", "validation", 128, 10, 0.05),  # first: rows come out by length
        ("A", "validation", 32, 10, 0.0), ("B", "validation", 32, 10, 0.05),
        ("A", "test", 32, 10, 0.05), ("B", "test", 32, 10, 0.0),
        ("C", "validation", 32, 10, 0.5), ("C", "validation", 128, 10, 0.5),
        ("A", "validation", 64, 4, 0.0), ("B", "validation", 64, 4, 0.05)])
    t = compare(col, "A", "B")
    assert t[["mode", "L_eval", "verdict", "excludes 0"]].values.tolist() == [["nonoverlapping", 32, "A lower", "yes"],
                                                                              ["nonoverlapping", 128, "A lower", "yes"]]
    v = col.df[col.df["split"] == "validation"].set_index(["scheme", "L_eval"])["ppl"]
    assert (t["ppl A"].iloc[0], t["ppl B"].iloc[0]) == (round(v[("A", 32)], 3), round(v[("B", 32)], 3))
    assert t.attrs["left_out"] == ["A vs B (-) at nonoverlapping 64: a partial evaluation (step 4/10); compared only "
                                   "with --partial"]
    assert compare(col, "A", "B", partial=True)["L_eval"].tolist() == [32, 64, 128]
    assert compare(col, "A", "B", split="test")["verdict"].tolist() == ["B lower"]
    assert compare(col, "A", "B", split="test").attrs["left_out"] == []


def test_compare_names_each_configuration_by_its_settings_and_says_why_a_cell_was_not_compared():
    """A configuration's rows are named by its label less the leading scheme name ('-' for the scheme's defaults);
    a gap within noise is 'not distinguishable'; each cell left out is named once per reason, its lengths joined:
    only one scheme evaluated, no finite seed on both sides, no per-window losses."""
    import numpy as np

    from pe_bench.report import Collected, compare, window_key

    rng = np.random.default_rng(1)
    labelled = _paired_rows(rng, [("A", "validation", 32, 10, 0.0), ("B", "validation", 32, 10, 0.05),
                                  ("A", "validation", 64, 10, 0.0), ("B", "validation", 64, 10, 0.0),
                                  ("B", "validation", 128, 10, 0.0),
                                  ("A", "validation", 256, 10, 0.0), ("B", "validation", 256, 10, 0.0)],
                            suffix=" · X=16 · tag=A")
    labelled.df.loc[(labelled.df["scheme"] == "B") & (labelled.df["L_eval"] == 256), ["status", "ppl"]] = \
        ["nonfinite", float("nan")]
    plain = _paired_rows(rng, [("A", "validation", 32, 10, 0.0), ("B", "validation", 32, 10, 0.05)], group="h")
    unwindowed = _paired_rows(rng, [(s, "validation", n, 10, 0.0) for n in (512, 1024) for s in "AB"],
                              suffix=" · X=16 · tag=A", windows=False)
    col = Collected(pd.concat([labelled.df, plain.df, unwindowed.df], ignore_index=True),
                    {**labelled.windows, **plain.windows})
    t = compare(col, "A", "B")
    assert t[["config", "L", "L_eval", "verdict"]].values.tolist() == [
        ["X=16 · tag=A", 32, 32, "A lower"], ["X=16 · tag=A", 32, 64, "not distinguishable"],
        ["-", 32, 32, "A lower"]]
    from pe_bench import stats
    from pe_bench.report import BOOTSTRAP

    for row in t.to_dict("records"):  # one seed: a paired bootstrap over the 200 windows both scored
        part = labelled if row["config"] != "-" else plain
        rows = {r["scheme"]: r for r in part.df.to_dict("records") if r["L_eval"] == row["L_eval"]}
        w = {s: {0: part.windows[window_key(rows[s]["run"], rows[s])]} for s in "AB"}
        p = stats.paired_difference(w["A"], w["B"], n_boot=BOOTSTRAP)
        assert [row[k] for k in ("difference", "95% interval", "method", "excludes 0", "seeds left out")] == [
            round(p.diff, 3), f"[{p.interval.lo:.3f}, {p.interval.hi:.3f}]", "paired block bootstrap, 200 windows",
            "yes" if p.excludes_zero else "no", "-"]
    assert t["excludes 0"].tolist() == ["yes", "no", "yes"]
    assert t.attrs["left_out"] == [
        "A vs B (X=16 · tag=A) at nonoverlapping 128: only B was evaluated with these settings",
        "A vs B (X=16 · tag=A) at nonoverlapping 256: no seed has a finite perplexity on both sides",
        "A vs B (X=16 · tag=A) at nonoverlapping 512, nonoverlapping 1024: no per-window losses for every seed on "
        "both sides (windows.csv missing, or not scoring the same windows); re-evaluate the runs with "
        "`pe-bench eval RUN_DIR`"]



def test_compare_over_seeds_pairs_the_seeds_both_schemes_finished_and_names_those_left_out():
    """Seeds 0 and 1 finished on both sides: a Student-t interval over the 2 per-seed differences, as
    stats.paired_difference computes it; seed 2 (not finite for B) and seed 3 (A only) are named as left out."""
    import numpy as np

    from pe_bench import stats
    from pe_bench.report import BOOTSTRAP, Collected, compare, window_key

    rng = np.random.default_rng(2)
    parts = [_paired_rows(rng, [("A", "validation", 32, 10, 0.0), ("B", "validation", 32, 10, 0.05 * (1 + seed))],
                          seed=seed) for seed in (0, 1, 2)]
    parts.append(_paired_rows(rng, [("A", "validation", 32, 10, 0.0)], seed=3))
    col = Collected(pd.concat([p.df for p in parts], ignore_index=True),
                    {k: v for p in parts for k, v in p.windows.items()})
    col.df.loc[(col.df["scheme"] == "B") & (col.df["seed"] == 2), ["status", "ppl"]] = ["nonfinite", float("nan")]
    [row] = compare(col, "A", "B").to_dict("records")
    rows = {(r["scheme"], r["seed"]): r for r in col.df.to_dict("records")}
    w = {s: {k: col.windows[window_key(rows[(s, k)]["run"], rows[(s, k)])] for k in (0, 1)} for s in "AB"}
    p = stats.paired_difference(w["A"], w["B"], n_boot=BOOTSTRAP)
    assert p.interval.method == stats.T_METHOD
    assert [row[k] for k in ("difference", "95% interval", "method", "excludes 0", "seeds left out")] == [
        round(p.diff, 3), f"[{p.interval.lo:.3f}, {p.interval.hi:.3f}]", "t, 2 seeds",
        "yes" if p.excludes_zero else "no", "2, 3"]
    ppl = col.df[col.df["seed"].isin([0, 1])].groupby("scheme")["ppl"].mean()
    assert (row["ppl A"], row["ppl B"]) == (round(ppl["A"], 3), round(ppl["B"], 3))


def test_a_row_whose_cells_carry_different_intervals_names_each_kind():
    """Two seeds at L (a t interval), one at 2L (a bootstrap over its windows): the row's interval column names
    both kinds, sorted and joined by ' / '."""
    import numpy as np

    from pe_bench.report import Collected

    rng = np.random.default_rng(3)
    parts = [_paired_rows(rng, [("A", "validation", 32, 10, 0.0), ("A", "validation", 64, 10, 0.0)], seed=0),
             _paired_rows(rng, [("A", "validation", 32, 10, 0.0)], seed=1)]
    col = Collected(pd.concat([p.df for p in parts], ignore_index=True),
                    {k: v for p in parts for k, v in p.windows.items()})
    t = comparison(col, "nonoverlapping")
    assert t.loc[("A", 32), "interval"] == "block bootstrap, windows / t on log, 2 seeds"
    assert " ± " in t.loc[("A", 32), "32"] and " ± " not in t.loc[("A", 32), "64"]


def test_a_configuration_evaluated_with_several_budgets_or_precisions_gets_a_row_for_each():
    """row_names: the token budget, the precision and the sliding warm-up join the labels when some configuration was
    evaluated with more than one of them; a row that does not record its precision says so ('precision ?')."""
    from pe_bench.report import row_names

    def rows(budgets, precisions, config="alibi"):
        return pd.DataFrame([{"label": config, "config": config, "S": "", "budget": b, "precision": p}
                             for b, p in zip(budgets, precisions)])

    assert row_names(rows(["6400", "12800"], ["fp32", "fp32"])) == ["alibi · tokens=6400", "alibi · tokens=12800"]
    assert row_names(rows(["6400"] * 3, ["fp32", "bf16", ""])) == [
        "alibi · fp32", "alibi · bf16", "alibi · precision ?"]
    assert row_names(pd.concat([rows(["6400"] * 2, ["bf16"] * 2), rows(["6400"], ["fp32"], config="rope")])) == [
        "alibi", "alibi", "rope"]
    warm = rows(["6400"] * 3, ["fp32"] * 3).assign(warmup=["0", "512", "512"])  # sliding passes of two warm-ups
    assert row_names(warm) == ["alibi · warm-up=0", "alibi · warm-up=512", "alibi · warm-up=512"]
    assert row_names(warm.assign(warmup="512")) == ["alibi"] * 3


def test_a_one_seed_cell_carries_the_bootstrap_interval_of_its_windows_or_none_if_they_cannot_give_one():
    """One seed with per-window losses: 'ppl [lo, hi]', the percentile bootstrap of stats.ppl_interval with the
    report's BOOTSTRAP resamples; windows that cannot give an interval (none scored): the mean alone, no interval."""
    import numpy as np

    from pe_bench import stats
    from pe_bench.report import BOOTSTRAP, Collected, window_key

    col = _paired_rows(np.random.default_rng(4), [("A", "validation", 32, 10, 0.0)])
    [r] = col.df.to_dict("records")
    w = col.windows[window_key(r["run"], r)]
    iv = stats.ppl_interval([w], n_boot=BOOTSTRAP)
    t = comparison(col, "nonoverlapping")
    assert t.loc[("A", 32), "32"] == f"{r['ppl']:.3f} [{iv.lo:.3f}, {iv.hi:.3f}]"
    other = stats.ppl_interval([w], n_boot=2 * BOOTSTRAP)
    assert f"[{iv.lo:.3f}, {iv.hi:.3f}]" != f"[{other.lo:.3f}, {other.hi:.3f}]"  # the resample count shows
    assert t.loc[("A", 32), "interval"] == "block bootstrap, windows"
    empty = Collected(col.df, {window_key(r["run"], r): (np.array([]), np.array([]))})
    t = comparison(empty, "nonoverlapping")
    assert t.loc[("A", 32), ["32", "interval"]].tolist() == [f"{r['ppl']:.3f}", "—"]


def test_a_group_without_per_window_losses_costs_only_its_own_bold_marks():
    """Two table groups at one length: the first has a row without per-window losses (no claim is made there), the
    second has them all and still gets its best row in bold."""
    import numpy as np

    from pe_bench.report import Collected

    rng = np.random.default_rng(5)
    blind = _paired_rows(rng, [("A", "validation", 32, 10, 0.0), ("B", "validation", 32, 10, 0.05)],
                         suffix=" · X=1", group="g", windows=False)
    seen = _paired_rows(rng, [("A", "validation", 32, 10, 0.0), ("B", "validation", 32, 10, 0.05)],
                        suffix=" · X=2", group="h")
    col = Collected(pd.concat([blind.df, seen.df], ignore_index=True), seen.windows)
    assert comparison(col, "nonoverlapping").attrs["best"] == {("A · X=2", 32, 32)}


def test_windows_agree_with_a_row_within_its_written_rounding_and_not_beyond():
    """agrees(): |exp(Σnll/Σtokens) − ppl| ≤ 1e-4 + 1e-5·ppl (ppl written to 4 decimals), the bound included; an
    edit of a few ten-thousandths beyond it is caught, at a small perplexity and at a large one."""
    import math

    import numpy as np

    from pe_bench.report import agrees, recomputed_ppl

    for ppl in (6.0, 100.0):
        w = (np.array([math.log(ppl) * 10]), np.array([10.0]))
        r, tol = recomputed_ppl(w), 1e-4 + 1e-5 * ppl
        assert agrees(w, r + 0.9 * tol) and agrees(w, r - 0.9 * tol)
        assert not agrees(w, r + 1.2 * tol) and not agrees(w, r - 1.2 * tol)
    # a row exactly at the bound (found by search: the float difference equals the float tolerance)
    w, ppl = (np.array([0.5867639935653111]), np.array([1.0])), 1.798042152122433
    assert abs(recomputed_ppl(w) - ppl) == 1e-4 + 1e-5 * ppl and agrees(w, ppl)


def test_the_console_tables_fit_120_columns_with_visible_marks_and_wide_shows_the_intervals(tmp_path):
    """Off a terminal (a log, a pipe): mean ± std cells within 120 columns, the best cells marked `*` (bold would be
    lost), the intervals left to the files; `--wide` prints them too."""
    from pathlib import Path

    from typer.testing import CliRunner

    from pe_bench.cli import app

    committed = Path(__file__).resolve().parent.parent / "results" / "default"
    r = CliRunner().invoke(app, ["report", str(committed / "runs"), "--out", str(tmp_path / "a"), "--no-plots"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 120
    cope = next(line for line in lines if line.startswith("cope "))
    assert cope.split() == ["cope", "64", "6.144±0.028", "6.031±0.027", "5.997±0.023", "6.008±0.020", "0.978", "3"]
    # a row name too long for 120 columns folds onto the next line, whole (nothing cut off with an ellipsis)
    long = "rope[frequencies_kept=0.75]+yarn×8[attention_factor=1.0]"
    def unfolded(i: int) -> str:  # a row name and the pieces folded under it (lines that hold only a piece)
        pieces = [lines[i].split()[0]]
        while len(lines[i + len(pieces)].split()) == 1:
            pieces.append(lines[i + len(pieces)].split()[0])
        return "".join(pieces)

    names = [unfolded(i) for i, line in enumerate(lines) if line.startswith(long[:20])]
    assert names.count(long) == 2 and "…" not in r.output  # in both tables, folded, every character kept
    # three seeds separate no row from every other at any length: no cell is marked, and no legend for a mark
    assert "the best, separated" not in r.output and "[6.074, 6.214]" not in r.output
    wide = CliRunner().invoke(app, ["report", str(committed / "runs" / "cope-*"), "--out", str(tmp_path / "b"),
                                    "--no-plots", "--wide"])  # CoPE's three seeds alone: a table of its own
    assert wide.exit_code == 0 and "6.144 ± 0.028 [6.074, 6.214]" in wide.output and "t on log, 3 seeds" in wide.output
    assert "[6.074, 6.214]*" not in wide.output  # a row alone is separated from nothing: unmarked


def test_runs_made_before_a_legacy_option_are_labelled_by_it_in_every_table():
    """The committed stick-breaking runs were trained without the row remainder (the option came later, its default
    changes the model): their saved configs lack it, so they are read as `remainder: false` — their names unchanged
    — and every row of theirs, perplexity and per-window losses alike, says `stickbreaking[remainder=False]`."""
    from pathlib import Path

    from pe_bench.report.collect import collect_all
    from pe_bench.runs import Run, run_name

    committed = Path(__file__).resolve().parent.parent / "results" / "default" / "runs"
    runs = [Run(committed / f"stickbreaking-tiny-shakespeare-L64-{s}") for s in ("s0-bcfa8f5d", "s1-73460f3f")]
    assert all(run_name(r.load_config()) == r.path.name for r in runs)
    assert all(r.legacy_options() == {"remainder": False} for r in runs)
    got = collect_all(runs)
    assert not got.left_out
    assert set(got.df["label"]) == {"stickbreaking[remainder=False]"}
    assert got.windows and {key[1] for key in got.windows} == {"stickbreaking[remainder=False]"}


def test_the_position_gain_table_comes_from_the_runs_context_rows_and_is_no_perplexity_column(tmp_path):
    """One seed: the run's own block-bootstrap interval; two seeds: the mean gain and a t interval over the seeds;
    a configuration without context rows (an older evaluation) or trained at the longest length: '—'. The position
    gain compares other tokens with less context, so it is never a column of the perplexity tables."""
    from pe_bench import stats
    from pe_bench.report import Collected
    from pe_bench.report.perplexity import context_table

    def row(scheme, seed, n, L=64):
        return {"run": f"{scheme}-{seed}", "scheme": scheme, "label": scheme, "config": scheme, "L_train": L,
                "L_eval": n, "mode": "nonoverlapping", "split": "validation", "stride": n, "ppl": 7.0, "seed": seed,
                "status": "ok", "tokens_scored": 4096, "budget": "all", "step": 10, "steps": 10, "precision": "fp32"}

    def ctx(scheme, seed, a, b, gain):
        return {"run": f"{scheme}-{seed}", "scheme": scheme, "split": "validation", "L_train": 64, "L_eval": 512,
                "pos_start": a,
                "pos_end": b, "loss": 2.0 + gain, "ref_loss": 2.0, "gain": gain, "lo": gain - 0.01,
                "hi": gain + 0.01, "blocks": 8, "tokens": 100, "seed": seed, "budget": "all", "step": 10,
                "precision": "fp32", "tokens_scored": 4096}

    df = pd.DataFrame([row(s, seed, n) for s, seeds in (("alibi", (0, 1)), ("rope", (0,)), ("old", (0,)))
                       for seed in seeds for n in (64, 512)] + [row("long", 0, 512, L=512)])
    context = pd.DataFrame([ctx("alibi", 0, 64, 512, 0.004), ctx("alibi", 1, 64, 512, 0.010),
                            ctx("alibi", 0, 64, 128, -0.002), ctx("alibi", 1, 64, 128, 0.002),
                            ctx("rope", 0, 64, 512, 0.5), ctx("rope", 0, 64, 128, 0.1)])
    col = Collected(df, {}, [], {}, context)
    g = context_table(col)
    iv = stats.seed_interval([0.004, 0.010])
    assert g.loc[("alibi", 64), "[64, 512)"] == f"+0.007 [{iv.lo:+.3f}, {iv.hi:+.3f}]"
    assert g.loc[("rope", 64), "[64, 512)"] == "+0.500 [+0.490, +0.510]"
    assert g.loc[("old", 64), "[64, 512)"] == "—"
    assert ("long", 512) not in g.index  # trained at the longest length: no position past its L
    assert "gain past L" not in comparison(col, "nonoverlapping").columns
    write_tables(col, tmp_path, "t")
    md = (tmp_path / "comparison.md").read_text()
    assert "## Position gain past L on the validation split" in md and "not a calibrated measure" in md
    assert "| rope | 64 | 2.000 | +0.100 [+0.090, +0.110] | +0.500 [+0.490, +0.510] | 1 |" in md


def _ratio_rows(seeds, tokens_at_L: int, shift: float, lengths=(64, 512), aligned: bool = True):
    """One scheme's non-overlapping rows at L = 64 and 512 on ``tokens_at_L`` tokens, with per-window losses: the
    loss at 512 is the loss at 64 + ``shift`` nats (plus noise), per seed; ``aligned``: 512 windows that hold
    eight 64 windows each (otherwise the 512 pass scored one window fewer)."""
    import numpy as np

    from pe_bench.report import Collected, window_key

    rows, win, truth = [], {}, {}
    for s in seeds:
        rng = np.random.default_rng(s)
        short = rng.gamma(4.0, 0.5, tokens_at_L // 64) * 64.0
        long = short.reshape(-1, 8).sum(axis=1) + shift * 512 + rng.normal(0, 20.0, tokens_at_L // 512)
        if not aligned:
            long = long[:-1]
        truth[s] = (long.sum() - short[:len(long) * 8].sum()) / (512 * len(long))
        for n, nll in ((64, short), (512, long)):
            tokens = np.full(len(nll), float(n))
            r = {"run": f"x-{s}", "scheme": "x", "label": "x", "config": "x", "group": "g", "L_train": 64,
                 "L_eval": n, "mode": "nonoverlapping", "split": "validation", "stride": n, "S": "",
                 "budget": str(tokens_at_L), "step": 10, "steps": 10, "precision": "fp32", "seed": s, "status": "ok",
                 "tokens_scored": int(tokens.sum()), "ppl": float(np.exp(nll.sum() / tokens.sum())), "data": "d",
                 "model": "m", "warmup": "0"}
            rows.append(r)
            win[window_key(r["run"], r)] = (nll, tokens)
    return Collected(pd.DataFrame(rows), win), truth


def test_longest_over_L_carries_its_paired_ratio_interval_when_both_lengths_scored_the_same_tokens():
    """Non-overlapping: the L windows summed eight at a time are the 8L windows' tokens, so the two lengths pair.
    Three seeds: exp of the mean per-seed log-ratio with a t interval; one seed on ten blocks of 16K tokens: a
    block bootstrap around the sample's ratio; one seed on fewer: the ratio alone; windows that do not line
    up: the ratio of the mean perplexities, unpaired."""
    import math

    from pe_bench import stats

    col, truth = _ratio_rows((0, 1, 2), 4096, 0.05)
    t = comparison(col, "nonoverlapping")
    iv = stats.seed_interval(list(truth.values()))
    ratio = math.exp(sum(truth.values()) / 3)
    assert t.loc[("x", 64), "longest/L"] == f"{ratio:.3f} [{math.exp(iv.lo):.3f}, {math.exp(iv.hi):.3f}]"
    assert t.attrs["numbers"][("x", 64)][0] == pytest.approx(ratio)
    col, truth = _ratio_rows((0,), 163840, 0.05)
    cell = comparison(col, "nonoverlapping").loc[("x", 64), "longest/L"]
    lo, hi = (float(x) for x in cell.split("[")[1].rstrip("]").split(", "))
    assert cell.startswith(f"{math.exp(truth[0]):.3f} [") and lo < math.exp(truth[0]) < hi and 0.002 < hi - lo < 0.03
    col, truth = _ratio_rows((0,), 16384, 0.05)
    assert comparison(col, "nonoverlapping").loc[("x", 64), "longest/L"] == f"{math.exp(truth[0]):.3f}"
    col, _ = _ratio_rows((0,), 16384, 0.05, aligned=False)
    d = col.df
    plain = float(d[d["L_eval"] == 512]["ppl"].iloc[0] / d[d["L_eval"] == 64]["ppl"].iloc[0])
    assert comparison(col, "nonoverlapping").loc[("x", 64), "longest/L"] == round(plain, 3)


def test_results_json_holds_numbers_as_numbers_and_labels_as_strings():
    from pe_bench.report.pages import cell_value

    assert cell_value("6.736 ± 0.022 [6.682, 6.791]") == {"mean": 6.736, "std": 0.022, "low": 6.682, "high": 6.791}
    assert cell_value("100.0 [99.0, 100.0]") == {"mean": 100.0, "low": 99.0, "high": 100.0}
    assert cell_value("+0.011 [-0.009, +0.012]") == {"mean": 0.011, "low": -0.009, "high": 0.012}
    assert cell_value("32") == 32 and isinstance(cell_value("32"), int) and cell_value("0.983") == 0.983
    assert cell_value("") is None
    for label in ("t on log, 3 seeds", "n/a", "diverged", "nan", "alibi · model.n_layers=2", "not learnt at L"):
        assert cell_value(label) == label


def test_compare_shows_the_token_budget_when_one_length_was_evaluated_with_two_and_says_seeds_do_not_overlap():
    import numpy as np
    import pytest

    from pe_bench.config import ConfigError
    from pe_bench.report import Collected, compare

    rng = np.random.default_rng(4)
    one = _paired_rows(rng, [("A", "validation", 32, 10, 0.0), ("B", "validation", 32, 10, 0.1)])
    two = _paired_rows(rng, [("A", "validation", 32, 10, 0.0), ("B", "validation", 32, 10, 0.1)], group="g", seed=0)
    two.df["budget"], two.df["tokens_scored"] = "all", 12800
    two.df["run"] = two.df["run"] + "-all"
    from pe_bench.report import window_key

    windows = {**one.windows, **{window_key(r["run"], r): (v[0].repeat(2), v[1].repeat(2)) for r, v in
                                 zip(two.df.to_dict("records"), two.windows.values())}}
    col = Collected(pd.concat([one.df, two.df], ignore_index=True), windows)
    t = compare(col, "A", "B")
    assert len(t) == 2 and sorted(t["budget"]) == ["6400 (6,400 tokens)", "all (12,800 tokens)"]
    alone = compare(Collected(one.df, one.windows), "A", "B")
    assert "budget" not in alone.columns  # one budget per length: not said
    apart = [_paired_rows(rng, [("A", "validation", 32, 10, 0.0)], seed=s).df for s in (0, 1)]
    b = [_paired_rows(rng, [("B", "validation", 32, 10, 0.1)], seed=s).df for s in (2, 3)]
    with pytest.raises(ConfigError, match=r"the seeds do not overlap \(A: 0, 1; B: 2, 3\)"):
        compare(Collected(pd.concat([*apart, *b], ignore_index=True), {}), "A", "B")


def test_an_extension_cell_is_the_mean_and_the_sample_std_over_seeds_and_never_averages_a_missing_number():
    from pe_bench.report.extension import _cell

    two = pd.DataFrame({"ppl": [10.0, 12.0], "status": ["ok", "ok"]})
    assert _cell(two) == "11.000 ± 1.414"  # the sample std (n − 1), as the comparison table's; population: 1.000
    assert _cell(two.iloc[:1]) == 10.0 and _cell(two.iloc[:0]) == "—"
    assert _cell(pd.DataFrame({"ppl": [10.12345], "status": ["ok"]})) == 10.123  # one seed: the number, 3 decimals
    assert _cell(two.assign(status=["ok", "diverged"])) == "diverged"


def _extension_rows() -> pd.DataFrame:
    """A parent configuration P (two seeds, plain and evaluated with YaRN's options), its YaRN fine-tunes at 10 and 2
    steps (in that order), one with a diverged seed at 64; a fine-tune of a parent A not in the rows; a parent T and
    its fine-tune with one row each, under a scheme label with an '@' of its own. Every row also as a sliding-window
    and a test-split copy with other numbers."""
    rows = []

    def add(run, scheme, bare, parent, method, steps, seed, ppl, lengths=(32, 64), status="ok", config=""):
        for n, v in zip(lengths, ppl):
            for mode, split, shift in (("nonoverlapping", "validation", 0), ("sliding", "validation", 100),
                                       ("nonoverlapping", "test", 200)):
                rows.append({"run": run, "scheme": scheme, "bare": bare, "ft_parent": parent, "ft_method": method,
                             "ft_steps": steps, "config": config or run, "seed": seed, "L_train": 32, "L_eval": n,
                             "mode": mode, "split": split, "ppl": v + shift, "budget": "all", "precision": "fp32",
                             "status": status if n == 64 else "ok"})

    for seed, base in ((0, 10.0), (1, 12.0)):
        run = f"rope-tiny-L32-s{seed}-0000000{seed}"
        add(run, "rope", "P", "", "rope @32", 0, seed, (base, base * 4))
        add(run, "rope+yarn×8", "P", "", "rope+yarn×8 @32", 0, seed, (base, base * 2))
    for steps, config in ((10, "F10"), (2, "F2")):
        for seed in (0, 1):
            add(f"ft{steps}-s{seed}", "rope+yarn×8", "P1", "P", "rope+yarn×8 @64 · train.batch_size=2", steps, seed,
                (9.0 + seed, 5.0 + steps / 10 + seed), status="diverged" if (steps, seed) == (2, 1) else "ok",
                config=config)
    add("orphan-s0", "rope", "A1", "A", "rope @128", 5, 0, (8.0, 6.0, 4.0), lengths=(32, 64, 128), config="O")
    add("t5-tiny-L32-s0-00000009", "t5", "T", "", "t5 @32", 0, 0, (7.0,), lengths=(32,))
    add("t5ft-s0", "t5", "T1", "T", "t5@v2 @64", 3, 0, (6.0,), lengths=(32,), config="T3")
    return pd.DataFrame(rows)


def test_the_extension_table_is_a_row_per_parent_method_and_budget_starting_from_the_parent_itself(tmp_path):
    """Budget 0 is the parent evaluated with the method's options; budgets follow in step order; the parent is named
    by its runs without seed and hash, or said to be missing; '—' where a row was not evaluated; only the asked mode
    and split (non-overlapping, validation by default)."""
    from pe_bench.report.collect import Collected
    from pe_bench.report.extension import extension_table, write_extension

    t = extension_table(Collected(_extension_rows()))
    assert list(t.columns) == ["parent", "method", "L_ft", "steps", "L", "tokens", "32", "64", "128", "seeds"]
    yarn = "rope+yarn×8 @64 · train.batch_size=2"
    assert t.values.tolist() == [
        ["rope-tiny-L32", yarn, 64, 0, 32, "all", "11.000 ± 1.414", "22.000 ± 2.828", "—", 2],
        ["rope-tiny-L32", yarn, 64, 2, 32, "all", "9.500 ± 0.707", "diverged", "—", 2],
        ["rope-tiny-L32", yarn, 64, 10, 32, "all", "9.500 ± 0.707", "6.500 ± 0.707", "—", 2],
        ["(parent configuration A not in this report)", "rope @128", 128, 5, 32, "all", 8.0, 6.0, 4.0, 1],
        ["t5-tiny-L32", "t5@v2 @64", 64, 0, 32, "all", 7.0, "—", "—", 1],
        ["t5-tiny-L32", "t5@v2 @64", 64, 3, 32, "all", 6.0, "—", "—", 1]]
    test = extension_table(Collected(_extension_rows()), split="test")
    assert test["32"].tolist()[:1] == ["211.000 ± 1.414"] and len(test) == 6
    assert extension_table(Collected(_extension_rows()), "sliding")["64"].tolist()[3] == 106.0
    only_parents = _extension_rows().query("ft_parent == ''")
    assert extension_table(Collected(only_parents)).empty and extension_table(Collected(pd.DataFrame())).empty
    orphan = extension_table(Collected(_extension_rows().query("bare == 'A1'")))
    assert orphan["parent"].tolist() == ["(parent configuration A not in this report)"]
    assert write_extension(extension_table(Collected(only_parents)), tmp_path / "none") == []
    assert not (tmp_path / "none").exists()
    write_extension(t, tmp_path / "ext", "Extension")
    paths = write_extension(t, tmp_path / "ext", "Extension", split="test")  # again, into the same folder
    assert [p.name for p in paths] == ["extension.csv", "extension.md"]
    md = (tmp_path / "ext" / "extension.md").read_text()
    assert md.startswith("# Extension\n\n## Perplexity after fine-tuning, by method and budget (non-overlapping "
                         "blocks, test split;")
    assert "blocks, test split; columns: eval length in tokens; steps 0 = the parent evaluated with the method's " \
           "eval-time options)\n\n| parent |" in md and md.endswith(" | 1 |\n") and not md.endswith("\n\n")
    assert f"\n| rope-tiny-L32 | {yarn} | 64 | 2 | 32 | all | 9.500 ± 0.707 | diverged | — | 2 |\n" in md
    assert pd.read_csv(paths[0]).shape == (6, 10)
    untitled = write_extension(t, tmp_path / "nested" / "untitled")[1].read_text()
    assert untitled.startswith("## Perplexity after fine-tuning") and "validation split" in untitled


def test_an_extension_curve_is_the_numbers_of_one_method_at_one_length_in_step_order_without_the_labels():
    from pe_bench.report.extension import curve

    t = pd.DataFrame({"method": ["pi", "pi", "pi", "yarn", "pi"], "parent": ["rope", "rope", "rope", "rope", "alibi"],
                      "steps": [0, 100, 200, 100, 100],
                      "256": [20.5, "12.000 ± 1.000", "diverged", 9.0, 7.0]})
    xs, ys = curve(t, "pi", 256, "rope")
    assert xs.tolist() == [0, 100] and ys.tolist() == [20.5, 12.0]  # a '± std' cell is its mean; a label is no point
    xs, ys = curve(t, "pi", 256)
    assert xs.tolist() == [0, 100, 100] and ys.tolist() == [20.5, 12.0, 7.0]  # every parent


def test_a_run_evaluated_on_two_splits_has_each_splits_context_use_from_that_splits_position_curve(tmp_path):
    """The committed ALiBi run at L = 64 with its rows copied as a test split whose losses at 8L are 1 nat higher:
    the position gain past L is the validation one (0.011) on validation and 1 nat more on test, neither refused."""
    import json
    import shutil
    from pathlib import Path

    from pe_bench.report.collect import collect_all
    from pe_bench.report.perplexity import context_table
    from pe_bench.runs import Run, file_sha256

    src = Path(__file__).resolve().parent.parent / "results" / "default" / "runs" / "alibi-tiny-shakespeare-L64-s0-5140bfbd"
    run = tmp_path / src.name
    shutil.copytree(src, run)
    for name in ("eval.csv", "positions.csv", "windows.csv"):
        d = pd.read_csv(run / name, dtype=str, keep_default_na=False)
        test = d.assign(split="test")
        if name == "positions.csv":
            test["loss"] = [str(float(x) + (n == "512")) for x, n in zip(test["loss"], test["L_eval"])]
        pd.concat([d, test]).to_csv(run / name, index=False)
    meta = json.loads((run / "meta.json").read_text())
    meta["eval_csv_sha256"] = file_sha256(run / "eval.csv")
    (run / "meta.json").write_text(json.dumps(meta))
    col = collect_all([Run(run)])
    assert not col.left_out and sorted(set(col.context["split"])) == ["test", "validation"]
    assert context_table(col).loc[("alibi", 64), "[64, 512)"] == "+0.011"
    assert context_table(col, "test").loc[("alibi", 64), "[64, 512)"] == "+1.011"


def test_spans_of_one_configuration_are_labelled_apart_down_to_a_single_scored_token():
    """labelled: two evaluations of one configuration that scored different spans (here 1 and 2 tokens a length,
    the smallest there can be) are never one row; the span scored at more lengths keeps the label, and rows that
    scored nothing (diverged) are never set apart."""
    from pe_bench.report.labels import labelled

    df = pd.DataFrame({"scheme": "alibi", "config": "c", "ft_method": "alibi", "step": 5, "steps": 5,
                       "split": "validation", "mode": "nonoverlapping", "budget": "1", "S": "", "precision": "fp32",
                       "warmup": "0", "L_eval": [1, 2, 1, 2, 4], "tokens_scored": [2, 2, 1, 1, 0]})
    out = labelled(df, {"c": {}}, {"c": ""}, {"c": {}})
    assert out["label"].tolist() == ["alibi", "alibi", "alibi · scored=1", "alibi · scored=1", "alibi"]


def test_a_window_key_is_the_same_text_however_the_row_holds_its_values():
    """window_key: an eval row as a dict or as a namedtuple of the collected table, its numbers as int, float or
    text, its warm-up missing, empty, None or NaN (rows of files older than the column: no warm-up), all give the
    key that read_windows gives the windows.csv row."""
    from collections import namedtuple

    from pe_bench.report import window_key
    from pe_bench.report.files import WINDOW_KEY

    text = {"scheme": "alibi", "split": "validation", "L_eval": "64", "mode": "sliding", "stride": "16", "S": "16",
            "budget": "all", "step": "10", "precision": "fp32", "warmup": "0", "tokens_scored": "4096"}
    key = ("run",) + tuple(text[c] for c in WINDOW_KEY)
    floats = {**text, "L_eval": 64.0, "stride": 16.0, "tokens_scored": 4096.0, "warmup": 0.0}
    assert window_key("run", text) == window_key("run", floats) == key
    for none in (None, "", float("nan")):
        assert window_key("run", {**text, "warmup": none}) == key, none
    older = namedtuple("Row", [c for c in WINDOW_KEY if c != "warmup"])(**{c: floats[c] for c in WINDOW_KEY
                                                                          if c != "warmup"})
    assert window_key("run", older) == key
    assert window_key("run", {**text, "warmup": "512.0"})[WINDOW_KEY.index("warmup") + 1] == "512"


def test_the_sliding_tables_context_value_is_the_paired_contrast_recomputed_from_the_runs_windows():
    """ALiBi at L = 64, three seeds (results/paper and results/trained_long): the same scored tokens at 512 and at
    64, the per-seed difference of mean losses, t over the seeds — recomputed here from windows.csv directly."""
    from pathlib import Path

    import numpy as np

    from pe_bench.report import collect_runs
    from pe_bench.runs import Run
    from pe_bench.stats import seed_interval

    root = Path(__file__).resolve().parent.parent / "results"
    runs = [root / "paper" / "runs" / "alibi-tiny-shakespeare-L64-s0-5140bfbd",
            *sorted((root / "trained_long" / "runs").glob("alibi-tiny-shakespeare-L64-s*"))]
    t = comparison(collect_runs([Run(p) for p in runs]).perplexity, "sliding")
    per_seed = []
    for run in runs:
        w = pd.read_csv(run / "windows.csv")
        w = w[(w["mode"] == "sliding") & (w["warmup"] == 512)]
        more, less = (w[w["L_eval"] == n].sort_values("window") for n in (512, 64))
        assert (more["tokens"].to_numpy() == less["tokens"].to_numpy()).all()
        per_seed.append((more["nll"].sum() - less["nll"].sum()) / more["tokens"].sum())
    iv = seed_interval(per_seed)
    want = f"{np.mean(per_seed):+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}] ×{np.exp(np.mean(per_seed)):.3f}"
    [row] = [r for (label, _), r in t.iterrows() if label.startswith("alibi")]
    assert row["context value"] == want and want.startswith("+0.006 [+0.003, +0.010]")

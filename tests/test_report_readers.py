"""The report reads what pe-bench wrote and never swallows what it cannot read: a NaN variant costs only its own
rows, windows and eval rows of one run must agree, a partial evaluation never stands in for a finished
configuration, two evaluations of one length at different spans never pool, and labels hold any value."""

import json
import shutil

import pandas as pd
import pytest
from typer.testing import CliRunner

from pe_bench.cli import app
from pe_bench.cli.report import _filtered
from pe_bench.distributed import clear_stop, request_stop
from pe_bench.markdown import label_value, table
from pe_bench.report import collect_all, collect_positions, comparison, read_windows
from pe_bench.runs import Run, RunFileError, RunMeta

runner = CliRunner()
SMALL = ["train=smoke", "eval=smoke", "model.n_layers=1", "model.d_model=32"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def train(results, *overrides):
    """Train (or resume) a run; its directory: the one this call added, else the one named in its output."""
    before = set((results / "runs").iterdir()) if (results / "runs").exists() else set()
    r = invoke("train", *SMALL, f"results_dir={results}", *overrides, "--no-progress")
    assert r.exit_code == 0, r.output
    added = set((results / "runs").iterdir()) - before
    return added.pop() if added else next(p for p in before if p.name in r.output)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """rope and alibi, seed 0, finished (eval-time variants of rope off: the tests add their own)."""
    results = tmp_path_factory.mktemp("readers") / "results"
    rope = train(results, "scheme=rope", "eval.variants=false")
    alibi = train(results, "scheme=alibi")
    return results, rope, alibi


@pytest.fixture
def results(trained, tmp_path):
    """A private copy of the trained runs."""
    shutil.copytree(trained[0], tmp_path / "results")
    return tmp_path / "results"


def run_named(results, prefix):
    return next(p for p in sorted((results / "runs").iterdir()) if p.name.startswith(prefix))


def rewrite_eval_csv(run_dir, frame, **meta_changes):
    """Replace a run's eval.csv by ``frame`` (as an older or another pe-bench would have written it) and record its
    checksum in meta.json, with ``meta_changes``; its windows.csv goes (older runs had none)."""
    import hashlib

    text = frame.to_csv(index=False)
    (run_dir / "eval.csv").write_text(text)
    (run_dir / "windows.csv").unlink(missing_ok=True)
    meta = json.loads((run_dir / "meta.json").read_text())
    meta.update(eval_csv_sha256=hashlib.sha256(text.encode()).hexdigest(), **meta_changes)
    (run_dir / "meta.json").write_text(json.dumps(meta))


def eval_frame(run_dir):
    return pd.read_csv(run_dir / "eval.csv", dtype=str, keep_default_na=False)


def cell(col, label, n, mode="nonoverlapping"):
    return comparison(col, mode).loc[(label, 32), str(n)]


def test_a_nan_variant_costs_only_its_own_rows(results):
    rope = run_named(results, "rope")
    before = collect_all([Run(rope)])
    r = invoke("eval", rope, "scheme.scaling.type=yarn", "scheme.scaling.factor=8",
               "scheme.scaling.attention_factor=1e30", "eval.variants=false")
    assert r.exit_code == 0, r.output
    assert "nan" in (rope / "windows.csv").read_text()
    after = collect_all([Run(rope)])
    assert after.left_out == []
    assert cell(after, "rope", 32) == cell(before, "rope", 32) and "[" in cell(after, "rope", 32)
    assert cell(after, "rope+yarn×8[attention_factor=1e+30]", 32) == "nan"


def test_a_nan_variant_costs_only_its_own_loss_by_position_lines(results):
    """A variant whose losses are nan leaves its own curve empty; the run's other curves stay in the plot's rows."""
    rope = run_named(results, "rope")
    r = invoke("eval", rope, "scheme.scaling.type=yarn", "scheme.scaling.factor=8",
               "scheme.scaling.attention_factor=1e30", "eval.variants=false")
    assert r.exit_code == 0, r.output
    left: list[str] = []
    pos = collect_positions([Run(rope)], left)
    assert left == []
    variant = pos[pos["scheme"] == "rope+yarn×8[attention_factor=1e+30]"]
    assert len(variant) and variant["loss"].isna().all()
    assert len(pos[pos["scheme"] == "rope"]) and pos[pos["scheme"] == "rope"]["loss"].notna().all()


def test_an_unparseable_windows_file_leaves_its_run_out_in_one_line(results):
    rope = run_named(results, "rope")
    lines = (rope / "windows.csv").read_text().splitlines()
    lines[5] = lines[5].rsplit(",", 2)[0] + ",twelve,32"
    (rope / "windows.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunFileError, match="line 6 holds a nll that is not a number"):
        read_windows(Run(rope))
    col = collect_all([Run(rope), Run(run_named(results, "alibi"))])
    assert len(col.left_out) == 1 and "windows.csv line 6" in col.left_out[0]
    assert set(col.df["scheme"]) == {"alibi", "alibi+logn"} or set(col.df["scheme"]) == {"alibi"}


@pytest.mark.parametrize("edit", ["a field too many", "a field too few"])
def test_a_windows_line_with_a_field_too_many_or_too_few_leaves_its_run_out_in_one_line(results, edit):
    """A windows.csv line edited to hold one field more (or less) than its header is refused by line, never read
    with the extra field dropped; the other run stays."""
    rope = run_named(results, "rope")
    lines = (rope / "windows.csv").read_text().splitlines()
    lines[3] = lines[3] + ",7" if edit == "a field too many" else lines[3].rsplit(",", 1)[0]
    (rope / "windows.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunFileError, match="windows.csv line 4 has the wrong number of fields"):
        read_windows(Run(rope))
    col = collect_all([Run(rope), Run(run_named(results, "alibi"))])
    assert len(col.left_out) == 1 and "windows.csv line 4 has the wrong number of fields" in col.left_out[0]
    assert not col.df.empty and not col.df["run"].str.startswith("rope").any()


def test_a_windows_csv_from_before_the_S_and_precision_columns_is_read_with_both_empty(results):
    """A run evaluated by a pe-bench that wrote neither S nor precision (in eval.csv or windows.csv): both read as
    empty in each file, so the windows still meet their rows and give the cells their intervals."""
    rope = run_named(results, "rope")
    windows = pd.read_csv(rope / "windows.csv", dtype=str, keep_default_na=False)
    rewrite_eval_csv(rope, eval_frame(rope).drop(columns=["S", "precision"]))
    windows.drop(columns=["S", "precision"]).to_csv(rope / "windows.csv", index=False)
    col = collect_all([Run(rope)])
    assert col.left_out == [] and set(col.df["S"]) == {""} and set(col.df["precision"]) == {""}
    for mode in ("nonoverlapping", "sliding"):
        assert "[" in comparison(col, mode).loc[("rope", 32), "32"], mode  # an interval: the windows were found


def test_windows_that_are_not_finite_cost_only_their_own_key(results):
    """The first key of rope's windows.csv holds a window whose loss is nan: that key gives no interval, and the
    keys after it in the file keep theirs."""
    rope = run_named(results, "rope")
    before = read_windows(Run(rope))
    lines = (rope / "windows.csv").read_text().splitlines()
    header, first = lines[0].split(","), lines[1].split(",")
    first[header.index("nll")] = "nan"
    lines[1] = ",".join(first)
    (rope / "windows.csv").write_text("\n".join(lines) + "\n")
    after = read_windows(Run(rope))
    assert len(before) > 2 and set(after) == set(list(before)[1:])


def test_an_eval_csv_edited_against_its_windows_is_refused(results):
    rope = run_named(results, "rope")
    ev = pd.read_csv(rope / "eval.csv", keep_default_na=False)
    ev.loc[0, "ppl"] = 9.999
    ev.to_csv(rope / "eval.csv", index=False)
    meta = json.loads((rope / "meta.json").read_text())
    del meta["eval_csv_sha256"]  # the checksum would catch it; the windows must too
    (rope / "meta.json").write_text(json.dumps(meta))
    col = collect_all([Run(rope)])
    assert col.df.empty and len(col.left_out) == 1
    assert "says perplexity 9.999, its windows.csv recomputes" in col.left_out[0]
    r = invoke("report", results, "--out", results.parent / "rep", "--no-plots")
    assert r.exit_code == 0 and "9.999" not in (results.parent / "rep" / "comparison.md").read_text()
    assert "left out:" in r.output and "edited or stale" in r.output


def test_two_spans_of_one_length_keep_their_own_windows_and_intervals(results):
    alibi, rope = run_named(results, "alibi"), run_named(results, "rope")
    r = invoke("eval", alibi, "eval.lengths=[32,512,1024]", "eval.variants=false")
    assert r.exit_code == 0, r.output
    col = collect_all([Run(alibi), Run(rope)])
    t = comparison(col, "nonoverlapping")
    other = [i for i in t.index if i[0].startswith("alibi · scored=")]
    assert len(other) == 1 and ("alibi", 32) in t.index  # the evaluation at the most lengths keeps the label
    assert [i for i in t.index if i[0].startswith("rope")] == [("rope", 32)]  # the other run's rows keep theirs
    at_L = [t.loc[("alibi", 32), "32"], t.loc[other[0], "32"]]
    assert all("[" in c for c in at_L) and at_L[0] != at_L[1]  # each span its own windows and interval
    assert t.loc[other[0], "1024"] != "—" and t.loc[("alibi", 32), "1024"] == "—"
    assert any(("alibi", 32, 32) == m for m in t.attrs["best"]) or any(("rope", 32, 32) == m for m in t.attrs["best"])
    r = invoke("report", results, "--compare", "alibi", "rope", "--mode", "nonoverlapping")
    assert r.exit_code == 0, r.output
    assert "not compared: alibi vs rope (scored=" in r.output and "only alibi was evaluated" in r.output


def test_of_two_spans_at_as_many_lengths_the_longer_keeps_the_label_and_only_that_runs_rows_are_set_apart(results):
    """alibi evaluated again at four lengths up to 1024 tokens scores a longer span (4096 tokens) than its first
    evaluation at four lengths up to 256 (2048): at a tie in lengths the longer span keeps the configuration's label
    and the first evaluation's rows are labelled by their span — rope's rows, read after alibi's, keep their own."""
    alibi, rope = run_named(results, "alibi"), run_named(results, "rope")
    r = invoke("eval", alibi, "eval.lengths=[32,64,128,1024]", "eval.variants=false", "eval.logn=false")
    assert r.exit_code == 0, r.output
    col = collect_all([Run(alibi), Run(rope)])
    mine = col.df[col.df["run"] == alibi.name]
    main = mine[(mine["mode"] == "nonoverlapping") & (mine["scheme"] == "alibi")]
    assert set(main.loc[main["tokens_scored"] == 4096, "label"]) == {"alibi"}
    assert set(main.loc[main["tokens_scored"] == 2048, "label"]) == {"alibi · scored=2048"}
    assert set(col.df.loc[col.df["run"] == rope.name, "label"]) == set(collect_all([Run(rope)]).df["label"])


def test_loss_by_position_draws_every_row_at_its_own_longest_length(results):
    pytest.importorskip("matplotlib")
    from pe_bench.plots import positions_figure

    alibi, rope = run_named(results, "alibi"), run_named(results, "rope")
    assert invoke("eval", alibi, "eval.lengths=[32,512]", "eval.variants=false").exit_code == 0
    runs = [Run(alibi), Run(rope)]
    fig = positions_figure(collect_positions(runs), df=collect_all(runs).df)
    labels = {t for ax in fig.axes for t in ax.get_legend_handles_labels()[1]}
    assert {"alibi", "rope (at 256)"} <= labels  # rope was never evaluated at 512: drawn at 256, not dropped


def stopped_after_one_step(results, scheme):
    """A seed-1 run stopped after its first step (what SIGTERM does), then evaluated with --partial."""
    request_stop()
    try:
        r = invoke("train", *SMALL, f"results_dir={results}", f"scheme={scheme}", "eval.variants=false", "seed=1",
                   "--no-progress")
    finally:
        clear_stop()
    assert r.exit_code == 3, r.output
    run = run_named(results, f"{scheme}-tiny-shakespeare-L32-s1")
    assert invoke("eval", run, "--partial", "eval.variants=false").exit_code == 0


def test_compare_says_what_it_left_out_and_never_uses_a_partial_row(results):
    stopped_after_one_step(results, "rope")
    r = invoke("report", results, "--compare", "alibi", "rope", "--mode", "nonoverlapping")
    assert r.exit_code == 0, r.output
    assert "step 1/20" not in r.output.split("not compared:")[0]  # the table: finished rows only
    assert "not compared: alibi vs rope (step 1/20)" in r.output and "compared only with --partial" in r.output
    shutil.rmtree(run_named(results, "rope-tiny-shakespeare-L32-s0"))
    r = invoke("report", results, "--compare", "alibi", "rope", "--mode", "nonoverlapping")
    assert r.exit_code == 2 and "a partial evaluation (step 1/20); compared only with --partial" in r.output
    assert "re-evaluate" not in r.output
    stopped_after_one_step(results, "alibi")
    r = invoke("report", results, "--compare", "alibi", "rope", "--mode", "nonoverlapping", "--partial")
    assert r.exit_code == 0, r.output
    table_rows = [line for line in r.output.splitlines() if line.startswith("│ nonoverlapping")]
    assert len(table_rows) == 4 and all("step 1/20" in line for line in table_rows)  # labelled on the same line


@pytest.mark.parametrize("value, shown", [("\n\n", '"\\n\\n"'), ("", '""'), ("a|b", '"a|b"'), ("[x]", '"[x]"'),
                                          ("tiny-shakespeare", "tiny-shakespeare"), (2, "2"), ([64, 128], "[64, 128]")])
def test_label_values_are_one_token(value, shown):
    assert label_value(value) == shown


def test_markdown_cells_never_cut_a_row():
    md = table(["scheme", "x"], [['rope · sep="a|b"', "1\n2"]])
    assert md.count("\n") == 2 and "\\|" in md and "1\\n2" in md


def test_a_single_fine_tune_without_its_parent_row_keeps_both_panels_and_a_legend(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    from pe_bench import plots

    saved = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: saved.append(fig))
    t = pd.DataFrame([{"parent": "rope-tiny-shakespeare-L32", "method": "rope+yarn×8@256", "L_ft": 256, "steps": 5,
                       "L": 32, "tokens": 2048, "32": 30.1, "64": 30.5, "128": 31.0, "256": 33.2, "seeds": 1}])
    assert plots.plot_extension(t, tmp_path / "ft.png") is not None
    fig = saved[0]
    assert isinstance(fig, matplotlib.figure.Figure)
    assert [ax.get_title() for ax in fig.axes] == ["rope-tiny-shakespeare-L32: at 256 tokens",
                                                   "rope-tiny-shakespeare-L32: at 32 tokens"]
    assert fig.axes[0].get_legend() is not None


def test_a_damaged_positions_file_is_named_and_costs_only_its_plot_lines(results):
    rope = run_named(results, "rope")
    text = (rope / "positions.csv").read_text().splitlines()
    text[3] = text[3].replace(",32,", ",thirty-two,", 1)
    (rope / "positions.csv").write_text("\n".join(text) + "\n")
    r = invoke("report", results, "--out", results.parent / "rep")
    assert r.exit_code == 0, r.output
    assert "left out of the plots:" in r.output and "positions.csv" in r.output
    table = pd.read_csv(results.parent / "rep" / "comparison.csv")
    assert "rope" in set(table["scheme"])  # its tables stand
    quiet = invoke("report", results, "--out", results.parent / "rep2", "--no-plots")
    assert quiet.exit_code == 0 and "left out of the plots" not in quiet.output  # no plots: nothing to say of them


def test_an_analysis_records_its_step_and_is_retired_when_training_moves_on(tmp_path):
    results = tmp_path / "results"
    request_stop()  # stopped after its first step, with a checkpoint
    try:
        r = invoke("train", *SMALL, f"results_dir={results}", "scheme=alibi", "eval.variants=false", "--no-progress")
    finally:
        clear_stop()
    assert r.exit_code == 3, r.output
    run = run_named(results, "alibi")
    r = invoke("analyze", run, "--examples", "2", "--buckets", "4")
    assert r.exit_code == 0, r.output
    assert json.loads((run / "analysis" / "analysis.json").read_text())["step"] == 1
    assert set(pd.read_csv(run / "analysis" / "attention.csv")["step"]) == {1}
    train(results, "scheme=alibi", "eval.variants=false")  # resumed to the end
    assert not (run / "analysis").exists() and (run / "analysis.stale-step1" / "attention.csv").exists()
    r = invoke("analyze", run, "--examples", "2", "--buckets", "4")
    assert r.exit_code == 0 and json.loads((run / "analysis" / "analysis.json").read_text())["step"] == 20


def test_a_string_setting_in_a_label_is_one_quoted_line_in_markdown_and_csv(tmp_path):
    results = tmp_path / "results"
    fast = ["scheme=nope", "eval.variants=false", "eval.modes=[nonoverlapping]"]
    for sep in ("data.doc_separator=XYZ", "data.doc_separator='a|b'"):
        train(results, *fast, sep)
    train(results, *fast)  # the default separator: two newlines
    r = invoke("report", results, "--out", tmp_path / "rep", "--no-plots")
    assert r.exit_code == 0, r.output
    labels = list(pd.read_csv(tmp_path / "rep" / "comparison.csv")["scheme"])
    assert sorted(labels) == sorted(['nope · data.doc_separator="\\n\\n"', 'nope · data.doc_separator="a|b"',
                                     "nope · data.doc_separator=XYZ"])
    md = (tmp_path / "rep" / "comparison.md").read_text()
    perplexity, context = md.split("## Position gain")
    rows = [line for line in perplexity.splitlines() if line.startswith("| nope")]
    assert len(rows) == 3 and all(line.count(" | ") == 8 for line in rows)  # no cell cut in two
    rows = [line for line in context.splitlines() if line.startswith("| nope")]
    assert len(rows) == 3 and all(line.count(" | ") == 7 for line in rows)
    assert '| nope · data.doc_separator="a\\|b" |' in md and '| nope · data.doc_separator="\\\\n\\\\n" |' in md
    fingerprints = {json.loads((p / "meta.json").read_text())["data_fingerprint"] for p in (results / "runs").iterdir()}
    assert len(fingerprints) == 3  # the separator is in the data, not only in the name


def test_a_report_that_fails_half_way_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    import errno

    from pe_bench import publish
    from pe_bench.report import perplexity as report  # where the report's tables are written

    rows = pd.DataFrame([{"run": "a-0", "scheme": "alibi", "L_train": 64, "L_eval": n, "mode": "nonoverlapping",
                          "split": "validation", "stride": n, "ppl": 9.0 + n / 64, "seed": 0, "status": "ok",
                          "tokens_scored": 100, "data": "d", "model": "m"} for n in (64, 128)])
    out = tmp_path / "rep"
    publish.write_report(rows, pd.DataFrame(), out, "before", plots=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "write_tables", disk_full)  # eval_long.csv is written, then the disk is full
    with pytest.raises(OSError):
        publish.write_report(rows.assign(ppl=rows["ppl"] + 1), pd.DataFrame(), out, "after", plots=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staging folder left either


def test_eval_long_csv_has_each_rows_configuration_hash_and_label(results):
    from pe_bench.runs import digest, identity

    r = invoke("report", results, "--out", results.parent / "rep", "--no-plots")
    assert r.exit_code == 0, r.output
    long = pd.read_csv(results.parent / "rep" / "eval_long.csv", dtype=str, keep_default_na=False)
    assert {"config", "label"} <= set(long.columns)
    for name in ("rope", "alibi"):
        run = Run(run_named(results, name))
        rows = long[long["run"] == run.path.name]
        assert len(rows) and set(rows["config"]) == {digest(identity(run.load_config(), seed=False))}
    table = pd.read_csv(results.parent / "rep" / "comparison.csv")
    assert set(long["label"]) == set(table["scheme"])  # the long rows name the table rows they make


@pytest.mark.parametrize("column, value, says", [("status", "weird", "has status 'weird', not one of"),
                                                 ("L_eval", "thirty-two", "holds a value that is not a number"),
                                                 ("ppl", "lots", "holds a value that is not a number")])
def test_an_eval_csv_with_a_bad_status_or_number_leaves_its_run_out_in_one_line(results, column, value, says):
    rope = run_named(results, "rope")
    ev = pd.read_csv(rope / "eval.csv", dtype=str, keep_default_na=False)
    ev.loc[2, column] = value
    ev.to_csv(rope / "eval.csv", index=False)
    meta = json.loads((rope / "meta.json").read_text())
    del meta["eval_csv_sha256"]  # a file from elsewhere: the file itself is checked
    (rope / "meta.json").write_text(json.dumps(meta))
    col = collect_all([Run(rope), Run(run_named(results, "alibi"))])
    assert len(col.left_out) == 1 and f"{rope / 'eval.csv'} line 4 " in col.left_out[0] and says in col.left_out[0]
    assert "rope" not in set(col.df["scheme"]) and "alibi" in set(col.df["scheme"])


def test_windows_that_do_not_add_up_to_the_tokens_they_scored_leave_their_run_out(results):
    rope = run_named(results, "rope")
    w = pd.read_csv(rope / "windows.csv", dtype=str, keep_default_na=False)
    w.loc[0, "tokens"] = str(int(w.loc[0, "tokens"]) - 1)  # one window says it scored a token less
    w.to_csv(rope / "windows.csv", index=False)
    col = collect_all([Run(rope), Run(run_named(results, "alibi"))])
    assert len(col.left_out) == 1 and "windows.csv: the windows of rope at 32 tokens (nonoverlapping) add up to " \
        "2047 tokens, not the 2048 they say they scored" in col.left_out[0]
    assert "rope" not in set(col.df["scheme"])


@pytest.mark.parametrize("name, garbage", [("meta.json", '{"status": "do'), ("config.yaml", "model: [1, 2\n  x: {")])
def test_an_unreadable_meta_json_or_config_yaml_leaves_its_run_out_of_the_report_by_name(results, name, garbage):
    rope = run_named(results, "rope")
    (rope / name).write_text(garbage)
    r = invoke("report", results, "--out", results.parent / "rep", "--no-plots")
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert f"left out: {rope / name} is unreadable" in out and "1 run directories left out" in out
    assert set(pd.read_csv(results.parent / "rep" / "comparison.csv")["scheme"]) == {"alibi"}


def test_an_unfinished_runs_rows_are_left_out_unless_they_come_from_eval_partial(results):
    """eval.csv rows of the final step in a run whose status says it is not finished (stopped while training on,
    or rows copied in): the report leaves the run out by name; the rows of `eval --partial` would say their step."""
    rope = run_named(results, "rope")
    meta = json.loads((rope / "meta.json").read_text())
    (rope / "meta.json").write_text(json.dumps({**meta, "status": "interrupted"}))
    col = collect_all([Run(rope), Run(run_named(results, "alibi"))])
    assert len(col.left_out) == 1 and f"{rope} is not finished (status interrupted)" in col.left_out[0]
    assert "rope" not in set(col.df["scheme"])
    original = eval_frame(rope)
    for step in ("None", ""):  # un-stepped rows (older versions wrote 'None'): a full evaluation, not --partial
        rewrite_eval_csv(rope, original.assign(step=step))
        col = collect_all([Run(rope)])
        assert len(col.left_out) == 1 and "is not finished (status interrupted)" in col.left_out[0], step
        assert col.df.empty and col.windows == {} and col.meta == {}  # nothing left: empty, not broken


def test_a_report_on_a_full_disk_is_one_line_exit_1_and_the_previous_report_stands(results, monkeypatch):
    import errno

    from pe_bench.report import perplexity as report  # where the report's tables are written

    out = results.parent / "rep"
    assert invoke("report", results, "--out", out, "--no-plots").exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "write_tables", disk_full)  # eval_long.csv is staged, then the disk is full
    r = invoke("report", results, "--out", out, "--no-plots")
    assert r.exit_code == 1, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "free some space" in errors[0]
    assert "Traceback" not in r.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the previous report, whole


def compare_rows(output: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│ ")]


def test_compare_on_the_command_line_names_the_seeds_it_left_out_and_the_lengths_it_could_not_compare(results):
    """alibi with seeds 0 and 1, rope with seed 0: `report --compare alibi rope` pairs seed 0 (a paired bootstrap
    over the same windows) and names seed 1 as left out on every line; a length whose per-window losses are gone is
    one `not compared:` line saying so."""
    train(results, "scheme=alibi", "seed=1")
    r = invoke("report", results, "--compare", "alibi", "rope", "--mode", "nonoverlapping")
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if line.startswith("┃"))
    cols = [c.strip() for c in header.split("┃")[1:-1]]
    assert cols == ["mode", "config", "L", "L_eval", "ppl alibi", "ppl rope", "difference", "95% interval", "method",
                    "excludes 0", "verdict", "seeds left out"]
    rows = compare_rows(r.output)
    assert [int(row[3]) for row in rows] == [32, 64, 128, 256]
    for row in rows:  # seed 0 paired over the 2048 tokens scored at each length; seed 1 named on every line
        assert row[-1] == "1" and row[8] == f"paired block bootstrap, {2048 // int(row[3])} windows", row
        assert row[9] in ("yes", "no") and row[7].startswith("[")
    assert "not compared" not in r.output
    rope = run_named(results, "rope")
    w = pd.read_csv(rope / "windows.csv", dtype=str, keep_default_na=False)
    w[~((w["L_eval"] == "64") & (w["mode"] == "nonoverlapping"))].to_csv(rope / "windows.csv", index=False)
    r = invoke("report", results, "--compare", "alibi", "rope", "--mode", "nonoverlapping")
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "not compared: alibi vs rope (-) at nonoverlapping 64: no per-window losses" in out
    assert [int(row[3]) for row in compare_rows(r.output)] == [32, 128, 256]


def test_an_analysis_of_an_eval_time_variant_goes_to_its_own_folder(results):
    rope = run_named(results, "rope")
    r = invoke("analyze", rope, "scheme.scaling.type=yarn", "scheme.scaling.factor=8", "--examples", "2",
               "--buckets", "4")
    assert r.exit_code == 0, r.output
    assert not (rope / "analysis").exists()  # the default place holds the run's own scheme only
    folder = rope / "analysis-rope_yarn_8"
    assert set(pd.read_csv(folder / "attention.csv")["scheme"]) == {"rope+yarn×8"}
    assert json.loads((folder / "analysis.json").read_text())["step"] == 20


KEYS = ("scheme", "base_scheme", "model", "data", "split", "L_train", "L_eval", "ratio", "mode", "stride", "S",
        "warmup", "budget", "seed")


@pytest.mark.parametrize("prefix", ["rope", "alibi"])
def test_a_diverged_runs_rows_stand_exactly_where_its_evaluation_rows_would(trained, prefix):
    """The 'diverged' rows of a run are keyed like the rows its evaluation writes (every length, both modes, the
    same strides, S, warm-ups and budgets), carry no number, and name the step training diverged at."""
    from pe_bench.report import read_eval_rows
    from pe_bench.report.collect import _diverged_rows

    run = Run(run_named(trained[0], prefix))
    meta = run.meta()
    real = read_eval_rows(run, meta)
    rows = _diverged_rows(run.load_config(), meta.with_updates(run.meta_path, diverged_step=17))
    assert [{k: str(r[k]) for k in KEYS} for r in rows] == [{k: str(r[k]) for k in KEYS} for r in real]
    for r in rows:
        assert (r["loss"], r["ppl"], r["bpb"], r["tokens_scored"], r["status"], r["step"]) == (
            "nan", "nan", "nan", 0, "diverged", ""), r
        assert r["note"] == "training diverged at step 17"


def test_a_diverged_run_says_diverged_under_the_label_of_each_of_its_eval_time_variants(trained):
    """With eval.variants on, a diverged rope run has 'diverged' rows under rope's label and under each eval-time
    variant's own label (configs/scheme/rope.yaml), each with the base scheme's keys; with it off, rope's only."""
    import dataclasses

    import yaml

    from pe_bench.config import config_dir
    from pe_bench.report.collect import _diverged_rows

    run = Run(run_named(trained[0], "rope"))
    cfg = run.load_config()
    on = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, variants=True))
    rows = _diverged_rows(on, RunMeta(diverged_step=2))
    labels = list(dict.fromkeys(r["scheme"] for r in rows))
    variants = yaml.safe_load((config_dir() / "scheme" / "rope.yaml").read_text())["eval_variants"]
    assert len(labels) == 1 + len(variants) and labels[0] == "rope" and "rope+yarn×8" in labels
    assert all(label.startswith("rope+") for label in labels[1:])
    alone = _diverged_rows(cfg, RunMeta(diverged_step=2))
    assert {r["scheme"] for r in alone} == {"rope"}
    for label in labels:
        assert [{**r, "scheme": "rope"} for r in rows if r["scheme"] == label] == alone


def test_a_diverged_runs_length_ratios_are_rounded_like_its_evaluation_rows():
    """L = 48 evaluated at 48 and 100 tokens: the ratio 100/48 is written to 4 decimals in both kinds of row."""
    import numpy as np
    import torch

    from pe_bench.build import build_model
    from pe_bench.config import compose
    from pe_bench.evaluate.perplexity import evaluate
    from pe_bench.report.collect import _diverged_rows

    cfg = compose(["scheme=alibi", "model.n_layers=1", "model.d_model=32", "train.seq_len=48", "eval=smoke",
                   "eval.lengths=[48,100]", "eval.stride=24"])
    torch.manual_seed(0)
    tokens = np.random.default_rng(0).integers(0, 256, 4000).astype(np.uint8)
    ev = evaluate(build_model(cfg, 256).eval(), cfg, tokens, np.ones(256, dtype=np.int64),
                          torch.device("cpu"), quiet=True)
    real = ev.rows
    rows = _diverged_rows(cfg, RunMeta(diverged_step=1))
    assert [(r["L_eval"], r["mode"], r["ratio"]) for r in rows] == [(r["L_eval"], r["mode"], r["ratio"]) for r in real]
    assert rows[-1]["ratio"] == 2.0833


def test_runs_made_with_other_numerics_are_rows_of_their_own_labelled_by_them(results):
    """The same configuration and seed from two machines (numerics in meta.json): two rows, each labelled with its
    numerics, never one row of two replicas; either run alone: one row, its plain label."""
    from pe_bench.runs import numerics_of

    alibi = run_named(results, "alibi")
    other = alibi.with_name(alibi.name + "-elsewhere")
    shutil.copytree(alibi, other)
    meta = json.loads((other / "meta.json").read_text())
    meta["numerics"] = "torch 0.0, cpu NONE, 7 threads"
    (other / "meta.json").write_text(json.dumps(meta))
    col = collect_all([Run(alibi), Run(other)])
    assert col.left_out == [] and col.df["group"].nunique() == 1  # apart in rows, still one table to compete in
    here = numerics_of(Run(alibi).meta())
    assert sorted(set(col.df["label"])) == sorted([f"alibi · numerics={here}",
                                                   "alibi · numerics=torch 0.0, cpu NONE, 7 threads"])
    assert (comparison(col, "nonoverlapping")["seeds"] == 1).all()
    for run in (alibi, other):
        assert set(collect_all([Run(run)]).df["label"]) == {"alibi"}


def test_a_diverged_run_gives_diverged_rows_beside_the_rows_its_eval_csv_holds(results):
    """A run whose meta.json says diverged: 'diverged' rows at every length and mode (and, with an eval.csv, the rows
    it holds beside them); without an eval.csv it is not left out — its cells say 'diverged'."""
    from pe_bench.report import read_eval_rows
    from pe_bench.report.collect import _diverged_rows

    rope = run_named(results, "rope")
    meta = json.loads((rope / "meta.json").read_text())
    meta.update(status="diverged", diverged_step=3)
    (rope / "meta.json").write_text(json.dumps(meta))
    run = Run(rope)
    expected = _diverged_rows(run.load_config(), run.meta())
    col = collect_all([run])
    assert col.left_out == []
    assert col.df["status"].value_counts().to_dict() == {"diverged": len(expected),
                                                         "ok": len(read_eval_rows(run, run.meta()))}
    assert set(col.df.loc[col.df["status"] == "diverged", "note"]) == {"training diverged at step 3"}
    (rope / "eval.csv").unlink()
    (rope / "windows.csv").unlink()
    alone = collect_all([run])
    assert alone.left_out == [] and set(alone.df["status"]) == {"diverged"} and len(alone.df) == len(expected)
    assert cell(alone, "rope", 32) == "diverged"


def test_an_eval_csv_from_an_older_pe_bench_is_read_with_the_newer_columns_filled_in(results):
    """eval.csv files written before the budget, step, note, S and precision columns existed: those read as empty
    text and the run's final step, with the same numbers; a step written as 'None' (as older versions did) is the
    final step too, and so are the older rows beside a diverged run's 'diverged' rows; a missing or 'None' warm-up
    is none ('0')."""
    alibi = run_named(results, "alibi")
    run = Run(alibi)
    steps = run.load_config().train.steps
    original = eval_frame(alibi)

    def read_as(frame, **meta_changes):
        rewrite_eval_csv(alibi, frame, **meta_changes)
        col = collect_all([run])
        assert col.left_out == []
        return col.df

    d = read_as(original.drop(columns=["budget", "step", "note", "S", "precision"]))
    assert (d[["budget", "S", "precision", "note"]] == "").all().all() and (d["step"] == steps).all()
    assert d["ppl"].tolist() == original["ppl"].astype(float).tolist()
    assert (read_as(original.assign(step="None"))["step"] == steps).all()
    assert (read_as(original.drop(columns=["warmup"]))["warmup"] == "0").all()  # before sliding warm-ups: none
    assert (read_as(original.assign(warmup="None"))["warmup"] == "0").all()
    d = read_as(original.drop(columns=["step", "budget", "S", "precision"]), status="diverged", diverged_step=2)
    assert set(d["status"]) == {"diverged", "ok"} and (d["step"] == steps).all()
    older, diverged = d[d["status"] == "ok"], d[d["status"] == "diverged"]
    assert (older[["budget", "S"]] == "").all().all() and len(older) == len(original)
    assert set(diverged["budget"]) == set(original["budget"])  # '2048', not '2048.0'


def test_rope_evaluated_as_a_variant_and_rope_trained_with_it_are_rows_named_by_their_training(results):
    """Plain rope evaluated as rope+yarn×8 and rope trained with YaRN×8 share a scheme label: each row adds the
    scheme options it was trained with (and only those that differ), never one row of two configurations."""
    rope = run_named(results, "rope")
    assert invoke("eval", rope, "scheme.scaling.type=yarn", "scheme.scaling.factor=8",
                  "eval.variants=false").exit_code == 0
    yarn = train(results, "scheme=rope", "scheme.scaling.type=yarn", "scheme.scaling.factor=8",
                 "scheme.eval_variants=[]")
    col = collect_all([Run(rope), Run(yarn)])
    assert sorted(set(col.df["label"])) == [
        "rope", "rope+yarn×8 · trained with scheme.scaling.factor=1.0, scheme.scaling.type=none",
        "rope+yarn×8 · trained with scheme.scaling.factor=8, scheme.scaling.type=yarn"]
    assert col.df["group"].nunique() == 1
    assert set(col.df.loc[col.df["run"] == yarn.name, "label"]) == {
        "rope+yarn×8 · trained with scheme.scaling.factor=8, scheme.scaling.type=yarn"}  # each run its own words


def test_a_finetunes_rows_name_their_parent_budget_and_method(results):
    """A run fine-tuned from rope for 2 steps: its rows carry the parent's configuration, the fine-tuning steps
    and the method (scheme label and fine-tune length); its label is the tag, without repeating the keys the tag
    holds; the parent's rows are those of a run trained from scratch."""
    import re

    from pe_bench.runs import numerics_of

    rope = run_named(results, "rope")
    # the parent's CPU threads (the finetune recipe pins 2): other numerics would make the two runs' rows apart
    threads = re.search(r"(\d+) threads$", numerics_of(Run(rope).meta())).group(1)
    before = set((results / "runs").iterdir())
    r = invoke("finetune", rope, "train.seq_len=64", "train.batch_size=2", "train.steps=2", f"train.threads={threads}",
               "--no-progress")
    assert r.exit_code == 0, r.output
    (ft,) = set((results / "runs").iterdir()) - before
    col = collect_all([Run(rope), Run(ft)])
    parent, child = (col.df[col.df["run"] == p.name] for p in (rope, ft))
    assert set(parent["ft_parent"]) == {""} and set(parent["ft_steps"]) == {0} and set(parent["ft_method"]) == {"rope"}
    assert set(child["ft_parent"]) == set(parent["config"]) and set(child["ft_steps"]) == {2}
    assert set(child["ft_method"]) == {"rope @64"} and set(child["label"]) == {"rope ft2@64"}
    assert set(parent["bare"]) == set(child["ft_parent"])  # how the extension table finds the parent's rows
    assert set(parent["label"]) == {"rope"}


def test_fine_tunes_are_labelled_by_their_tag_and_the_settings_that_differ_among_fine_tunes(results):
    """Three fine-tunes of rope: 2 and 3 steps, and 2 steps at another learning rate. The budget is in the tag
    (ft2, ft3), never repeated as train.steps; the learning rate differs among the fine-tunes, so it is in their
    labels and in their method (the extension table's rows); the parent's label is its own."""
    import re

    from pe_bench.runs import numerics_of

    rope = run_named(results, "rope")
    threads = re.search(r"(\d+) threads$", numerics_of(Run(rope).meta())).group(1)
    runs = []
    for extra in (["train.steps=2"], ["train.steps=3"], ["train.steps=2", "train.lr=0.001"]):
        before = set((results / "runs").iterdir())
        r = invoke("finetune", rope, "train.seq_len=64", "train.batch_size=2", f"train.threads={threads}", *extra,
                   "--no-progress")
        assert r.exit_code == 0, r.output
        runs += list(set((results / "runs").iterdir()) - before)
    col = collect_all([Run(rope), *map(Run, runs)])
    labels = {name: set(g["label"]) for name, g in col.df.groupby("run")}
    methods = {name: set(g["ft_method"]) for name, g in col.df.groupby("run")}
    assert labels[rope.name] == {"rope"} and methods[rope.name] == {"rope"}
    assert [labels[r.name] for r in runs] == [{"rope ft2@64 · train.lr=0.0005"}, {"rope ft3@64 · train.lr=0.0005"},
                                              {"rope ft2@64 · train.lr=0.001"}]
    assert [methods[r.name] for r in runs] == [{"rope @64 · train.lr=0.0005"}, {"rope @64 · train.lr=0.0005"},
                                               {"rope @64 · train.lr=0.001"}]


def test_a_diverged_seed_sits_in_its_configurations_row_and_makes_it_say_diverged(results):
    """Seed 1 of alibi diverged (never evaluated): its rows take the precision seed 0 was evaluated in, so the
    configuration is one row whose cells say 'diverged', over 2 seeds — not a row of its own."""
    alibi = run_named(results, "alibi")
    seed1 = train(results, "scheme=alibi", "seed=1")
    meta = json.loads((seed1 / "meta.json").read_text())
    (seed1 / "meta.json").write_text(json.dumps({**meta, "status": "diverged", "diverged_step": 1}))
    (seed1 / "eval.csv").unlink()
    (seed1 / "windows.csv").unlink()
    col = collect_all([Run(alibi), Run(seed1)])
    assert col.left_out == [] and set(col.df["precision"]) == {"fp32"}
    t = comparison(col, "nonoverlapping")
    assert list(t.index) == [("alibi", 32)] and t.loc[("alibi", 32), "seeds"] == 2
    assert t.loc[("alibi", 32), "32"] == "diverged"
    rewrite_eval_csv(alibi, eval_frame(alibi).assign(precision="bf16"))  # seed 0 in bf16 (as on a GPU): still one row
    col = collect_all([Run(alibi), Run(seed1)])
    assert set(col.df["precision"]) == {"bf16"} and list(comparison(col, "nonoverlapping").index) == [("alibi", 32)]
    alone = collect_all([Run(seed1)])  # no seed evaluated: the precision a CPU evaluation would use
    assert set(alone.df["precision"]) == {"fp32"}


def test_a_diverged_seed_says_diverged_in_a_report_of_any_split(results):
    """A diverged run was evaluated on no split: a report of the test split shows its 'diverged' mark beside the seed
    evaluated there, never a row averaged over the evaluated seed alone."""
    alibi = run_named(results, "alibi")
    r = invoke("eval", alibi, "eval.split=test", "--no-progress")
    assert r.exit_code == 0, r.output
    seed1 = train(results, "scheme=alibi", "seed=1")
    meta = json.loads((seed1 / "meta.json").read_text())
    (seed1 / "meta.json").write_text(json.dumps({**meta, "status": "diverged", "diverged_step": 1}))
    (seed1 / "eval.csv").unlink()
    (seed1 / "windows.csv").unlink()
    col = collect_all([Run(alibi), Run(seed1)], split="test")
    assert col.left_out == [] and set(col.df["split"]) == {"test"}
    t = comparison(col, "nonoverlapping", split="test")
    assert t.loc[("alibi", 32), "seeds"] == 2 and t.loc[("alibi", 32), "32"] == "diverged"


def test_a_second_copy_of_a_run_counts_once_and_is_named(results):
    """The same run directory copied under another name (results folders merged): its rows count once."""
    alibi = run_named(results, "alibi")
    shutil.copytree(alibi, alibi.with_name(alibi.name + "-copy"))
    col = collect_all([Run(alibi), Run(alibi.with_name(alibi.name + "-copy"))])
    assert col.left_out == [f"{alibi.name}-copy: a second copy of a run already read; the first is used"]
    assert len(col.df) == len(collect_all([Run(alibi)]).df) and set(col.df["run"]) == {alibi.name}
    assert list(col.df.index) == list(range(len(col.df))) and "index" not in col.df.columns


def test_a_label_names_every_setting_that_differs_between_configurations(results):
    """alibi with 1 layer of width 32 and alibi with 2 layers of width 48: each row's label lists both settings,
    sorted and joined by ' · '."""
    alibi = run_named(results, "alibi")
    wide = train(results, "scheme=alibi", "model.n_layers=2", "model.d_model=48")
    col = collect_all([Run(alibi), Run(wide)])
    assert sorted(set(col.df["label"])) == ["alibi · model.d_model=32 · model.n_layers=1",
                                            "alibi · model.d_model=48 · model.n_layers=2"]


def test_rows_a_keep_mask_leaves_out_never_shape_the_frame(results):
    """collect_all(keep=…): the rows kept, renumbered 0…n−1, with the same columns as without the mask."""
    runs = [Run(run_named(results, p)) for p in ("alibi", "rope")]
    every = collect_all(runs).df
    kept = collect_all(runs, keep=lambda d: d["mode"] == "nonoverlapping").df
    assert list(kept.columns) == list(every.columns) and list(kept.index) == list(range(len(kept)))
    assert len(kept) == (every["mode"] == "nonoverlapping").sum() > 0


def test_a_report_narrowed_to_one_scheme_shows_no_other_schemes_rows_in_any_table(results, tmp_path):
    """--scheme alibi: the perplexity, position-gain and repetition tables, and the pages, hold alibi's rows only."""
    alibi, rope = run_named(results, "alibi"), run_named(results, "rope")
    for run in (alibi, rope):
        r = invoke("eval", run, "eval.lengths=[32,64]", "eval.modes=[nonoverlapping,per_position,repetition]",
                   "--no-progress")
        assert r.exit_code == 0, r.output
    out = tmp_path / "report"
    r = invoke("report", results / "runs", "--scheme", "alibi", "--out", out, "--no-plots")
    assert r.exit_code == 0, r.output
    assert set(pd.read_csv(out / "repetition.csv")["label"]) == {"alibi"}
    assert set(pd.read_csv(out / "eval_long.csv")["run"]) == {alibi.name}
    assert not [f.name for f in out.iterdir() if rope.name in f.read_text() or "| rope" in f.read_text()]


def test_a_report_narrowed_to_one_budget_holds_only_the_runs_trained_for_those_steps(results, tmp_path):
    """--steps 24: one token budget of a curve; the other budget's rows and loss-by-position lines are left out, and
    a budget no run has is one line, exit 2, with nothing written."""
    rope, alibi = run_named(results, "rope"), run_named(results, "alibi")
    longer = train(results, "scheme=alibi", "train.steps=24")
    out = tmp_path / "report"
    r = invoke("report", results / "runs", "--steps", 24, "--out", out, "--no-plots")
    assert r.exit_code == 0, r.output
    assert set(pd.read_csv(out / "eval_long.csv")["run"]) == {longer.name}
    assert set(pd.read_csv(out / "comparison.csv")["scheme"]) == {"alibi · train.steps=24"}
    assert (out / "README.md").read_text().startswith("# pe-bench report: 1 run\n")
    r = invoke("report", results / "runs", "--steps", 20, "--scheme", "alibi", "--out", out, "--no-plots")
    assert r.exit_code == 0, r.output
    assert set(pd.read_csv(out / "eval_long.csv")["run"]) == {alibi.name} and rope.name not in r.output
    runs = [Run(p) for p in (rope, alibi, longer)]
    positions = collect_positions(runs)
    assert set(positions["run"]) == {rope.name, alibi.name, longer.name}
    _, kept, _ = _filtered(collect_all(runs).df, positions, {"steps": [24]}, None)
    assert set(kept["run"]) == {longer.name}
    r = invoke("report", results / "runs", "--steps", 7, "--out", tmp_path / "none", "--no-plots")
    assert r.exit_code == 2 and "loosen --data/--model/--L/--scheme/--steps/--mode" in " ".join(r.output.split())
    assert not (tmp_path / "none").exists() and "Traceback" not in r.output


def test_a_report_on_one_split_names_each_run_without_rows_there_and_never_shows_another_splits_numbers(
        results, tmp_path):
    alibi, rope = run_named(results, "alibi"), run_named(results, "rope")
    for split in ("validation", "test"):  # the probe on both splits: only the test split's may reach the report
        r = invoke("eval", alibi, f"eval.split={split}", "eval.lengths=[32]", "eval.modes=[nonoverlapping,repetition]",
                   "--no-progress")
        assert r.exit_code == 0, r.output
    out = tmp_path / "report"
    r = invoke("report", results / "runs", "--split", "test", "--out", out, "--no-plots")
    assert r.exit_code == 0, r.output
    assert f"{rope.name}: no evaluation rows on the test split" in " ".join(r.output.split())
    rows = pd.read_csv(out / "eval_long.csv")
    assert set(rows["split"]) == {"test"} and set(rows["run"]) == {alibi.name}
    assert (out / "README.md").read_text().startswith("# pe-bench report: 1 run\n")
    probe = pd.read_csv(alibi / "repetition.csv")
    assert set(probe["split"]) == {"validation", "test"}
    shown = pd.read_csv(out / "repetition.csv").set_index("distance")["gain"]
    on_test = probe[probe["split"] == "test"].set_index("distance")["gain"]
    assert shown.to_dict() == pytest.approx(on_test.to_dict())
    assert shown.to_dict() != pytest.approx(probe[probe["split"] == "validation"].set_index("distance")["gain"].to_dict())

    r = invoke("report", rope, "--split", "test", "--out", tmp_path / "none")
    assert r.exit_code == 2 and "no evaluation rows on the test split" in " ".join(r.output.split())
    assert not (tmp_path / "none").exists()


def test_runs_without_rows_on_the_reported_split_never_shape_the_labels_of_those_with_some(results):
    """A report of the test split, beside a run of another width evaluated on validation only: the run shown is
    labelled by what differs between the runs shown (nothing), not by a setting of a run that is not in it."""
    alibi = run_named(results, "alibi")
    wide = train(results, "scheme=alibi", "model.n_layers=2", "model.d_model=48")
    r = invoke("eval", alibi, "eval.split=test", "eval.lengths=[32]", "eval.modes=[nonoverlapping]", "--no-progress")
    assert r.exit_code == 0, r.output
    col = collect_all([Run(alibi), Run(wide)], split="test")
    assert set(col.df["run"]) == {alibi.name} and set(col.df["label"]) == {"alibi"}
    both = collect_all([Run(alibi), Run(wide)], split="validation")
    assert "alibi · model.d_model=32 · model.n_layers=1" in set(both.df["label"])

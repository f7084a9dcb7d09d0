"""Text that goes into tables: a label value is one token, a markdown cell renders as the text it holds."""

import pathlib

from pe_bench.markdown import cell, label_value, table


def test_a_label_value_is_plain_text_as_is_and_json_otherwise():
    assert label_value("rope") == "rope" and label_value("a b") == "a b" and label_value("1e-3") == "1e-3"
    assert label_value(3) == "3" and label_value(0.5) == "0.5" and label_value(None) == "None"
    for s in ("", " a", "a ", "a|b", "x\ny", '"q"', "[1]"):
        assert label_value(s) == '"' + s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') + '"', s
    assert label_value([2, 1]) == "[2, 1]"
    assert label_value({"b": 1, "a": pathlib.Path("/p")}) == '{"a": "/p", "b": 1}'  # keys sorted, paths as text


def test_a_cell_escapes_backslashes_pipes_and_line_breaks_and_nothing_else():
    assert cell("plain text, 1.5 [x]") == "plain text, 1.5 [x]"
    assert cell(3.25) == "3.25"
    assert cell("a\\b|c\rd\ne") == "a\\\\b\\|c\\rd\\ne"  # every special character at once
    for raw, want in (("a|b", "a\\|b"), ("a\\b", "a\\\\b"), ("a\rb", "a\\rb"), ("a\nb", "a\\nb"), ("X|", "X\\|")):
        assert cell(raw) == want, raw


def test_a_table_is_a_header_a_rule_and_one_line_per_row_every_cell_escaped():
    assert table(["scheme", "a|b"], [["rope", 1.5], ["x\ny", ""]]) == (
        "| scheme | a\\|b |\n"
        "|---|---|\n"
        "| rope | 1.5 |\n"
        "| x\\ny |  |")
    assert table(["only"], []) == "| only |\n|---|"


def test_text_that_would_open_an_html_tag_is_written_as_text():
    from pe_bench.markdown import cell, inline

    assert cell('data.doc_separator="<script>alert(1)</script>"') == (
        'data.doc_separator="&lt;script>alert(1)&lt;/script>"')
    assert inline("pe-bench report <img src=x onerror=1> <!-- x -->") == "pe-bench report &lt;img src=x onerror=1> &lt;!-- x -->"
    assert cell("L [< L, 2L]") == "L [< L, 2L]" and cell("a<2") == "a<2"  # not a tag: as it is


def test_a_report_whose_title_and_labels_hold_html_writes_none_of_it_raw(tmp_path):
    from pathlib import Path

    from pe_bench.report.pages import write_readme

    out = tmp_path / "rep"
    out.mkdir()
    (out / "comparison.md").write_text("# t\n\n| scheme |\n|---|\n| x |\n")
    text = write_readme(out, "pe-bench report <script>alert(1)</script>", "pe-bench report", [out / "comparison.md"],
                        {}, ["<script>left</script> out"]).read_text()
    assert "<script" not in text and "&lt;script>alert(1)" in text and "&lt;script>left" in text
    assert Path(out / "README.md").exists()

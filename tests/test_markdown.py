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

"""docs/promises.md maps every promise of the README and of the docs pages to the tests that hold it: every row names
at least one test, and every test it names exists (so a renamed or deleted test fails here, not silently in the
table)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)(?:\[[^\]`]*\])?`")


def test_every_promise_row_names_tests_that_exist():
    rows = [line for line in (ROOT / "docs" / "promises.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("|") and not re.fullmatch(r"\|[-| ]+\|", line) and line != "| promise | test(s) |"]
    assert len(rows) > 100, "docs/promises.md lost its tables"
    defined: dict[str, set[str]] = {}
    problems = []
    for row in rows:
        tests = row.rstrip().rstrip("|").rsplit("|", 1)[-1]  # the last cell: the tests
        ids = TEST_ID.findall(tests)
        if not ids or TEST_ID.sub("", tests).replace(",", "").strip():
            problems.append(f"a row whose last cell is not a list of `tests/FILE.py::test_name`: {row}")
        for path, name in ids:
            if path not in defined:
                file = ROOT / path
                tree = ast.parse(file.read_text(encoding="utf-8")) if file.is_file() else ast.Module(body=[])
                defined[path] = {node.name for node in ast.walk(tree)
                                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if name not in defined[path]:
                problems.append(f"{path}::{name} does not exist (row: {row[:80]}…)")
    assert not problems, "\n".join(problems)

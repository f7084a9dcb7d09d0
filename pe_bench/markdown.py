"""Text that goes into tables: label values quoted where they would not read as one token, and markdown tables whose
cells can hold any text (a pipe or a newline never cuts a row)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

# A value of a run's configuration is written as it is in a label when it is plain text (letters, digits, inner
# spaces, a few marks); anything else (empty, edge spaces, newlines, pipes, brackets, quotes) is written as a JSON
# string: `data.doc_separator="\n\n"`.
PLAIN = re.compile(r"[A-Za-z0-9_.+\-/:,@%~]([A-Za-z0-9_.+\-/:,@%~ ]*[A-Za-z0-9_.+\-/:,@%~])?")


def label_value(v: Any) -> str:
    """A configuration value as a row label shows it: lists and dicts as JSON, strings quoted unless plain."""
    if isinstance(v, (list, dict)):
        return json.dumps(v, sort_keys=True, default=str)
    if isinstance(v, str) and not PLAIN.fullmatch(v):
        return json.dumps(v)
    return str(v)


TAG = re.compile(r"<(?=[A-Za-z/!?])")  # what opens an HTML tag, comment or declaration in markdown


def inline(text: str) -> str:
    """Text as markdown shows it, never as HTML: a '<' that would open a tag (``<script>``) written as ``&lt;``
    (a '<' before a space or a digit, as in "< L", stays)."""
    return TAG.sub("&lt;", text)


def cell(v: Any) -> str:
    """A markdown table cell that renders as the text it holds: HTML tags written as text (:func:`inline`),
    backslashes and pipes escaped, line breaks written as \\n (a cell is one line)."""
    text = inline(str(v))
    if not any(ch in text for ch in "\\|\r\n"):
        return text
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "\\r").replace("\n", "\\n")


def table(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> str:
    """A markdown table (no trailing newline); every cell through :func:`cell`."""
    header = [cell(h) for h in header]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)

"""Declared valid ranges of numeric config fields (and the valid values of string ones), and the one checker that
enforces them.

Every int/float field of a config schema (the dataclasses of :mod:`pe_bench.config` and every scheme's
``Options``) is declared with :func:`ranged`, e.g. ``lr: float = ranged(2e-3, gt=0)``. :func:`range_problem` walks a
schema and its values (nested dataclasses and list elements included) and returns the first value outside its
range as one line that names the full key, the value and the rule::

    train.lr=-1 is out of range: must be > 0
    eval.lengths[0]=-64 is out of range: must be >= 1
    eval.ratios=[] is empty: list at least one value; e.g. eval.ratios=[1,2,4,8]

Plain dataclasses, no Hydra: pe_bench.config and the scheme modules both import it. A test walks every schema and
fails on a numeric field without a declared range.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """Bounds (any of >=, >, <=, <), ``nonempty`` for lists, and ``hint``: the fix, appended to the message."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    nonempty: bool = False
    hint: str = ""

    def contains(self, x: float) -> bool:
        return ((self.ge is None or x >= self.ge) and (self.gt is None or x > self.gt)
                and (self.le is None or x <= self.le) and (self.lt is None or x < self.lt))

    def rule(self) -> str:
        lo = f"[{fmt(self.ge)}" if self.ge is not None else f"({fmt(self.gt)}" if self.gt is not None else ""
        hi = f"{fmt(self.le)}]" if self.le is not None else f"{fmt(self.lt)})" if self.lt is not None else ""
        if lo and hi:
            return f"must be in {lo}, {hi}"
        for op, bound in ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt)):
            if bound is not None:
                return f"must be {op} {fmt(bound)}"
        return "must be a number"


def ranged(default: Any = dataclasses.MISSING, *, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None, nonempty: bool = False, hint: str = "",
           default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with a declared valid range (for a list field: the range of every element)."""
    metadata = {"range": Range(ge=ge, gt=gt, le=le, lt=lt, nonempty=nonempty, hint=hint)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def chosen(default: str, *others: str) -> Any:
    """A string field with its valid values declared (the default first), e.g. ``filler: str = chosen("random",
    "text")``: :func:`range_problem` refuses any other value."""
    return dataclasses.field(default=default, metadata={"choices": (default, *others)})


def fmt(value: Any) -> str:
    """A value as the user would type it: -1 rather than -1.0."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(fmt(v) for v in value) + "]"
    return str(value)


@functools.lru_cache(maxsize=None)
def _hints(schema: type) -> dict[str, Any]:
    return typing.get_type_hints(schema)


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """(type without None, whether None is allowed) for ``X | None`` / ``Optional[X]``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), len(args) < len(typing.get_args(tp))
    return tp, False


def _is_number_type(tp: Any) -> bool:
    return tp in (int, float)


@dataclass(frozen=True)
class NumericField:
    key: str  # dotted, e.g. scheme.scaling.factor
    field: dataclasses.Field
    type: type  # int or float (of the elements, for a list)
    optional: bool
    is_list: bool

    @property
    def range(self) -> Range | None:
        return self.field.metadata.get("range")


def numeric_fields(schema: type, prefix: str = "") -> Iterator[NumericField]:
    """Every int/float field (or list of them) of a dataclass schema, nested dataclasses included."""
    hints = _hints(schema)
    for f in dataclasses.fields(schema):
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp, optional = _unwrap(hints[f.name])
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            yield from numeric_fields(tp, key)
        elif typing.get_origin(tp) is list and _is_number_type(_unwrap(typing.get_args(tp)[0])[0]):
            yield NumericField(key, f, _unwrap(typing.get_args(tp)[0])[0], optional, True)
        elif _is_number_type(tp):
            yield NumericField(key, f, tp, optional, False)


def range_problem(schema: type, values: Any, prefix: str = "") -> str | None:
    """The first value outside its declared range, as one line; None when all are inside.

    ``values``: an instance of ``schema`` or a plain mapping shaped like it (e.g. OmegaConf.to_container of a merged
    structured config). Values of the wrong type are left alone: the typed schema reports those."""
    hints = _hints(schema)
    for f in dataclasses.fields(schema):
        value = values.get(f.name) if isinstance(values, Mapping) else getattr(values, f.name, None)
        if value is None:
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp, optional = _unwrap(hints[f.name])
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            problem = range_problem(tp, value, key)
            if problem:
                return problem
            continue
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            return f"{key}={value!r} is not one of: {', '.join(choices)}"
        rng: Range | None = f.metadata.get("range")
        if rng is None:
            continue
        if isinstance(value, (list, tuple)):
            if rng.nonempty and not value:
                return f"{key}=[] is empty: list at least one value" + (f"; {rng.hint}" if rng.hint else "")
            for i, item in enumerate(value):
                problem = _value_problem(f"{key}[{i}]", item, rng, False)
                if problem:
                    return problem
        else:
            problem = _value_problem(key, value, rng, optional)
            if problem:
                return problem
    return None


def _value_problem(key: str, value: Any, rng: Range, optional: bool) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    rule = rng.rule() + (" (or null)" if optional else "") + (f"; {rng.hint}" if rng.hint else "")
    if isinstance(value, float) and not math.isfinite(value):
        return f"{key}={fmt(value)} is not a finite number: {rule}"
    if not rng.contains(value):
        return f"{key}={fmt(value)} is out of range: {rule}"
    return None

"""Sweep points from Hydra-style overrides: ``scheme=rope,alibi seed=0,1`` is the Cartesian product."""

from __future__ import annotations

import itertools

from pe_bench import schemes
from pe_bench.config import ConfigError


def expand(overrides: list[str]) -> list[list[str]]:
    """Override lists, one per point. Without a ``scheme=`` override, every registered scheme is swept."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors are several unrelated classes
        raise ConfigError(f"cannot parse overrides: {str(e).splitlines()[0]}") from None
    axes: list[list[str]] = []
    if not any(o.key_or_group == "scheme" for o in parsed):
        axes.append([f"scheme={name}" for name in schemes.available()])
    for o in parsed:
        if o.is_sweep_override():
            axes.append([f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([o.input_line])
    return [list(point) for point in itertools.product(*axes)]

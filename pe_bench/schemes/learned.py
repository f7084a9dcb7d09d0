"""Learned absolute positions: a trainable table P ∈ R^{L_max×d} added at the input (GPT-2 / nanoGPT ``wpe``).

The table has one row per position seen in training (the training length, or the range of randomized positions)
by definition, so positions past it have no embedding. What happens there is a
policy, recorded in the row label whenever it is not the default:
- ``na``     — refuse: the evaluator reports those lengths as not applicable, with the reason;
- ``clamp``  — reuse the last trained row for every later position;
- ``extend`` — a larger table whose extra rows were never trained (drawn from the same N(0, 0.02) init, seeded).

A fine-tune to a longer length starts from the parent's table and grows it (``finetune.new_positions``): ``extend``
appends the same seeded rows as the eval-time policy, ``interpolate`` resamples it as position interpolation does
for RoPE (Chen et al. 2023): row m of the new table is the parent's table at m·L/L', linearly interpolated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pe_bench.ranges import ranged
from pe_bench.schemes.base import LengthNotSupported, ModelShape, Scheme

POLICIES = ("na", "clamp", "extend")


@dataclass
class LearnedOptions:
    beyond_table: str = "na"  # one of POLICIES
    init_std: float = ranged(0.02, gt=0)
    extend_seed: int = ranged(1234, ge=0, le=2**63 - 1)

    def __post_init__(self) -> None:
        if self.beyond_table not in POLICIES:
            raise ValueError(f"scheme.beyond_table must be one of {', '.join(POLICIES)}, got {self.beyond_table!r}")


class Learned(Scheme):
    name = "learned"
    description = "trainable absolute position table sized to the training length (GPT-2 style)"
    citation = "Gehring et al. 2017, arXiv:1705.03122; Radford et al. 2019 (GPT-2)"
    acts_on = ("input",)
    Options = LearnedOptions
    hf_architecture = "gpt2"  # pe-bench export (pe_bench.pretrained.export)
    eval_options = ("beyond_table", "extend_seed")
    style = ("#9a6324", "D")
    variant_styles = {"learned[beyond_table=clamp]": (0.35, "dashed"), "learned[beyond_table=extend]": (-0.35, "dotted")}

    def __init__(self, options: LearnedOptions, shape: ModelShape) -> None:
        super().__init__(options, shape)
        self.table = nn.Parameter(torch.randn(shape.position_range, shape.d_model) * options.init_std)

    def _untrained_rows(self, n: int, like: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.options.extend_seed)
        rows = torch.randn(n, like.shape[1], generator=g) * self.options.init_std
        return rows.to(device=like.device, dtype=like.dtype)

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        rows = self.table.shape[0]
        if torch.compiler.is_compiling():  # reading the last position would break the graph; past the table an index
            return x + self.table[positions].to(x.dtype)  # fails loudly (inductor's bounds assertions)
        last = int(positions.max())
        table = self.table
        if last >= rows:
            policy = self.options.beyond_table
            if policy == "na":
                raise LengthNotSupported(
                    f"learned table has {rows} rows (the positions seen in training) but position {last} was asked for; "
                    "re-evaluate with scheme.beyond_table=clamp or extend"
                )
            if policy == "clamp":
                positions = positions.clamp(max=rows - 1)
            else:
                table = torch.cat([table, self._untrained_rows(last + 1 - rows, table)])
        return x + table[positions].to(x.dtype)

    def inherit(self, state: dict[str, torch.Tensor], prefix: str, how: str) -> None:
        key = prefix + "table"
        old = state.get(key)
        rows = self.table.shape[0]
        if old is None or old.shape[0] == rows:
            return
        if old.shape[0] > rows:
            raise ValueError(f"the parent's learned table has {old.shape[0]} rows, more than this run's {rows}: a "
                             "fine-tune cannot shorten it; fine-tune at a train.seq_len of at least the parent's")
        if how == "extend":
            state[key] = torch.cat([old, self._untrained_rows(rows - old.shape[0], old)])
        else:  # position interpolation: new row m = old table at m / s, s = rows / old rows
            src = torch.arange(rows, dtype=torch.float64) * (old.shape[0] / rows)
            lo = src.floor().long().clamp(max=old.shape[0] - 1)
            hi = (lo + 1).clamp(max=old.shape[0] - 1)
            w = (src - lo).to(old.dtype)[:, None]
            state[key] = old[lo] * (1 - w) + old[hi] * w

"""Multi-digit addition (Kazemnejad et al. 2023): ``BOS a₁…a_m MARK b₁…b_m SEP c₁…c_{m+1}`` with operands of as many
digits as the length holds; reverse_digits writes every number least-significant digit first (the known trick: each
sum digit then depends on digits already seen). abacus adds positions that count digits within each number (McLeish
et al. 2024; pe_bench.model.digits) to any scheme, with a random offset up to abacus_max_offset in training (half
the batches at offset 0 by default, a departure from the paper's uniform offsets: abacus_zero_share): the
literature's question, train on numbers of ≤ n digits and add numbers of 2n–8n digits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, DIGIT0, MARK, SEP, SYMBOL0, SyntheticOptions, SyntheticTask, TaskOptions

ABACUS_TABLE = 1024  # Abacus digit positions 0..1023 (the official code's max_seq_length; pe_bench.model.digits)

@dataclass
class AdditionOptions(SyntheticOptions):
    reverse_digits: bool = True  # operands and sum least-significant digit first
    abacus: bool = False  # Abacus digit positions (McLeish et al. 2024) added to the scheme's
    abacus_max_offset: int = ranged(100, ge=0, le=ABACUS_TABLE - 24,  # k uniform in [0, this] (the paper: 100)
                                    hint=f"the Abacus table holds {ABACUS_TABLE - 1} digit positions, offset included")
    abacus_zero_share: float = ranged(0.5, ge=0, le=1)  # a share of training batches at k = 0 (the paper: 0)


class Addition(SyntheticTask):
    name = "addition"
    description = "a + b = c, digits least-significant first by default"
    citation = "Kazemnejad et al. 2023"
    Options = AdditionOptions
    length_step = 3
    # RoPE: 0 % exact match at L from GPT-2's init (3000 steps, lr 3e-3); 96.8 % from model.init=fan_in at lr 1e-3.
    # NoPE and T5 learn it with Abacus positions and a curriculum over the digits in 10000 steps (its YAML)
    recipe = "task_xlong"
    model = "tiny_fan_in"

    @classmethod
    def options_problem(cls, options: AdditionOptions) -> str | None:  # type: ignore[override]
        defaults = AdditionOptions()
        for key in ("abacus_max_offset", "abacus_zero_share"):
            if getattr(options, key) != getattr(defaults, key) and not options.abacus:
                return f"task.{key} is read with task.abacus=true only; set task.abacus=true or remove it"
        if options.abacus and not options.reverse_digits:
            return ("task.abacus=true counts digits from each number's first token, which must be its least "
                    "significant digit; keep task.reverse_digits=true")
        return None

    @classmethod
    def identity(cls, keys: dict[str, Any]) -> dict[str, Any] | None:
        """Without Abacus digit positions, the identity of the time before they existed (the same run names)."""
        if keys.get("abacus"):
            return keys
        return {k: v for k, v in keys.items() if k not in ("abacus", "abacus_max_offset", "abacus_zero_share")}

    @classmethod
    def digit_positions(cls, options: TaskOptions) -> tuple[tuple[int, ...], int, float] | None:
        if not getattr(options, "abacus", False):
            return None
        return (tuple(range(DIGIT0, DIGIT0 + 10)), options.abacus_max_offset,  # type: ignore[attr-defined]
                options.abacus_zero_share)  # type: ignore[attr-defined]

    @property
    def vocab_size(self) -> int:
        return SYMBOL0

    def max_size(self, n: int) -> int:
        return (n - 3) // 3  # BOS + m + MARK + m + SEP + (m + 1) = n + 1

    def chance(self, n: int) -> float:
        return 10.0 ** -(self.max_size(n) + 1)

    def example(self, rng, size, depth, split):
        a, b = rng.integers(0, 10, size=size), rng.integers(0, 10, size=size)  # most-significant first
        total = int("".join(map(str, a))) + int("".join(map(str, b)))
        c = np.array([int(ch) for ch in str(total).zfill(size + 1)])
        if self.cfg.reverse_digits:
            a, b, c = a[::-1], b[::-1], c[::-1]
        tokens = [BOS, *(DIGIT0 + a), MARK, *(DIGIT0 + b), SEP, *(DIGIT0 + c)]
        answer = [False] * (2 * size + 3) + [True] * (size + 1)
        return tokens, answer, np.concatenate([a, b]).astype(np.uint8).tobytes()

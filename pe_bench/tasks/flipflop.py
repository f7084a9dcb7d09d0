"""Flip-flop language (Liu et al. 2023, "Exposing Attention Glitches with Flip-Flop Language Modeling"):
``BOS w b i b … r b`` — instructions write, ignore or read, each followed by a bit; a read's bit is the last written
one, however far back. FFL(p): each instruction after the first (a write) is an ignore with probability p, else a
write or a read alike; the last is a read, so every example asks at least once. Every read's bit is scored; exact
match is every read of an example right (the paper's glitch rate is its complement). As in the paper, a run is also
scored on sparse FFL(0.98) and dense FFL(0.1) sequences (rows ``flipflop[ignore_prob=0.98]`` and ``…=0.1]``):
long-range reads and many reads in a row, out of the training distribution."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, DIGIT0, SYMBOL0, SyntheticOptions, SyntheticTask

WRITE, IGNORE, READ = 0, 1, 2  # instruction tokens SYMBOL0 + 0..2
SPARSE, DENSE = 0.98, 0.1  # the paper's out-of-distribution ignore probabilities (FFL(0.98), FFL(0.1))


@dataclass
class FlipFlopOptions(SyntheticOptions):
    # p of FFL(p): the paper trains at 0.8 and tests sparse (0.98) and dense (0.1) sequences as well
    ignore_prob: float = ranged(0.8, ge=0, lt=1)


class FlipFlop(SyntheticTask):
    name = "flipflop"
    description = "write/ignore/read instructions with bits; each read returns the last written bit"
    citation = "Liu et al. 2023, arXiv:2306.00946"
    Options = FlipFlopOptions
    recipe = "task_low_lr"  # ALiBi: 67.0 % exact match at L at lr 3e-3 (loss stuck near 0.2), 100 % at 1e-3
    length_step = 2
    min_size = 2  # a write, then a read

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + 3

    def max_size(self, n: int) -> int:
        return n // 2  # BOS + 2 tokens per instruction = n + 1

    def chance(self, n: int) -> float:
        # a guessed bit per read, each right with probability 1/2; the first instruction is a write, the last a
        # read, each of the others a read with probability (1 - p)/2: E[2^-reads]
        p_read = (1 - self.cfg.ignore_prob) / 2
        return 0.5 * (1 - p_read / 2) ** (self.max_size(n) - 2)

    def eval_variants(self) -> list[tuple[str, SyntheticTask]]:
        return [(f"{self.name}[ignore_prob={p:g}]", FlipFlop(replace(self.cfg, ignore_prob=p)))
                for p in (SPARSE, DENSE) if p != self.cfg.ignore_prob]

    def example(self, rng, size, depth, split):
        p = self.cfg.ignore_prob
        kinds = rng.choice(3, size=size, p=[(1 - p) / 2, p, (1 - p) / 2])
        kinds[0], kinds[-1] = WRITE, READ
        bits = rng.integers(0, 2, size=size)
        tokens, answer, last = [BOS], [False], 0
        for kind, bit in zip(kinds.tolist(), bits.tolist()):
            if kind == WRITE:
                last = bit
            tokens += [SYMBOL0 + kind, DIGIT0 + (last if kind == READ else bit)]
            answer += [False, kind == READ]
        return tokens, answer, np.asarray(tokens, dtype=np.uint8).tobytes()

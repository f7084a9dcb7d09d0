"""Counting (after Chang & Bisk 2025, "Language Models Need Inductive Biases to Count Inductively", ICLR 2025,
arXiv:2405.20131): ``BOS s₁…s_m SEP q c₁…c_D`` — a random string over an alphabet of ``symbols`` letters, then one
letter q; the answer is how many times q occurs in the string, in count_digits decimal digits, zero-padded and least
significant first by default (reverse_digits, as addition's known trick: the digit that varies at L is then read at the
asked letter itself, where one head matching q against the string finds it). The paper's tasks label every position with
a running count (same-symbol counting: the position; selective counting: the occurrences of the current letter so far;
modular variants); this is selective counting asked once, at the end, the form a decoder scored by exact match on its
final answer takes. The paper writes a count as one token, so counts above those of training are untrained tokens (its
OOD-vocabulary problem); decimal digits are all seen in training. The count necessarily grows with the length (about m /
symbols): held-out examples at 2L…8L ask for counts larger than any seen in training, and that is part of what the task
measures (the paper's inductive counting: train short, test long, count further). Counts above 10^count_digits - 1 are
refused, naming the option."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, DIGIT0, MAX_SYMBOLS, SEP, SYMBOL0, SyntheticOptions, SyntheticTask, TaskLengthError


@dataclass
class CountingOptions(SyntheticOptions):
    symbols: int = ranged(16, ge=2, le=MAX_SYMBOLS)  # the string alphabet
    count_digits: int = ranged(3, ge=1)  # digits of the answer (counts up to 10^count_digits - 1)
    reverse_digits: bool = True  # the count least significant digit first


class Counting(SyntheticTask):
    name = "counting"
    description = "a random string, then one of its letters; how many times that letter occurs, in digits"
    citation = "Chang & Bisk 2025, arXiv:2405.20131"
    Options = CountingOptions
    recipe = "task_long"  # lr 1e-3, 5000 steps: 33 % exact match at L at 3e-3; 90.5–97.5 % after 3000 at 1e-3
    model = "tiny_fan_in"  # ALiBi: 90.0 % at L from GPT-2's init, 100 % from fan_in (TUNING.md, fourth sitting)

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.symbols

    def max_size(self, n: int) -> int:
        return n - 2 - self.cfg.count_digits  # BOS + m + SEP + q + D = n + 1

    def chance(self, n: int) -> float:
        return 1.0 / (self.max_size(n) + 1)  # a count in 0..m

    def check_length(self, n: int) -> None:
        super().check_length(n)
        problem = self.length_problem(n)
        if problem:
            raise TaskLengthError(problem)

    def length_problem(self, longest: int) -> str | None:
        m = self.max_size(longest)
        if m < 10**self.cfg.count_digits:
            return None
        return (f"task.count_digits={self.cfg.count_digits} is too few for task=counting at length {longest}: its "
                f"strings of {m} letters can hold a count of {m}; raise task.count_digits to at least {len(str(m))}, "
                "or use shorter lengths")

    def example(self, rng, size, depth, split):
        c = self.cfg
        string = rng.integers(0, c.symbols, size=size)
        q = int(rng.integers(0, c.symbols))
        count = str(int(np.sum(string == q)))
        if len(count) > c.count_digits:
            raise TaskLengthError(f"a count of {count} needs more than task.count_digits={c.count_digits} digits; "
                                  "raise task.count_digits")
        tokens = [BOS, *(SYMBOL0 + string).tolist(), SEP, SYMBOL0 + q]
        question = np.asarray(tokens, dtype=np.uint16).tobytes()
        answer = [False] * len(tokens) + [True] * c.count_digits
        digits = count.zfill(c.count_digits)[:: -1 if c.reverse_digits else 1]
        return tokens + [DIGIT0 + int(d) for d in digits], answer, question

"""Variable tracking (RULER's vt; Hsieh et al. 2024, arXiv:2404.06654): ``BOS f…f MARK x₁ d…d f…f MARK x₂ x₁ f…f …
MARK x_{h+1} x_h f…f SEP d…d x₁ x₂ … x_{h+1}`` — chains of assignments scattered in random filler: a chain binds its
first variable to a value of value_digits digits (``MARK x₁ d…d``: x₁ = d…d) and each of ``hops`` further variables
to the one before (``MARK x₂ x₁``: x₂ = x₁). The question at the end gives the value of the first chain, the answer
is every variable bound to it, in chain order. As in RULER, a chain's statements appear in order, the chains are
interleaved at random, the other chains (distractors) have other values, and the variables of an example are
distinct; names are single tokens where RULER uses 5-letter words. RULER's default is one chain of 4 hops; with one
chain the answer is every variable of the example, which needs no tracking, so the default here is 2 chains of 2
hops (2 chains of 4 hops do not fit L = 32). The filler grows with the length."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, DIGIT0, MARK, MAX_SYMBOLS, SEP, SYMBOL0, SyntheticOptions, SyntheticTask, scatter


@dataclass
class VariableTrackingOptions(SyntheticOptions):
    symbols: int = ranged(16, ge=2, le=MAX_SYMBOLS)  # the filler alphabet
    hops: int = ranged(2, ge=1)  # variable-to-variable assignments per chain (hops + 1 variables)
    chains: int = ranged(2, ge=1)  # chains per example: the asked one and chains - 1 distractors
    variable_names: int = ranged(32, ge=2)  # name vocabulary (the variables of an example are distinct)
    value_digits: int = ranged(2, ge=1)  # digits of a chain's value


class VariableTracking(SyntheticTask):
    name = "variable_tracking"
    description = "chains of assignments x2 = x1 = value in filler; every variable bound to the asked value"
    citation = "Hsieh et al. 2024, arXiv:2404.06654 (RULER, variable tracking)"
    Options = VariableTrackingOptions
    min_size = 0  # statements and question only
    # Still learning after 3000 steps at lr 1e-3 from fan_in (RoPE: 35.5 % exact match at L, validation loss falling):
    # 10000 steps (results/tasks/TUNING.md, fourth sitting)
    recipe = "task_xlong"
    model = "tiny_fan_in"

    @classmethod
    def options_problem(cls, options: VariableTrackingOptions) -> str | None:  # type: ignore[override]
        names = options.chains * (options.hops + 1)
        if options.variable_names < names:
            return (f"task.variable_names={options.variable_names} is too few for task.chains={options.chains} × "
                    f"(task.hops={options.hops} + 1) = {names} distinct variables; raise task.variable_names")
        if options.chains > 10**options.value_digits:
            return (f"task.chains={options.chains} needs distinct values, more than task.value_digits="
                    f"{options.value_digits} digits give; raise task.value_digits")
        return None

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.symbols + self.cfg.variable_names

    def statement_tokens(self) -> int:
        """Tokens of one chain: MARK x₁ d…d, then MARK x_j x_{j-1} per hop."""
        return 2 + self.cfg.value_digits + 3 * self.cfg.hops

    def max_size(self, n: int) -> int:
        # BOS + filler + chains × statements + SEP + D + (hops + 1) = n + 1
        c = self.cfg
        return n - 2 - c.value_digits - c.hops - c.chains * self.statement_tokens()

    def chance(self, n: int) -> float:
        return float(self.cfg.variable_names) ** -(self.cfg.hops + 1)

    def _values(self, rng: np.random.Generator) -> list[list[int]]:
        """Distinct values, one per chain, as digit tokens."""
        values: list[list[int]] = []
        while len(values) < self.cfg.chains:
            v = (DIGIT0 + rng.integers(0, 10, size=self.cfg.value_digits)).tolist()
            if v not in values:
                values.append(v)
        return values

    def example(self, rng, size, depth, split):
        c = self.cfg
        drawn = rng.choice(c.variable_names, size=c.chains * (c.hops + 1), replace=False)
        names = (SYMBOL0 + c.symbols + drawn).reshape(c.chains, c.hops + 1).tolist()
        values = self._values(rng)
        statements, done = [], [0] * c.chains
        for chain in rng.permutation(np.repeat(np.arange(c.chains), c.hops + 1)).tolist():
            j = done[chain]
            bound = values[chain] if j == 0 else [names[chain][j - 1]]
            statements.append([MARK, names[chain][j], *bound])
            done[chain] += 1
        filler = SYMBOL0 + rng.integers(0, c.symbols, size=size)
        tokens = [BOS, *scatter(rng, filler, statements), SEP, *values[0]]
        question = np.asarray(tokens, dtype=np.uint16).tobytes()
        answer = [False] * len(tokens) + [True] * (c.hops + 1)
        return tokens + names[0], answer, question

"""Multi-query associative recall (Arora et al. 2023, Zoology's MQAR): ``BOS k₁ v₁ … k_P v_P SEP q₁ a₁ … q_Q a_Q`` —
key-value pairs, then Q of the keys, each answered by its value. The number of pairs grows with the length; keys are
distinct within an example."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, SEP, SYMBOL0, SyntheticOptions, SyntheticTask, TaskLengthError


@dataclass
class AssocRecallOptions(SyntheticOptions):
    n_keys: int = ranged(512, ge=2)  # key vocabulary (keys are distinct within an example)
    n_values: int = ranged(64, ge=2)  # value vocabulary
    queries: int = ranged(4, ge=1)  # queried keys per example


class AssocRecall(SyntheticTask):
    name = "assoc_recall"
    description = "key-value pairs, then some of the keys, each answered by its value"
    citation = "Arora et al. 2023 (Zoology, MQAR)"
    Options = AssocRecallOptions
    length_step = 2
    # Binding a key to its value needs an induction head: from GPT-2's init the tiny model stayed at 0 % exact match
    # at L whatever the budget (3000-15000 steps) or rate; from model.init=fan_in at lr 1e-3 RoPE reached 100 % in 3000
    # steps, and NoPE and T5 only with a curriculum over the pairs (its YAML) and 10000 steps
    recipe = "task_xlong"
    model = "tiny_fan_in"

    def __init__(self, cfg: AssocRecallOptions, text: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(cfg)
        self.min_size = cfg.queries  # at least as many pairs as queries (queried keys are distinct)

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.n_keys + self.cfg.n_values

    def max_size(self, n: int) -> int:
        return (n - 1 - 2 * self.cfg.queries) // 2  # BOS + 2P + SEP + 2Q = n + 1

    def chance(self, n: int) -> float:
        return float(self.cfg.n_values) ** -self.cfg.queries

    def check_length(self, n: int) -> None:
        super().check_length(n)
        if self.max_size(n) > self.cfg.n_keys:
            raise TaskLengthError(f"length {n} holds {self.max_size(n)} pairs, more than task.n_keys="
                                  f"{self.cfg.n_keys} distinct keys; raise task.n_keys")

    def length_problem(self, longest: int) -> str | None:
        pairs = self.max_size(longest)
        if pairs <= self.cfg.n_keys:
            return None
        return (f"task.n_keys={self.cfg.n_keys} is too few for task=assoc_recall at length {longest}: its examples "
                f"hold {pairs} key-value pairs with distinct keys; raise task.n_keys to at least {pairs}, or use "
                "shorter lengths")

    def example(self, rng, size, depth, split):
        p = size
        if p > self.cfg.n_keys:
            raise TaskLengthError(f"{p} pairs need more than task.n_keys={self.cfg.n_keys} distinct keys; raise "
                                  "task.n_keys")
        keys = rng.choice(self.cfg.n_keys, size=p, replace=False)
        values = rng.integers(0, self.cfg.n_values, size=p)
        asked = rng.choice(p, size=self.cfg.queries, replace=False)
        k_tok, v_tok = SYMBOL0 + keys, SYMBOL0 + self.cfg.n_keys + values
        tokens = [BOS, *np.stack([k_tok, v_tok], 1).ravel(), SEP]
        answer = [False] * len(tokens)
        for i in asked:
            tokens += [k_tok[i], v_tok[i]]
            answer += [False, True]
        question = np.concatenate([keys, values, asked]).astype(np.int32).tobytes()
        return tokens, answer, question

"""Multi-value needle in a haystack (RULER's niah_multivalue; Hsieh et al. 2024, arXiv:2404.06654):
``BOS f…f MARK k v₁…v₁ f…f MARK k v₂…v₂ … f…f SEP k v₁…v₁ v₂…v₂ …`` — one key with ``needles`` values (value_digits
digits each), each in its own needle ``MARK key value`` at a random depth in random filler; the question at the end
names the key, the answer is all its values in their order of appearance (RULER scores the values as a set; an order
makes exact match over the answer tokens well defined). As in RULER, the key is the only one in the haystack. The key
is a single token where RULER uses a word; the filler is random symbols (passkey's filler) and grows with the
length."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, DIGIT0, MARK, MAX_SYMBOLS, SEP, SYMBOL0, SyntheticOptions, SyntheticTask, scatter


@dataclass
class NeedleMultivalueOptions(SyntheticOptions):
    symbols: int = ranged(16, ge=2, le=MAX_SYMBOLS)  # the filler alphabet
    needles: int = ranged(4, ge=1)  # needles in the haystack: the key's values
    needle_keys: int = ranged(32, ge=2)  # key vocabulary
    value_digits: int = ranged(2, ge=1)  # digits of a needle's value


class NeedleMultivalue(SyntheticTask):
    name = "needle_multivalue"
    description = "one key with several digit values in filler; all its values asked for at the end, in order"
    citation = "Hsieh et al. 2024, arXiv:2404.06654 (RULER, niah_multivalue)"
    Options = NeedleMultivalueOptions
    min_size = 0  # needles and question only

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.symbols + self.cfg.needle_keys

    def max_size(self, n: int) -> int:
        # BOS + filler + needles × (MARK + key + D) + SEP + key + needles × D = n + 1
        return n - 2 - self.cfg.needles * (2 + 2 * self.cfg.value_digits)

    def chance(self, n: int) -> float:
        return 10.0 ** -(self.cfg.needles * self.cfg.value_digits)

    def example(self, rng, size, depth, split):
        c = self.cfg
        key = SYMBOL0 + c.symbols + int(rng.integers(0, c.needle_keys))
        values = (DIGIT0 + rng.integers(0, 10, size=(c.needles, c.value_digits))).tolist()
        filler = SYMBOL0 + rng.integers(0, c.symbols, size=size)
        tokens = [BOS, *scatter(rng, filler, [[MARK, key, *v] for v in values]), SEP, key]
        question = np.asarray(tokens, dtype=np.uint16).tobytes()
        answer = [False] * len(tokens) + [True] * (c.needles * c.value_digits)
        return tokens + [d for v in values for d in v], answer, question

"""Multi-key needle in a haystack (RULER's niah_multikey; Hsieh et al. 2024, arXiv:2404.06654):
``BOS f…f MARK k₁ v…v f…f MARK k₂ v…v … f…f SEP k v…v`` — needles ``MARK key value`` (a key token, a value of
value_digits digits) at random depths in random filler, each with its own key; the question at the end names one of
the keys, the answer is its value. The other needles are distractors (RULER's multikey_1 hides 4 keys). Keys are
single tokens where RULER uses words, values digits as its numbers; the filler is random symbols (passkey's filler)
and grows with the length. Keys are distinct within an example, so every question has one answer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, DIGIT0, MARK, MAX_SYMBOLS, SEP, SYMBOL0, SyntheticOptions, SyntheticTask, scatter


@dataclass
class NeedleMultikeyOptions(SyntheticOptions):
    symbols: int = ranged(16, ge=2, le=MAX_SYMBOLS)  # the filler alphabet
    needles: int = ranged(4, ge=1)  # needles in the haystack
    needle_keys: int = ranged(32, ge=2)  # key vocabulary (distinct keys within an example)
    value_digits: int = ranged(2, ge=1)  # digits of a needle's value


class NeedleMultikey(SyntheticTask):
    name = "needle_multikey"
    description = "needles with distinct keys and digit values in filler; the value of one key asked for at the end"
    citation = "Hsieh et al. 2024, arXiv:2404.06654 (RULER, niah_multikey)"
    Options = NeedleMultikeyOptions
    min_size = 0  # needles and question only
    # the asked key's value among distractor keys is a binding (an induction head): 16 % exact match at L from GPT-2's
    # init at lr 1e-3 in 3000 steps, 100 % from model.init=fan_in
    recipe = "task_low_lr"
    model = "tiny_fan_in"

    @classmethod
    def options_problem(cls, options: NeedleMultikeyOptions) -> str | None:  # type: ignore[override]
        if options.needle_keys < options.needles:
            return (f"task.needle_keys={options.needle_keys} is fewer than task.needles={options.needles} (the keys "
                    "of an example are distinct); raise task.needle_keys")
        return None

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.symbols + self.cfg.needle_keys

    def max_size(self, n: int) -> int:
        # BOS + filler + needles × (MARK + key + D) + SEP + key + D = n + 1
        d = self.cfg.value_digits
        return n - 2 - self.cfg.needles * (2 + d) - d

    def chance(self, n: int) -> float:
        return 10.0 ** -self.cfg.value_digits

    def candidates(self, x, y, mask):
        """Every needle's value (the tokens after ``MARK key``): naming one of them at random is right one time in
        ``needles`` without binding the asked key to its value."""
        d = self.cfg.value_digits
        return [tuple(x[i + 2 : i + 2 + d].tolist()) for i in np.flatnonzero(x == MARK) if i + 2 + d <= len(x)]

    def example(self, rng, size, depth, split):
        c = self.cfg
        keys = SYMBOL0 + c.symbols + rng.choice(c.needle_keys, size=c.needles, replace=False)
        values = DIGIT0 + rng.integers(0, 10, size=(c.needles, c.value_digits))
        filler = SYMBOL0 + rng.integers(0, c.symbols, size=size)
        needles = [[MARK, int(k), *v.tolist()] for k, v in zip(keys, values)]
        asked = int(rng.integers(0, c.needles))
        tokens = [BOS, *scatter(rng, filler, needles), SEP, int(keys[asked])]
        question = np.asarray(tokens, dtype=np.uint16).tobytes()
        tokens += values[asked].tolist()
        answer = [False] * (len(tokens) - c.value_digits) + [True] * c.value_digits
        return tokens, answer, question

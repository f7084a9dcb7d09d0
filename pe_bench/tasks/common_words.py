"""Common words extraction (RULER's cwe, an aggregation task; Hsieh et al. 2024, arXiv:2404.06654):
``BOS w…w SEP c₁ … c_K`` — a shuffled list of words in which common_words words appear common_freq times each and
every other word uncommon_freq times; the answer is the common words in ascending token order (RULER scores them as a
set; an order makes exact match over the answer tokens well defined). The number of uncommon words grows with the
length, the common ones stay; words are distinct single tokens of a word_vocab vocabulary where RULER draws English
words. RULER lists 10 common words 30 times and the others 3 times (6 and 1 below 4k tokens); 3 words 3 times and the
others once fit L = 32 (with the others once, a common word is any word that repeats). An example at length n holds
common_words + max_size(n) distinct words: longer lengths are refused, naming task.word_vocab."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pe_bench.ranges import ranged
from pe_bench.tasks.base import BOS, SEP, SYMBOL0, SyntheticOptions, SyntheticTask, TaskLengthError


@dataclass
class CommonWordsOptions(SyntheticOptions):
    common_words: int = ranged(3, ge=1)  # words to find
    common_freq: int = ranged(3, ge=2)  # occurrences of each common word
    uncommon_freq: int = ranged(1, ge=1)  # occurrences of each other word
    word_vocab: int = ranged(256, ge=2)  # word vocabulary (the words of an example are distinct)


class CommonWords(SyntheticTask):
    name = "common_words"
    description = "a list of words, a few of them repeated more often; those common words asked for at the end"
    citation = "Hsieh et al. 2024, arXiv:2404.06654 (RULER, common words extraction)"
    Options = CommonWordsOptions
    min_size = 0  # the common words only
    # Still learning after 3000 steps at lr 1e-3 from fan_in (RoPE: 72.8 % exact match at L, validation loss falling):
    # 10000 steps (results/tasks/TUNING.md, fourth sitting), on lists that fill L (its YAML; seventh sitting)
    recipe = "task_xlong"
    model = "tiny_fan_in"

    def __init__(self, cfg: CommonWordsOptions, text: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(cfg)
        self.length_step = cfg.uncommon_freq  # tokens one more uncommon word adds

    @classmethod
    def options_problem(cls, options: CommonWordsOptions) -> str | None:  # type: ignore[override]
        if options.common_freq <= options.uncommon_freq:
            return (f"task.common_freq={options.common_freq} must be above task.uncommon_freq="
                    f"{options.uncommon_freq}: the common words are the ones that appear more often")
        if options.word_vocab < options.common_words:
            return (f"task.word_vocab={options.word_vocab} is fewer than task.common_words={options.common_words}; "
                    "raise task.word_vocab")
        return None

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.word_vocab

    def max_size(self, n: int) -> int:
        # BOS + K × common_freq + size × uncommon_freq + SEP + K = n + 1
        c = self.cfg
        return (n - 1 - c.common_words * (c.common_freq + 1)) // c.uncommon_freq

    def chance(self, n: int) -> float:
        return 1.0 / math.comb(self.cfg.word_vocab, self.cfg.common_words)

    def words_needed(self, n: int) -> int:
        return self.cfg.common_words + self.max_size(n)

    def check_length(self, n: int) -> None:
        super().check_length(n)
        if self.words_needed(n) > self.cfg.word_vocab:
            raise TaskLengthError(f"length {n} holds {self.words_needed(n)} distinct words, more than "
                                  f"task.word_vocab={self.cfg.word_vocab}; raise task.word_vocab")

    def length_problem(self, longest: int) -> str | None:
        needed = self.words_needed(longest)
        if needed <= self.cfg.word_vocab:
            return None
        return (f"task.word_vocab={self.cfg.word_vocab} is too few for task=common_words at length {longest}: its "
                f"examples hold {needed} distinct words; raise task.word_vocab to at least {needed}, or use shorter "
                "lengths")

    def example(self, rng, size, depth, split):
        c = self.cfg
        if c.common_words + size > c.word_vocab:
            raise TaskLengthError(f"{c.common_words + size} distinct words need more than task.word_vocab="
                                  f"{c.word_vocab}; raise task.word_vocab")
        words = SYMBOL0 + rng.choice(c.word_vocab, size=c.common_words + size, replace=False)
        common, uncommon = words[: c.common_words], words[c.common_words :]
        listed = rng.permutation(np.concatenate([np.repeat(common, c.common_freq),
                                                 np.repeat(uncommon, c.uncommon_freq)]))
        tokens = [BOS, *listed.tolist(), SEP]
        question = np.asarray(tokens, dtype=np.uint16).tobytes()
        answer = [False] * len(tokens) + [True] * c.common_words
        return tokens + sorted(common.tolist()), answer, question

"""Passkey retrieval (Mohtashami & Jaggi 2023): ``BOS f…f MARK d₁…d_K f…f SEP d₁…d_K`` — a key of K digits hidden at
a depth in the filler, asked for at the end. Exact match by eval length × depth."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pe_bench.errors import ConfigError
from pe_bench.ranges import chosen, ranged
from pe_bench.tasks.base import (
    BOS,
    DIGIT0,
    MARK,
    MAX_SYMBOLS,
    SEP,
    SYMBOL0,
    SyntheticOptions,
    SyntheticTask,
    TaskLengthError,
)


@dataclass
class PasskeyOptions(SyntheticOptions):
    symbols: int = ranged(16, ge=2, le=MAX_SYMBOLS)  # the filler alphabet (filler=random)
    key_digits: int = ranged(5, ge=1)  # digits of the key
    filler: str = chosen("random", "text")  # random: symbols; text: bytes of the data split (data.* picks the corpus)
    depths: int = ranged(11, ge=1)  # evaluated depths, evenly spaced in [0, 1] (11: 10 % steps)


class Passkey(SyntheticTask):
    name = "passkey"
    description = "a key of digits hidden at a depth in filler, asked for at the end"
    citation = "Mohtashami & Jaggi 2023"
    Options = PasskeyOptions
    min_size = 0  # no filler at all is a valid (trivial) example

    def __init__(self, cfg: PasskeyOptions, text: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(cfg)
        if cfg.filler == "text" and not text:
            raise ConfigError("task.filler=text needs the corpus's tokens (data=...)")
        self.filler_text = text or {}

    @classmethod
    def options_problem(cls, options: PasskeyOptions) -> str | None:  # type: ignore[override]
        if options.filler == "text" and options.symbols != PasskeyOptions().symbols:
            return ("task.symbols is not read by task.filler=text (the filler is the corpus's bytes); remove it or "
                    "use task.filler=random")
        return None

    @classmethod
    def reads_corpus(cls, options: PasskeyOptions) -> bool:  # type: ignore[override]
        return options.filler == "text"

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + (256 if self.cfg.filler == "text" else self.cfg.symbols)

    def max_size(self, n: int) -> int:
        # BOS + filler + MARK + K digits + SEP + K digits = n + 1
        return n - 2 * self.cfg.key_digits - 2

    def chance(self, n: int) -> float:
        return 10.0 ** -self.cfg.key_digits

    def _filler(self, rng: np.random.Generator, m: int, split: str) -> np.ndarray:
        if self.cfg.filler == "random":
            return SYMBOL0 + rng.integers(0, self.cfg.symbols, size=m)
        text = self.filler_text["train" if split == "train" else "validation"]
        if len(text) <= m:
            raise TaskLengthError(f"the corpus split holds {len(text)} tokens, fewer than a filler of {m}")
        start = int(rng.integers(0, len(text) - m))
        return SYMBOL0 + np.asarray(text[start : start + m], dtype=np.int64)

    def example(self, rng, size, depth, split):
        key = rng.integers(0, 10, size=self.cfg.key_digits)
        filler = self._filler(rng, size, split)
        at = round(depth * size)
        keyed = [MARK, *(DIGIT0 + key)]
        tokens = [BOS, *filler[:at], *keyed, *filler[at:], SEP, *(DIGIT0 + key)]
        answer = [False] * (len(tokens) - len(key)) + [True] * len(key)
        return tokens, answer, key.astype(np.uint8).tobytes()

    def eval_depths(self) -> list[float | None]:
        k = self.cfg.depths
        return [0.5] if k == 1 else [round(i / (k - 1), 4) for i in range(k)]

"""Synthetic tasks: does the model *use* the long context? Token sequences with a loss mask that scores only the
answer, exact-match accuracy on held-out examples at L…8L.

Every example is a token sequence ``s`` (at most n + 1 tokens for an input of length n) and a flag per token saying
whether it is part of the answer. The model reads ``x = s[:-1]`` and is scored on ``y = s[1:]`` where the flag of
``y`` is set; shorter examples are padded at the end (PAD, never scored, never seen by an earlier token).

- ``passkey``      BOS f…f MARK d₁…d_K f…f SEP d₁…d_K         the key hidden at a depth in the filler
- ``assoc_recall`` BOS k₁ v₁ … k_P v_P SEP q₁ a₁ … q_Q a_Q    values of Q of the P keys (Zoology's MQAR)
- ``copy``         BOS a₁…a_k SEP a₁…a_k
- ``reverse``      BOS a₁…a_k SEP a_k…a₁
- ``addition``     BOS a₁…a_m MARK b₁…b_m SEP c₁…c_{m+1}     (digits least-significant first with reverse_digits)

An example's *size* (filler length, pairs, string length, digits) is what grows with the length: ``max_size(n)`` fills
an input of n tokens. Evaluation examples fill their length; training examples draw their size up to what fills L.

Held-out examples are disjoint from training by construction: an example's question (the key, the pairs, the string,
the operands) hashes to a bucket; bucket 0 of ``HELDOUT_BUCKETS`` is evaluation only, the others training only.
Sampling is a pure function of its seed (``numpy.random.Generator``), so batches are a pure function of
(seed, step) and a resumed run sees the same data.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from pe_bench.errors import ConfigError
from pe_bench.ranges import ranged

if TYPE_CHECKING:  # torch is imported where tensors are made: the config checks use this module without it
    import torch

PAD, BOS, SEP, MARK = 0, 1, 2, 3
DIGIT0 = 4  # digits 0-9 are tokens 4..13
SYMBOL0 = DIGIT0 + 10  # each task's own symbols start here
HELDOUT_BUCKETS = 10
EVAL_SEED = 20231  # the held-out sets: the same for every run, seed and scheme (paired comparisons)
MAX_TRIES = 1000


@dataclass
class TaskConfig:
    """What the model is trained and evaluated on: ``lm`` (next-token prediction on the corpus, perplexity) or a
    synthetic task (this module: exact-match accuracy on held-out examples). Each task reads the keys listed in
    ``TASK_READS``; any other key set away from its default is refused."""

    name: str = "lm"  # lm | passkey | assoc_recall | copy | reverse | addition
    # Training examples: each one's size drawn uniformly up to what fills L (uniform), with that bound growing
    # linearly from the smallest size to L's over the first curriculum_fraction of the steps (curriculum), or
    # always filling L (fixed). Examples shorter than L are padded at the end (never scored).
    train_lengths: str = "uniform"  # uniform | curriculum | fixed
    curriculum_fraction: float = ranged(0.5, gt=0, le=1)
    eval_examples: int = ranged(100, ge=1)  # held-out examples per eval length (passkey: per length × depth)
    symbols: int = ranged(16, ge=2)  # copy, reverse: the string alphabet; passkey (filler=random): filler alphabet
    key_digits: int = ranged(5, ge=1)  # passkey: digits of the key
    filler: str = "random"  # passkey: random (symbols) | text (bytes of the data split: data.* picks the corpus)
    depths: int = ranged(11, ge=1)  # passkey: evaluated depths, evenly spaced in [0, 1] (11: 10 % steps)
    n_keys: int = ranged(512, ge=2)  # assoc_recall: key vocabulary (keys are distinct within an example)
    n_values: int = ranged(64, ge=2)  # assoc_recall: value vocabulary
    queries: int = ranged(4, ge=1)  # assoc_recall: queried keys per example
    reverse_digits: bool = True  # addition: operands and sum least-significant digit first (the known trick)


# The task keys each task reads: any other key set away from its default is refused (pe_bench.config).
_TASK_COMMON = {"train_lengths", "curriculum_fraction", "eval_examples"}
TASK_READS = {
    "lm": set(),
    "passkey": _TASK_COMMON | {"symbols", "key_digits", "filler", "depths"},
    "assoc_recall": _TASK_COMMON | {"n_keys", "n_values", "queries"},
    "copy": _TASK_COMMON | {"symbols"},
    "reverse": _TASK_COMMON | {"symbols"},
    "addition": _TASK_COMMON | {"reverse_digits"},
}


class TaskLengthError(ValueError):
    """The task cannot build an example of this length (too short for one, or more pairs than keys)."""


@dataclass
class Batch:
    """x, y: (B, T) int64 inputs and targets; mask: (B, T) bool, True where y is an answer token."""

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor


class Task:
    """A generator of examples. Subclasses set ``name`` and define ``vocab_size``, ``max_size``, ``min_size`` and
    ``example``."""

    name: ClassVar[str] = ""
    length_step: ClassVar[int] = 1  # tokens one more unit of size adds (a pair, a character, a digit per number)
    min_size: int = 1  # the smallest example size (assoc_recall: one pair per query)

    def __init__(self, cfg: TaskConfig) -> None:
        self.cfg = cfg

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def max_size(self, n: int) -> int:
        """The largest size whose example fits an input of n tokens."""
        raise NotImplementedError

    def example(self, rng: np.random.Generator, size: int, depth: float,
                split: str) -> tuple[list[int], list[bool], bytes]:
        """(tokens, answer flags, question bytes for the held-out hash) of one example of this size. ``depth`` in
        [0, 1] is read by passkey only; ``split`` (train | heldout) by a task whose filler comes from a corpus."""
        raise NotImplementedError

    # ---- shared machinery -----------------------------------------------------------------------------------
    def check_length(self, n: int) -> None:
        if self.max_size(n) < self.min_size:
            raise TaskLengthError(f"task={self.name} needs inputs of at least {self.min_length()} tokens, got {n}")

    def min_length(self) -> int:
        n = 1
        while self.max_size(n) < self.min_size:
            n += 1
        return n

    def filled_length(self, n: int) -> int:
        """The input length the examples at length n really fill (the rest is padding)."""
        m = n
        while m > 1 and self.max_size(m - 1) == self.max_size(n):
            m -= 1
        return m

    def draw(self, rng: np.random.Generator, size: int, depth: float, heldout: bool) -> tuple[list[int], list[bool]]:
        """One example from the held-out half (bucket 0) or the training half (the other buckets)."""
        split = "heldout" if heldout else "train"
        for _ in range(MAX_TRIES):
            tokens, answer, question = self.example(rng, size, depth, split)
            if (zlib.crc32(question) % HELDOUT_BUCKETS == 0) == heldout:
                return tokens, answer
        raise TaskLengthError(f"task={self.name}: no {split} example of size {size} in {MAX_TRIES} draws (too few "
                              "distinct questions of that size)")

    def collate(self, examples: list[tuple[list[int], list[bool]]], n: int) -> Batch:
        """Examples padded at the end to n + 1 tokens → x, y, mask of (B, n)."""
        import torch

        s = np.full((len(examples), n + 1), PAD, dtype=np.int64)
        a = np.zeros((len(examples), n + 1), dtype=bool)
        for i, (tokens, answer) in enumerate(examples):
            s[i, : len(tokens)] = tokens
            a[i, : len(answer)] = answer
        st, at = torch.from_numpy(s), torch.from_numpy(a)
        return Batch(st[:, :-1], st[:, 1:], at[:, 1:])

    def train_batch(self, rng: np.random.Generator, batch_size: int, n: int, progress: float = 1.0) -> Batch:
        """A training batch at length n: sizes drawn per task.train_lengths (``progress``: the fraction of training
        done, for the curriculum), depths uniform in [0, 1]."""
        top = self.max_size(n)
        lo, hi = self.min_size, top
        if self.cfg.train_lengths == "fixed":
            lo = top
        elif self.cfg.train_lengths == "curriculum":
            grown = min(1.0, progress / self.cfg.curriculum_fraction)
            hi = self.min_size + round(grown * (top - self.min_size))
        sizes = rng.integers(lo, hi + 1, size=batch_size)
        depths = rng.random(batch_size)
        return self.collate([self.draw(rng, int(k), float(d), heldout=False) for k, d in zip(sizes, depths)], n)

    def heldout_set(self, n: int, count: int, depth: float | None = None, seed: int = EVAL_SEED) -> Batch:
        """The fixed held-out examples at length n (each fills it), at one depth (None: a random depth each): the
        same for every run, seed and scheme."""
        self.check_length(n)
        rng = np.random.default_rng([seed, zlib.crc32(self.name.encode()), n, 1001 if depth is None
                                     else round(depth * 1000)])
        size = self.max_size(n)
        depths = rng.random(count) if depth is None else [depth] * count
        return self.collate([self.draw(rng, size, float(d), heldout=True) for d in depths], n)

    def eval_depths(self) -> list[float | None]:
        """The depths evaluated at each length (None: the task has no depth)."""
        return [None]


def _digits(rng: np.random.Generator, k: int) -> np.ndarray:
    return rng.integers(0, 10, size=k)


class Passkey(Task):
    name = "passkey"
    min_size = 0  # no filler at all is a valid (trivial) example

    def __init__(self, cfg: TaskConfig, filler_text: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(cfg)
        if cfg.filler == "text" and not filler_text:
            raise ConfigError("task.filler=text needs the corpus's tokens (data=...)")
        self.filler_text = filler_text or {}

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + (256 if self.cfg.filler == "text" else self.cfg.symbols)

    def max_size(self, n: int) -> int:
        # BOS + filler + MARK + K digits + SEP + K digits = n + 1
        return n - 2 * self.cfg.key_digits - 2

    def _filler(self, rng: np.random.Generator, m: int, split: str) -> np.ndarray:
        if self.cfg.filler == "random":
            return SYMBOL0 + rng.integers(0, self.cfg.symbols, size=m)
        text = self.filler_text["train" if split == "train" else "validation"]
        if len(text) <= m:
            raise TaskLengthError(f"the corpus split holds {len(text)} tokens, fewer than a filler of {m}")
        start = int(rng.integers(0, len(text) - m))
        return SYMBOL0 + np.asarray(text[start : start + m], dtype=np.int64)

    def example(self, rng, size, depth, split):
        key = _digits(rng, self.cfg.key_digits)
        filler = self._filler(rng, size, split)
        at = round(depth * size)
        keyed = [MARK, *(DIGIT0 + key)]
        tokens = [BOS, *filler[:at], *keyed, *filler[at:], SEP, *(DIGIT0 + key)]
        answer = [False] * (len(tokens) - len(key)) + [True] * len(key)
        return tokens, answer, key.astype(np.uint8).tobytes()

    def eval_depths(self) -> list[float | None]:
        k = self.cfg.depths
        return [0.5] if k == 1 else [round(i / (k - 1), 4) for i in range(k)]


class AssocRecall(Task):
    name = "assoc_recall"
    length_step = 2

    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__(cfg)
        self.min_size = cfg.queries  # at least as many pairs as queries (queried keys are distinct)

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.n_keys + self.cfg.n_values

    def max_size(self, n: int) -> int:
        return (n - 1 - 2 * self.cfg.queries) // 2  # BOS + 2P + SEP + 2Q = n + 1

    def check_length(self, n: int) -> None:
        super().check_length(n)
        if self.max_size(n) > self.cfg.n_keys:
            raise TaskLengthError(f"length {n} holds {self.max_size(n)} pairs, more than task.n_keys="
                                  f"{self.cfg.n_keys} distinct keys; raise task.n_keys")

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


class Copy(Task):
    name = "copy"
    length_step = 2

    @property
    def vocab_size(self) -> int:
        return SYMBOL0 + self.cfg.symbols

    def max_size(self, n: int) -> int:
        return (n - 1) // 2  # BOS + k + SEP + k = n + 1

    def answer_of(self, string: np.ndarray) -> np.ndarray:
        return string

    def example(self, rng, size, depth, split):
        string = SYMBOL0 + rng.integers(0, self.cfg.symbols, size=size)
        out = self.answer_of(string)
        tokens = [BOS, *string, SEP, *out]
        answer = [False] * (size + 2) + [True] * size
        return tokens, answer, string.astype(np.uint16).tobytes()


class Reverse(Copy):
    name = "reverse"

    def answer_of(self, string: np.ndarray) -> np.ndarray:
        return string[::-1]


class Addition(Task):
    name = "addition"
    length_step = 3

    @property
    def vocab_size(self) -> int:
        return SYMBOL0

    def max_size(self, n: int) -> int:
        return (n - 3) // 3  # BOS + m + MARK + m + SEP + (m + 1) = n + 1

    def example(self, rng, size, depth, split):
        a, b = _digits(rng, size), _digits(rng, size)  # most-significant first; leading zeros allowed
        total = int("".join(map(str, a))) + int("".join(map(str, b)))
        c = np.array([int(ch) for ch in str(total).zfill(size + 1)])
        if self.cfg.reverse_digits:
            a, b, c = a[::-1], b[::-1], c[::-1]
        tokens = [BOS, *(DIGIT0 + a), MARK, *(DIGIT0 + b), SEP, *(DIGIT0 + c)]
        answer = [False] * (2 * size + 3) + [True] * (size + 1)
        return tokens, answer, np.concatenate([a, b]).astype(np.uint8).tobytes()


TASKS: dict[str, type[Task]] = {t.name: t for t in (Passkey, AssocRecall, Copy, Reverse, Addition)}


@dataclass
class TaskData:
    """What a task run trains on, in the place of a tokenized corpus: the task, its vocabulary, and the corpus
    fingerprint when its filler comes from a corpus ("" otherwise)."""

    task: Task
    vocab_size: int
    fingerprint: str = ""


def _without_text(cfg: TaskConfig) -> Task:
    """The task for checks that need no corpus (passkey's text filler stands in as a one-token split)."""
    return build_task(cfg, {"train": np.zeros(1), "validation": np.zeros(1)})


def min_length(cfg: TaskConfig) -> int:
    """The shortest input one example of the task fits in (its smallest size)."""
    return _without_text(cfg).min_length()


def check_lengths(cfg: TaskConfig, train_len: int, lengths: list[int]) -> None:
    """One ConfigError line for lengths the task cannot run as asked: an L or eval length too short for one example,
    more key-value pairs than task.n_keys, two eval lengths that give the same examples."""
    task = _without_text(cfg)
    shortest = task.min_length()
    if train_len < shortest:
        raise ConfigError(f"train.seq_len={train_len} is too short for task={cfg.name}: one example needs at least "
                          f"{shortest} tokens; raise train.seq_len")
    short = [n for n in lengths if n < shortest]
    if short:
        raise ConfigError(f"eval length {short[0]} is too short for task={cfg.name}: one example needs at least "
                          f"{shortest} tokens; drop it from eval.lengths (or raise eval.ratios)")
    longest = max([train_len, *lengths])
    if cfg.name == "assoc_recall" and task.max_size(longest) > cfg.n_keys:
        pairs = task.max_size(longest)
        raise ConfigError(f"task.n_keys={cfg.n_keys} is too few for task=assoc_recall at length {longest}: its "
                          f"examples hold {pairs} key-value pairs with distinct keys; raise task.n_keys to at least "
                          f"{pairs}, or use shorter lengths")
    seen: dict[int, int] = {}
    for n in sorted(lengths):
        size = task.max_size(n)
        if size in seen:
            raise ConfigError(f"eval lengths {seen[size]} and {n} give task={cfg.name} the same examples (inputs of "
                              f"{task.filled_length(n)} tokens): its examples grow in steps of {task.length_step} "
                              f"tokens; use eval lengths at least {task.length_step} apart")
        seen[size] = n


def build_task(cfg: TaskConfig, filler_text: dict[str, np.ndarray] | None = None) -> Task:
    if cfg.name not in TASKS:
        raise ConfigError(f"task={cfg.name} is not a synthetic task; choose one of: {', '.join(TASKS)}")
    if cfg.name == "passkey":
        return Passkey(cfg, filler_text)
    return TASKS[cfg.name](cfg)


def batch_rng(g: torch.Generator) -> np.random.Generator:
    """A numpy generator drawn from a torch generator (a batch's, a pure function of (seed, step, micro))."""
    import torch

    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=g)))

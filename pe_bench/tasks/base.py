"""What a task is: what the model trains on and how it is scored. Language modelling (``lm``: the corpus's next
tokens, perplexity) is one task; the synthetic tasks (does the model *use* the long context?) are token sequences
with a loss mask that scores only the answer, exact-match accuracy on held-out examples at L…8L. Each task is one
module of this package (its ``Options``, examples and hooks) plus one YAML in configs/task/.

Every synthetic example is a token sequence ``s`` (at most n + 1 tokens for an input of length n) and a flag per
token saying whether it is part of the answer. The model reads ``x = s[:-1]`` and is scored on ``y = s[1:]`` where
the flag of ``y`` is set; shorter examples are padded at the end (PAD, never scored, never seen by an earlier token).

An example's *size* (filler length, pairs, string length, digits) is what grows with the length: ``max_size(n)`` fills
an input of n tokens. Evaluation examples fill their length; training examples draw their size up to what fills L.

Held-out examples are disjoint from training by construction: an example's question (the key, the pairs, the string,
the operands) hashes to a bucket; bucket 0 of ``HELDOUT_BUCKETS`` is evaluation only, the others training only. The
held-out questions come in two streams: the test set (``heldout_set``, what every table reports) and a development
set (``dev_set``, another seed, no example equal to a test example) on which recipes are tuned.
Sampling is a pure function of its seed (``numpy.random.Generator``), so batches are a pure function of
(seed, step) and a resumed run sees the same data.
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from pe_bench.ranges import chosen, ranged

if TYPE_CHECKING:  # torch is imported where tensors are made: the config checks use this module without it
    import torch

PAD, BOS, SEP, MARK = 0, 1, 2, 3
DIGIT0 = 4  # digits 0-9 are tokens 4..13
SYMBOL0 = DIGIT0 + 10  # each task's own symbols start here
HELDOUT_BUCKETS = 10
EVAL_SEED = 20231  # the held-out sets: the same for every run, seed and scheme (paired comparisons)
DEV_SEED = 40463  # the development sets: held-out questions of another stream, for tuning recipes (never reported)
MAX_TRIES = 1000
MAX_SYMBOLS = 50_000  # a task's alphabet: at most a vocabulary the size of GPT-2's
# The task keys of the time when every task had them (pe_bench.tasks.identity keeps them in a task run's identity,
# so that the run names of that time stand), with their defaults.
LEGACY_IDENTITY = {"train_lengths": "uniform", "curriculum_fraction": 0.5, "eval_examples": 100, "symbols": 16,
                   "key_digits": 5, "filler": "random", "depths": 11, "n_keys": 512, "n_values": 64, "queries": 4,
                   "reverse_digits": True}


@dataclass
class TaskOptions:
    """The options every task has: its name. A task's own ``Options`` subclass this with its keys (``task.KEY``)."""

    name: str = "lm"


@dataclass
class SyntheticOptions(TaskOptions):
    """The options of every synthetic task. Training examples: each one's size drawn uniformly up to what fills L
    (uniform), with that bound growing linearly from the smallest size to L's over the first curriculum_fraction of
    the steps (curriculum), or always filling L (fixed). Examples shorter than L are padded at the end."""

    train_lengths: str = chosen("uniform", "curriculum", "fixed")
    curriculum_fraction: float = ranged(0.5, gt=0, le=1)
    eval_examples: int = ranged(100, ge=1)  # held-out examples per eval length (passkey: per length × depth)


class TaskLengthError(ValueError):
    """The task cannot build an example of this length (too short for one, or more pairs than keys)."""


@dataclass
class Batch:
    """x, y: (B, T) int64 inputs and targets; mask: (B, T) bool, True where y is an answer token."""

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor


class Task:
    """What a run trains on and how it is scored. The class attributes and class methods are what the layers above
    read (config, identity, data, trainer, evaluator, report); they never ask for a task by name."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    citation: ClassVar[str] = ""
    Options: ClassVar[type[TaskOptions]] = TaskOptions
    # perplexity: next-token prediction on the corpus (eval.csv); accuracy: exact match on the task's own held-out
    # examples (accuracy.csv), which belong to no data split
    metric: ClassVar[str] = "accuracy"
    recipe: ClassVar[str | None] = "task"  # the configs/train preset a `task=` choice brings when train= is not given
    model: ClassVar[str | None] = None  # the configs/model preset it brings when model= is not given (None: none)

    @classmethod
    def reads_corpus(cls, options: TaskOptions) -> bool:
        """Whether the task reads the corpus (data.*): then data.* is part of a run's identity."""
        return False

    @classmethod
    def options_problem(cls, options: TaskOptions) -> str | None:
        """Why these options do not go together (one ConfigError line naming the fix), or None."""
        return None

    @classmethod
    def identity(cls, keys: dict[str, Any]) -> dict[str, Any] | None:
        """The task's part of a run's identity from its task keys (None: none)."""
        return keys

    @classmethod
    def digit_positions(cls, options: TaskOptions) -> tuple[tuple[int, ...], int, float] | None:
        """(the digit tokens, the largest training offset, the share of training batches at offset 0) when the model
        adds Abacus digit positions for these options (pe_bench.model.digits), else None."""
        return None

    @classmethod
    def run_prefix(cls, options: TaskOptions, scheme: str, model: str, data: str) -> str:
        """The readable start of a run's name (``-L<L>-s<seed>-<hash>`` follows)."""
        return f"{options.name}-{scheme}-{model}"


class SyntheticTask(Task):
    """A generator of examples. Subclasses set ``name`` and ``Options`` and define ``vocab_size``, ``max_size``,
    ``min_size`` and ``example``."""

    Options: ClassVar[type[TaskOptions]] = SyntheticOptions
    length_step: ClassVar[int] = 1  # tokens one more unit of size adds (a pair, a character, a digit per number)
    min_size: int = 1  # the smallest example size (assoc_recall: one pair per query)

    def __init__(self, cfg: Any, text: dict[str, np.ndarray] | None = None) -> None:
        """``cfg``: the task's options (any object with its keys); ``text``: the corpus's token splits, for a task
        whose ``reads_corpus``."""
        self.cfg = cfg

    def length_problem(self, longest: int) -> str | None:
        """Why the task cannot run at this length although one example fits (a ConfigError line), or None."""
        return None

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def max_size(self, n: int) -> int:
        """The largest size whose example fits an input of n tokens."""
        raise NotImplementedError

    def chance(self, n: int) -> float:
        """Exact match by guessing at length n: the probability that answers drawn uniformly from what each answer
        token can be are all right (the floor an effective length must stay above)."""
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

    def dev_set(self, n: int, count: int, depth: float | None = None) -> Batch:
        """``count`` development examples at length n (as :meth:`heldout_set`, from the DEV_SEED stream), none equal
        to an example of the test set at the same length and depth."""
        return self._dev_avoiding(self.heldout_set(n, count, depth), n, count, depth)

    def _dev_avoiding(self, test: Batch, n: int, count: int, depth: float | None) -> Batch:
        """:meth:`dev_set` given the test set ``test`` at length n and depth ``depth``."""
        seen = {_example_key(x, y) for x, y in zip(test.x.numpy(), test.y.numpy())}
        rng = np.random.default_rng([DEV_SEED, zlib.crc32(self.name.encode()), n, 1001 if depth is None
                                     else round(depth * 1000)])
        size, out = self.max_size(n), []
        for _ in range(MAX_TRIES * count):
            if len(out) == count:
                return self.collate(out, n)
            tokens, answer = self.draw(rng, size, float(rng.random() if depth is None else depth), heldout=True)
            padded = np.zeros(n + 1, dtype=np.int64)
            padded[: len(tokens)] = tokens
            if _example_key(padded[:-1], padded[1:]) not in seen:
                out.append((tokens, answer))
        raise TaskLengthError(f"task={self.name}: fewer than {count} development examples at length {n} differ "
                              "from the test examples")

    def candidates(self, x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> list[tuple[int, ...]] | None:
        """The answers one example's context offers (x, y, mask: (T,) of one example), for the trivial baseline
        that names one of them at random; None where the task has no such candidates."""
        return None

    def trivial_baseline(self, n: int, count: int, depth: float | None = None) -> float:
        """Exact match at length n of the best answer that does not read the question: the most frequent answer of
        the development examples given to every test example, or (where the task names its candidates) a uniformly
        random answer among those the context offers, in expectation — whichever is higher."""
        test = self.heldout_set(n, count, depth)
        dev = self._dev_avoiding(test, n, count, depth)
        answers = [tuple(y[m].tolist()) for y, m in zip(test.y.numpy(), test.mask.numpy())]
        common = Counter(tuple(y[m].tolist()) for y, m in zip(dev.y.numpy(), dev.mask.numpy())).most_common(1)[0][0]
        best = sum(a == common for a in answers) / len(answers)
        picks = [self.candidates(x, y, m) for x, y, m in zip(test.x.numpy(), test.y.numpy(), test.mask.numpy())]
        if all(p is not None for p in picks):
            best = max(best, sum((a in p) / len(p) if p else 0.0 for a, p in zip(answers, picks)) / len(answers))
        return best

    def eval_variants(self) -> list[tuple[str, SyntheticTask]]:
        """Other held-out distributions a run of this task is also scored on, each with the label of its rows
        (``task[option=value]``): the same model, other examples (flip-flop's sparse and dense sequences)."""
        return []

    def eval_depths(self) -> list[float | None]:
        """The depths evaluated at each length (None: the task has no depth)."""
        return [None]


@dataclass
class TaskData:
    """What a task run trains on, in the place of a tokenized corpus: the task, its vocabulary, and the corpus
    fingerprint when its filler comes from a corpus ("" otherwise)."""

    task: SyntheticTask
    vocab_size: int
    fingerprint: str = ""


def _example_key(x: np.ndarray, y: np.ndarray) -> bytes:
    """An example's identity: its input and targets (x, y: (T,))."""
    return np.asarray(x, dtype=np.int64).tobytes() + np.asarray(y, dtype=np.int64).tobytes()


def scatter(rng: np.random.Generator, filler: np.ndarray, items: list[list[int]]) -> list[int]:
    """The filler with the items inserted in their order at uniformly drawn positions (several may be adjacent)."""
    at = np.sort(rng.integers(0, len(filler) + 1, size=len(items)))
    out: list[int] = []
    start = 0
    for pos, item in zip(at.tolist(), items):
        out += [*filler[start:pos].tolist(), *item]
        start = pos
    return out + filler[start:].tolist()


def batch_rng(g: torch.Generator) -> np.random.Generator:
    """A numpy generator drawn from a torch generator (a batch's, a pure function of (seed, step, micro))."""
    import torch

    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=g)))

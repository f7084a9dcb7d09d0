"""Language modelling: next-token prediction on the corpus (data.*), scored by perplexity and bits per byte at
L…8L (pe_bench/evaluate/perplexity.py). The default task; it has no options of its own."""

from __future__ import annotations

from typing import ClassVar

from pe_bench.tasks.base import Task, TaskOptions


class LanguageModelling(Task):
    name = "lm"
    description = "next-token prediction on the corpus: perplexity and bits per byte"
    citation = "Press et al. 2022 (ALiBi), the train-short-test-long protocol"
    Options = TaskOptions
    metric: ClassVar[str] = "perplexity"
    recipe: ClassVar[str | None] = None

    @classmethod
    def reads_corpus(cls, options: TaskOptions) -> bool:
        return True

    @classmethod
    def identity(cls, keys: dict) -> None:
        return None  # a language-modelling run's identity is the one it had before tasks existed (same run names)

    @classmethod
    def run_prefix(cls, options: TaskOptions, scheme: str, model: str, data: str) -> str:
        return f"{scheme}-{model}-{data}"

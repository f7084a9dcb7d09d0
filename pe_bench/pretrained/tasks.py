"""Passkey retrieval and the multi-key needle on a pretrained checkpoint, in its own tokenizer and in words, at its
context L × eval.ratios; scored by exact match of the greedy continuation (Wilson intervals in the report).

- ``passkey`` (Mohtashami & Jaggi 2023, as LongLM and YaRN prompt it): an instruction, filler, "The pass key is
  K. Remember it. K is the pass key." at a depth, filler, then "What is the pass key? The pass key is"; K has
  task.key_digits digits. Exact match by length × depth (task.depths evenly spaced in [0, 1]).
- ``needle_multikey`` (RULER's niah_multikey_1, Hsieh et al. 2024): task.needles sentences "One of the special magic
  numbers for W is: V." with distinct words W (from the first task.needle_keys of WORDS) and numbers V of
  task.value_digits digits, at random depths; the question asks for one W's number.

The filler is the evaluation split of the corpus (data=…, tokenized by the checkpoint's tokenizer) from a random
start, cut so that the whole prompt is exactly the eval length in tokens. Greedy decoding without a cache (so every
method, the logit ones included, sees whole windows): as many tokens as the answer has plus one; solved when the
continuation, leading spaces dropped, is the answer not followed by another digit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import torch

from pe_bench.config import Config, reference_length, run_lengths
from pe_bench.distributed import check_stop
from pe_bench.evaluate.accuracy import SOLVED, MISSED

TASKS = ("passkey", "needle_multikey")
WORDS = ("apple", "river", "candle", "garden", "mirror", "forest", "pencil", "window", "castle", "bottle", "engine",
         "silver", "planet", "button", "rocket", "anchor", "basket", "cotton", "dragon", "falcon", "ginger", "harbor",
         "island", "jacket", "kettle", "ladder", "magnet", "needle", "orange", "pepper", "quartz", "rabbit", "saddle",
         "tunnel", "velvet", "walnut", "yellow", "zipper", "bridge", "camera", "desert", "feather", "glacier",
         "hammer", "insect", "jungle", "lantern", "meadow", "nickel", "oyster", "parrot", "quiver", "ribbon", "shadow",
         "timber", "violin", "wizard", "almond", "beacon", "copper", "dolphin", "empire", "fabric", "goblet")


def _prompt(task: str, cfg: Config, rng: np.random.Generator) -> tuple[str, list[str], str, str]:
    """(instruction, needle sentences, question, answer) of one example."""
    o = cfg.task
    if task == "passkey":
        key = "".join(str(d) for d in rng.integers(0, 10, o.key_digits))
        return ("There is an important piece of information hidden inside a lot of irrelevant text. Find it and "
                "memorize it. I will quiz you about it.\n", [f" The pass key is {key}. Remember it. {key} is the "
                                                              "pass key. "],
                "\nWhat is the pass key? The pass key is", key)
    words = rng.choice(min(o.needle_keys, len(WORDS)), size=o.needles, replace=False)
    values = [str(int(rng.integers(10 ** (o.value_digits - 1), 10**o.value_digits))) for _ in words]
    asked = int(rng.integers(0, o.needles))
    needles = [f" One of the special magic numbers for {WORDS[w]} is: {v}. " for w, v in zip(words, values)]
    question = (f"\nWhat is the special magic number for {WORDS[words[asked]]} mentioned in the provided text? The "
                f"special magic number for {WORDS[words[asked]]} mentioned in the provided text is")
    return "Some special magic numbers are hidden within the following text. Make sure to memorize them.\n", needles, \
        question, values[asked]


def build_example(task: str, cfg: Config, encode: Callable[[str], list[int]], filler: np.ndarray, n: int,
                  depth: float | None, rng: np.random.Generator) -> tuple[list[int], str]:
    """(prompt ids of exactly n tokens, answer): the instruction, filler with the needle(s) at ``depth`` (or random
    depths), the question. ValueError when n cannot hold the fixed parts."""
    head, needles, question, answer = _prompt(task, cfg, rng)
    fixed = encode(head) + encode(question)
    pieces = [encode(s) for s in needles]
    room = n - len(fixed) - sum(len(p) for p in pieces)
    if room < 0 or room >= len(filler):
        raise ValueError(f"a prompt of {n} tokens cannot hold the task's {n - room} fixed tokens and its filler")
    start = int(rng.integers(0, len(filler) - room))
    text = [int(t) for t in filler[start : start + room]]
    cuts = sorted([round(depth * room)] if depth is not None else rng.integers(0, room + 1, len(pieces)).tolist())
    ids, prev = list(encode(head)), 0
    for cut, piece in zip(cuts, pieces):
        ids += text[prev:cut] + piece
        prev = cut
    return ids + text[prev:] + encode(question), answer


@torch.inference_mode()
def greedy(model: Callable[[torch.Tensor], torch.Tensor], ids: list[int], steps: int,
           device: torch.device) -> list[int]:
    """``steps`` greedy tokens after ``ids``, each from a full forward of the sequence so far (no cache)."""
    x = torch.tensor([ids], device=device)
    out = []
    for _ in range(steps):
        nxt = model(x, last=True)[0, -1].float().argmax()
        out.append(int(nxt))
        x = torch.cat([x, nxt.view(1, 1)], dim=1)
    return out


def solved(continuation: str, answer: str) -> tuple[bool, int]:
    """(exact match, characters of the answer right at their places) of a decoded continuation."""
    text = continuation.lstrip()
    right = sum(a == b for a, b in zip(text, answer))
    after = text[len(answer) : len(answer) + 1]
    return text.startswith(answer) and not after.isdigit(), right


def task_rows(model, cfg: Config, tokenizer, filler: np.ndarray, device: torch.device, base: dict) -> list[dict]:
    """One accuracy row (pe_bench.evaluate.accuracy's ACCURACY_COLUMNS) per eval length × depth."""
    L, rows = reference_length(cfg), []
    encode = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    depths = ([None] if cfg.task.name != "passkey" else
              [0.5] if cfg.task.depths == 1 else [round(i / (cfg.task.depths - 1), 4) for i in range(cfg.task.depths)])
    for n in run_lengths(cfg):
        for depth in depths:
            check_stop(f"before the {cfg.task.name} examples at length {n}")
            at = {**base, "task": cfg.task.name, "L_eval": n, "ratio": round(n / L, 4),
                  "depth": "" if depth is None else depth, "examples": cfg.task.eval_examples}
            rows.append(_row(model, cfg, tokenizer, encode, filler, n, depth, device, at))
    return rows


def _row(model, cfg: Config, tokenizer, encode, filler: np.ndarray, n: int, depth: float | None,
         device: torch.device, at: dict) -> dict:
    """The row of one held-out set: ``task.eval_examples`` prompts of n tokens, fixed by the seed, length and depth."""
    digest, outcomes, right, chars = hashlib.sha256(), [], 0, 0
    for i in range(cfg.task.eval_examples):
        rng = np.random.default_rng([cfg.seed, n, int(1000 * (depth or 0)), i])
        try:
            ids, answer = build_example(cfg.task.name, cfg, encode, filler, n, depth, rng)
        except ValueError as e:
            return {**at, "exact_match": "", "token_accuracy": "", "solved": "", "answer_tokens": 0,
                    "status": "not_applicable", "note": str(e), "outcomes": "", "heldout": ""}
        digest.update(np.asarray(ids, dtype=np.int64).tobytes() + answer.encode())
        steps = len(encode(" " + answer)) + 1
        ok, got = solved(tokenizer.decode(greedy(model, ids, steps, device)), answer)
        outcomes.append(SOLVED if ok else MISSED)
        right, chars = right + got, chars + len(answer)
    count = outcomes.count(SOLVED)
    return {**at, "exact_match": round(count / len(outcomes), 6), "token_accuracy": round(right / chars, 6),
            "solved": count, "answer_tokens": chars, "status": "ok", "note": "", "outcomes": "".join(outcomes),
            "heldout": digest.hexdigest()[:16]}

"""Exact-match and per-token accuracy of a task run on its held-out examples at every evaluation length.

Exact match counts an example as solved when the argmax at every answer position is the answer token, the answer's
earlier tokens given. That is greedy decoding: if every teacher-forced argmax is right, greedy decoding writes the
answer token by token; if one is wrong, greedy decoding writes a wrong token there. One forward pass per example.
Per-token accuracy is the fraction of answer tokens whose argmax is right (teacher-forced). ``outcomes`` keeps which
held-out examples were solved, in the held-out set's order (``x`` solved, ``.`` not): the held-out sets are the same
for every run, so two runs are compared example by example (McNemar; pe_bench.stats).
"""

from __future__ import annotations

import hashlib

import torch

from pe_bench.config import Config
from pe_bench.device import bf16_autocast, use_bf16
from pe_bench.distributed import check_stop
from pe_bench.config import reference_length, run_lengths
from pe_bench.evaluate.perplexity import eval_positions
from pe_bench.model.decoder import Decoder
from pe_bench.progress import per_length_lines, say
from pe_bench.schemes import LengthNotSupported
from pe_bench.tasks import Task, TaskLengthError

ACCURACY_COLUMNS = ["task", "scheme", "base_scheme", "model", "L_train", "L_eval", "ratio", "depth", "exact_match",
                    "token_accuracy", "solved", "examples", "answer_tokens", "seed", "step", "precision", "status",
                    "note", "outcomes", "heldout"]
SOLVED, MISSED = "x", "."  # an example's outcome in the outcomes column
# A row is identified by every setting that changes its number (as eval.csv's EVAL_KEY).
ACCURACY_KEY = ("task", "scheme", "L_eval", "depth", "examples", "step", "precision")


@torch.inference_mode()
def evaluate_accuracy(model: Decoder, cfg: Config, task: Task, device: torch.device, step: int | None = None,
                      name: str = "", quiet: bool = False) -> list[dict]:
    """One row per eval length (× depth for passkey) of the task and of each of its evaluation variants (flip-flop's
    sparse and dense sequences; the ``task`` column names them): exact match, per-token accuracy and their counts. A
    length the task or the scheme cannot run at is a ``not_applicable`` row saying why; non-finite logits
    ``nonfinite``."""
    L = reference_length(cfg)
    bf16 = use_bf16(cfg.train, device)
    label = model.label()
    base = {"scheme": label, "base_scheme": model.scheme.name, "model": cfg.model.name,
            "L_train": L, "seed": cfg.seed, "step": cfg.train.steps if step is None else step,
            "precision": "bf16" if bf16 else "fp32", "examples": cfg.task.eval_examples}
    head = " ".join(x for x in (name, "eval", label if label != cfg.scheme.get("name") else "") if x)
    rows = []
    model.eval()
    for task_label, t in [(cfg.task.name, task), *task.eval_variants()]:
        for length in run_lengths(cfg):
            check_stop(f"before evaluating at length {length}")
            common = {**base, "task": task_label, "L_eval": length, "ratio": round(length / L, 4)}
            out = [_row(model, cfg, t, {**common, "depth": "" if d is None else d}, d, device, bf16)
                   for d in t.eval_depths()]
            rows += out
            if not quiet and per_length_lines():
                say(f"{head}{'' if t is task else ' ' + task_label} L={length}: {_length_line(out)}")
    if not quiet and not per_length_lines():  # a log file: one line for every length
        say(f"{head}: {summary([r for r in rows if r['task'] == cfg.task.name], L)}")
    return rows


def _row(model: Decoder, cfg: Config, task: Task, at: dict, depth: float | None, device: torch.device,
         bf16: bool) -> dict:
    """The accuracy row of one held-out set (length, depth)."""
    try:
        n, count = at["L_eval"], cfg.task.eval_examples
        batch = task.dev_set(n, count, depth) if cfg.eval.heldout == "dev" else task.heldout_set(n, count, depth)
        positions = eval_positions(cfg, at["L_eval"], device)
        outcomes, correct, scored, finite = _score(model, batch, positions, device, bf16, cfg.eval.tokens_per_batch)
    except (TaskLengthError, LengthNotSupported) as e:
        return {**at, "exact_match": "", "token_accuracy": "", "solved": "", "answer_tokens": 0,
                "status": "not_applicable", "note": str(e), "outcomes": "", "heldout": ""}
    if not finite:
        return {**at, "exact_match": "nan", "token_accuracy": "nan", "solved": "", "answer_tokens": scored,
                "status": "nonfinite", "note": "non-finite logits: the model overflowed or its weights are not finite",
                "outcomes": "", "heldout": ""}
    solved = outcomes.count(SOLVED)
    return {**at, "exact_match": round(solved / len(batch.x), 6), "token_accuracy": round(correct / scored, 6),
            "solved": solved, "answer_tokens": scored, "status": "ok", "note": "", "outcomes": outcomes,
            "heldout": heldout_digest(batch)}


def _length_line(out: list[dict]) -> str:
    """'exact match 98.0%, token accuracy 99.1% (400 held-out examples)' over the ok rows of one length."""
    ok = [r for r in out if r["status"] == "ok"]
    if not ok:
        return f"{out[0]['status']} ({out[0]['note']})"
    em = sum(r["solved"] for r in ok) / sum(r["examples"] for r in ok)
    ta = sum(r["token_accuracy"] * r["answer_tokens"] for r in ok) / sum(r["answer_tokens"] for r in ok)
    return f"exact match {em:.1%}, token accuracy {ta:.1%} ({sum(r['examples'] for r in ok)} held-out examples)"


def _score(model: Decoder, batch, positions: torch.Tensor | None, device: torch.device, bf16: bool,
           tokens_per_batch: int) -> tuple[str, int, int, bool]:
    """(outcome of each example, answer tokens right, answer tokens, all logits finite) over a held-out batch."""
    n = batch.x.shape[1]
    per = max(1, tokens_per_batch // n)
    outcomes: list[str] = []
    correct = scored = 0
    finite = True
    for i in range(0, len(batch.x), per):
        check_stop(f"while evaluating at length {n}")  # a signal: stop within a batch, not after the length
        x, y, mask = (t[i : i + per].to(device) for t in (batch.x, batch.y, batch.mask))
        with bf16_autocast(device, bf16):
            logits = model(x, positions)
        finite &= bool(torch.isfinite(logits).all())
        right = logits.argmax(-1) == y
        outcomes += [SOLVED if ok else MISSED for ok in (right | ~mask).all(1).tolist()]
        correct += int((right & mask).sum())
        scored += int(mask.sum())
    return "".join(outcomes), correct, scored, finite


def heldout_digest(batch) -> str:
    """A hash of a held-out set's tokens and answer flags: two rows with the same one were scored on the same
    examples in the same order."""
    h = hashlib.sha256(batch.x.numpy().tobytes())
    h.update(batch.y[:, -1:].numpy().tobytes())
    h.update(batch.mask.numpy().tobytes())
    return h.hexdigest()[:16]


def summary(rows: list[dict], train_len: int) -> str:
    """``exact match at L 98.0%, 8L 12.0%`` over the ok rows (depths pooled)."""
    parts = []
    for n in sorted({int(r["L_eval"]) for r in rows}):
        ok = [r for r in rows if int(r["L_eval"]) == n and r["status"] == "ok"]
        ratio = n / train_len
        name = "L" if ratio == 1 else f"{ratio:g}L"
        if ok:
            em = sum(int(r["solved"]) for r in ok) / sum(int(r["examples"]) for r in ok)
            parts.append(f"{name} {em:.1%}")
        else:
            parts.append(f"{name} n/a")
    return "exact match at " + ", ".join(parts) if parts else "no accuracy rows"


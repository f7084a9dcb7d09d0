"""Attention diagnostics: where a scheme fails. At each evaluation length, per layer and head, as a function of the
query position (bucketed): the attention entropy (also divided by its maximum, log of the number of visible keys),
the mean attended distance Σ_j p_ij (i − j), and the attention mass on the first token (a "sink").

The weights come from the model's own attention (``Decoder.forward(probe=...)``): the scheme's rotate, bias and
terms hooks, softmax written out (pe_bench.model.attention.attend_explicit), so no scheme is implemented twice.
Statistics are reduced per batch; a batch holds at most ``MAX_ELEMENTS`` attention weights, so memory stays bounded at
8L.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from pe_bench import tasks
from pe_bench.config import Config, reference_length, run_lengths
from pe_bench.evaluate.perplexity import eval_positions
from pe_bench.model.decoder import Decoder
from pe_bench.runs import ANALYSIS_META, atomic_write_text, write_csv

ATTENTION_COLUMNS = ["scheme", "task", "step", "L_train", "L_eval", "layer", "head", "q_start", "q_end", "queries", "entropy",
                     "entropy_norm", "distance", "sink_mass"]
MAX_ELEMENTS = 2**24  # attention weights (B·H·T·T) per forward: 64 MiB of float32 per layer


class AttentionStats:
    """Sums of the per-query statistics by (layer, head, position bucket), filled by the model's probe."""

    def __init__(self, n_layers: int, n_heads: int, length: int, buckets: int, edge_at: int | None = None) -> None:
        """``buckets`` equal buckets of query positions in [0, length); ``edge_at`` (the training length) is made an
        edge too, so that no bucket holds positions on both sides of it."""
        edges = np.linspace(0, length, min(buckets, length) + 1).round().astype(int)
        self.edges = np.unique(np.append(edges, [edge_at] if edge_at and edge_at < length else []).astype(int))
        nb = len(self.edges) - 1
        self.bucket = torch.bucketize(torch.arange(length), torch.as_tensor(self.edges[1:-1]), right=True)
        self.sums = {k: torch.zeros(n_layers, n_heads, nb, dtype=torch.float64)
                     for k in ("entropy", "entropy_norm", "distance", "sink_mass")}
        self.count = torch.zeros(nb, dtype=torch.float64)

    def __call__(self, layer: int, probs: torch.Tensor) -> None:
        """probs: (B, H, T, T) attention weights (rows sum to 1 over the visible keys j <= i)."""
        B, H, T, _ = probs.shape
        p = probs.detach().float().cpu()
        i = torch.arange(T, dtype=torch.float32)
        entropy = -torch.special.xlogy(p, p).sum(-1)  # (B, H, T); 0·log 0 = 0
        visible = torch.log(i + 1)  # the entropy of uniform attention over the i + 1 visible keys
        norm = torch.where(visible > 0, entropy / visible.clamp(min=1e-12), torch.zeros(()))
        distance = i * p.sum(-1) - p @ i  # Σ_j p_ij (i − j): future weights are 0
        stats = {"entropy": entropy, "entropy_norm": norm, "distance": distance, "sink_mass": p[..., 0]}
        bucket = self.bucket[:T]
        for k, v in stats.items():
            per_query = v.double().sum(0)  # (H, T): summed over the batch
            self.sums[k][layer].index_add_(1, bucket, per_query)
        if layer == 0:
            self.count.index_add_(0, bucket, torch.full((T,), float(B), dtype=torch.float64))

    def rows(self, common: dict) -> list[dict]:
        out = []
        n_layers, n_heads, nb = self.sums["entropy"].shape
        for layer in range(n_layers):
            for head in range(n_heads):
                for b in range(nb):
                    n = float(self.count[b])
                    if not n:
                        continue
                    out.append({**common, "layer": layer, "head": head, "q_start": int(self.edges[b]),
                                "q_end": int(self.edges[b + 1]), "queries": int(n),
                                **{k: round(float(v[layer, head, b]) / n, 6) for k, v in self.sums.items()}})
        return out


def inputs_at(cfg: Config, data, length: int, examples: int) -> torch.Tensor:
    """(N, length) token ids to analyse: the first ``examples`` non-overlapping windows of the evaluation split
    (task=lm), or the task's held-out examples (random depths)."""
    from pe_bench.tasks import TaskData

    if isinstance(data, TaskData):
        return data.task.heldout_set(length, examples).x
    tokens = data.splits[cfg.eval.split]
    n = min(examples, (len(tokens) - 1) // length)
    if n < 1:
        raise ValueError(f"the {cfg.eval.split} split has {len(tokens)} tokens, fewer than one window of {length}")
    return torch.from_numpy(np.asarray(tokens[: n * length], dtype=np.int64).reshape(n, length))


@torch.inference_mode()
def analyze(model: Decoder, cfg: Config, data, device: torch.device, examples: int = 16,
            buckets: int = 32, step: int | None = None) -> list[dict]:
    """Attention statistics of the model (its weights from training step ``step``) at every evaluation length (rows
    of ATTENTION_COLUMNS)."""
    model.eval()
    L = reference_length(cfg)
    args = model.args
    rows = []
    for length in run_lengths(cfg):
        x = inputs_at(cfg, data, length, examples)
        positions = eval_positions(cfg, length, device)
        stats = AttentionStats(args.n_layers, args.n_heads, length, buckets, edge_at=L)
        per = max(1, MAX_ELEMENTS // (args.n_heads * length * length))
        for i in range(0, len(x), per):
            model(x[i : i + per].to(device), positions, probe=stats)
        rows += stats.rows({"scheme": model.scheme.label(), "task": cfg.task.name, "step": step, "L_train": L,
                            "L_eval": length})
    return rows


def write_analysis_files(rows: list[dict], out: Path, made_at: dict | None = None) -> list[Path]:
    """attention.csv and analysis.json (``made_at``: the step of the weights, of how many, the run's status) under
    ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "attention.csv", rows, ATTENTION_COLUMNS)
    atomic_write_text(out / ANALYSIS_META, json.dumps(made_at or {}, indent=1, sort_keys=True) + "\n")
    return [out / "attention.csv"]


def summary_lines(rows: list[dict], train_len: int) -> list[str]:
    """One line per eval length: the statistics averaged over layers and heads, for queries before L and from L on
    (weighted by queries)."""
    out = []
    for n in sorted({r["L_eval"] for r in rows}):
        parts = []
        for name, keep in (("< L", lambda r: r["q_end"] <= train_len), (">= L", lambda r: r["q_start"] >= train_len)):
            sel = [r for r in rows if r["L_eval"] == n and keep(r)]
            w = sum(r["queries"] for r in sel)
            if w:
                mean = {k: sum(r[k] * r["queries"] for r in sel) / w for k in ("entropy_norm", "distance", "sink_mass")}
                parts.append(f"queries {name}: entropy/log(keys) {mean['entropy_norm']:.2f}, distance "
                             f"{mean['distance']:.1f}, sink {mean['sink_mass']:.2f}")
        out.append(f"L_eval={n}: " + "; ".join(parts))
    return out


def default_title(cfg: Config, label: str, longest: int) -> str:
    what = cfg.data.name if tasks.get(cfg.task.name).metric == "perplexity" else f"task {cfg.task.name}"
    return (f"{label} on {what}: attention by query position in {longest}-token inputs "
            f"(trained at L = {cfg.train.seq_len}; lines: heads)")


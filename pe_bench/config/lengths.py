"""Length arithmetic: a run's evaluation lengths and the L its rows are relative to."""

from __future__ import annotations

from pe_bench.config.schema import Config, EvalConfig


def eval_lengths(ecfg: EvalConfig, train_len: int) -> list[int]:
    """eval.lengths, or eval.ratios × ``train_len``, sorted and distinct."""
    if ecfg.lengths:
        return sorted({int(x) for x in ecfg.lengths})
    return sorted({round(r * train_len) for r in ecfg.ratios})


def reference_length(cfg: Config) -> int:
    """The L of a run's rows (column L_train, ratios, the sliding stride's default): its training length, or for a
    fine-tune its first ancestor's, so that a fine-tuned run's rows line up with its parent's."""
    return cfg.finetune.original_seq_len or cfg.train.seq_len


def run_lengths(cfg: Config) -> list[int]:
    """A run's eval lengths: eval.lengths, or eval.ratios × L — for a fine-tune × the original L and × its own (a
    fine-tune's default eval.lengths are its parent's lengths and its own L: pe_bench.finetune)."""
    lengths = set(eval_lengths(cfg.eval, reference_length(cfg)))
    if cfg.finetune.original_seq_len:
        lengths |= set(eval_lengths(cfg.eval, cfg.train.seq_len))
    return sorted(lengths)

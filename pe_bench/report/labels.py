"""Row labels: a configuration's identity (its run identity without the seed, plus its numerics when the runs
disagree on them) and the label a row shows — the scheme label plus the configuration keys that differ between the
runs of a report."""

from __future__ import annotations

from typing import Any

import pandas as pd

from pe_bench.config import Config
from pe_bench.markdown import label_value
from pe_bench.runs import Run, RunFileError, RunMeta, digest, identity, numerics_of

# Keys of a run's identity that never go into a row label: the seed is what replicas differ in; the scheme is the
# row name already (its label lists the options that differ from the defaults).
UNLABELLED = ("seed", "scheme")
# A fine-tune's identity keys that its label's tag (finetune_tag) already says, or that follow from its parent.
TAGGED = ("train.steps", "train.seq_len", "train.pose_target", "train.pose_chunks", "finetune.original_seq_len",
          "finetune.data_offset", "finetune.new_positions", "finetune.trainable")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested configuration keys → dotted keys with their values as labels show them (:func:`label_value`)."""
    out: dict[str, str] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = label_value(v)
    return out


def _numerics(run: Run) -> str | None:
    try:
        return numerics_of(run.meta())
    except RunFileError:
        return None


def config_identity(cfg: Config, meta: RunMeta, mixed: bool) -> tuple[dict[str, Any], str]:
    """A run's configuration — its identity without the seed, plus its numerics when the runs being reported
    disagree on them (docs/trust.md, "Determinism") — and that configuration's hash: runs with the same hash are seed
    replicas of one table row."""
    ident = identity(cfg, seed=False)
    if mixed:
        ident["numerics"] = numerics_of(meta)
    return ident, digest(ident)


def mixed_numerics(runs: list[Run]) -> bool:
    """Whether the runs were made with different numerics (torch, device, CPU threads)."""
    return len({_numerics(run) for run in runs} - {None}) > 1


def labelled(df: pd.DataFrame, flat: dict[str, dict[str, str]], tags: dict[str, str],
             flat_scheme: dict[str, dict[str, str]]) -> pd.DataFrame:
    """The rows with their 'label': the scheme label, a fine-tune's tag, the configuration keys that differ between
    the runs, the scheme options that tell two configurations of one label apart, an unfinished step, and a scored
    span other than the configuration's own."""
    suffix = {}
    shown = set(df["config"])  # a run left out (another split, a keep mask) never shapes the labels of the others
    for pool in (False, True):  # trained from scratch, fine-tuned: the keys that differ within each kind
        members = {c: f for c, f in flat.items() if bool(tags[c]) == pool and c in shown}
        varying = sorted(k for k in set().union(*members.values()) if len({f.get(k) for f in members.values()}) > 1)
        suffix.update({c: " · ".join(f"{k}={members[c].get(k)}" for k in varying) for c in members})
    df["label"] = [s + tags[c] + (f" · {suffix[c]}" if suffix[c] else "") for s, c in zip(df["scheme"], df["config"])]
    df["ft_method"] = [m + (f" · {suffix[c]}" if suffix[c] and tags[c] else "") for m, c in zip(df["ft_method"],
                                                                                              df["config"])]
    # Two configurations can still share a label: rope trained with YaRN and plain rope evaluated as rope+yarn×8.
    # Their scheme options that differ go into the label too; a row is never two configurations.
    for label, configs in df.groupby("label")["config"].unique().items():
        if len(configs) > 1:
            keys = sorted(k for k in set().union(*(flat_scheme[c] for c in configs))
                          if len({flat_scheme[c].get(k) for c in configs}) > 1)
            for c in configs:
                extra = "trained with " + ", ".join(f"{k}={flat_scheme[c].get(k)}" for k in keys)
                df.loc[(df["label"] == label) & (df["config"] == c), "label"] = f"{label} · {extra}"
    df["label"] = [lab + (f" · step {a}/{b}" if a != b else "") for lab, a, b in zip(df["label"], df["step"],
                                                                                     df["steps"])]
    # One evaluation scores the same span at every length (a multiple of its longest length); evaluations with
    # other length sets score other spans: their rows are labelled apart (· scored=N), never averaged with these.
    # The span evaluated at the most lengths (then the longest span) keeps the configuration's own label.
    span_key = ["config", "split", "mode", "budget", "S", "precision", "warmup", "step"]
    scored = df[df["tokens_scored"] > 0]
    for key, g in scored.groupby(span_key):
        if g["tokens_scored"].nunique() > 1:
            main = max(g.groupby("tokens_scored")["L_eval"].nunique().items(), key=lambda x: (x[1], x[0]))[0]
            apart = df.index.isin(g.index[g["tokens_scored"] != main])
            df.loc[apart, "label"] = [f"{lab} · scored={n}" for lab, n in zip(df.loc[apart, "label"],
                                                                             df.loc[apart, "tokens_scored"])]
    return df

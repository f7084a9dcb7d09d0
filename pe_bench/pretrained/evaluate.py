"""One checkpoint evaluated on one corpus: pe-bench's evaluator (pe_bench.evaluate.perplexity, every mode and the
repetition probe) on a transformers causal LM, at its context L × eval.ratios, written as a run directory that
`pe-bench report` reads like any other:

    <results_dir>/pretrained/<checkpoint dir>-<data>-L<L>-<weights sha256[:8]>/
        config.yaml   the evaluation's config (train.seq_len = L; the model section is not the checkpoint's)
        meta.json     status, environment, ``pretrained``: path, model type, L, config and weights sha256, transformers
        eval.csv, windows.csv, positions.csv, context.csv, repetition.csv   as for a trained run

Rows of another method or other evaluation settings are added beside the ones there; a directory whose recorded
checkpoint differs (its config.json changed, another transformers) is refused.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from pe_bench.config import Config, ConfigError, compose, scheme_spec, to_dict, with_options
from pe_bench.data import load_corpus
from pe_bench.device import resolve_device, use_bf16
from pe_bench.evaluate.perplexity import (
    CONTEXT_COLUMNS,
    CONTEXT_KEY,
    EVAL_COLUMNS,
    EVAL_KEY,
    POSITION_COLUMNS,
    POSITION_KEY,
    WINDOW_COLUMNS,
    WINDOW_KEY,
    check_feasible,
    evaluate,
)
from pe_bench.evaluate.accuracy import ACCURACY_COLUMNS, ACCURACY_KEY
from pe_bench.evaluate.accuracy import summary as accuracy_summary
from pe_bench.evaluate.repetition import REPETITION_COLUMNS, REPETITION_KEY
from pe_bench.experiment import merge_csv
from pe_bench.pretrained.checkpoint import Checkpoint, encode, load_tokenizer, open_checkpoint, token_bytes
from pe_bench.pretrained.tasks import TASKS, task_rows
from pe_bench.pretrained.methods import ROPE_FAMILY, check_applies, load_model, rope_scheme, rope_setup
from pe_bench.runs import Run, Status, file_sha256
from pe_bench.progress import say
from pe_bench.runs.provenance import environment
from pe_bench.schemes.rope import RoPE

# What `pe-bench eval DIR` of a checkpoint may set: the corpus, the protocol, the method, where it runs and writes.
ALLOWED = ("data", "eval", "scheme.scaling", "train.device", "train.precision", "results_dir", "cache_dir", "seed",
           "task")


NLL_CHUNK = 2048  # positions whose logits exist at once in PretrainedLM.token_nll


class PretrainedLM(nn.Module):
    """A transformers causal LM as pe-bench's evaluator calls a model: ``model(x)`` with x: (B, T) ids -> (B, T, V)
    logits, ``label()`` and ``scheme.name`` for its rows."""

    def __init__(self, hf: nn.Module, scheme: RoPE) -> None:
        super().__init__()
        self.hf, self.scheme = hf, scheme

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, last: bool = False) -> torch.Tensor:
        """(B, T, V) logits; ``last``: only the last position's, (B, 1, V)."""
        return self.hf(input_ids=x, use_cache=False, logits_to_keep=1 if last else 0).logits

    def token_nll(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(B, T) nll of the targets y, the LM head applied to NLL_CHUNK positions at a time: memory grows with the
        window, not with window × vocabulary (50 GB of logits for Llama-3-8B at 64K tokens)."""
        hidden = self.hf.base_model(input_ids=x, use_cache=False).last_hidden_state
        head = self.hf.get_output_embeddings()
        out = torch.empty(y.shape, dtype=torch.float32, device=y.device)
        for a in range(0, x.shape[1], NLL_CHUNK):
            logits = head(hidden[:, a : a + NLL_CHUNK]).float()
            out[:, a : a + NLL_CHUNK] = F.cross_entropy(logits.transpose(1, 2), y[:, a : a + NLL_CHUNK],
                                                        reduction="none")
        return out

    def label(self) -> str:
        return self.scheme.label()


def checkpoint_config(ck: Checkpoint, overrides: list[str]) -> Config:
    """The evaluation's config: train.seq_len = the checkpoint's L, RoPE with its base and rotary fraction, and the
    overrides (ALLOWED only). A checkpoint outside the RoPE family is refused."""
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if not any(key == a or key.startswith(a + ".") for a in ALLOWED):
            raise ConfigError(f"{key} cannot be set when evaluating a checkpoint; pe-bench eval of a checkpoint reads "
                              f"{', '.join(ALLOWED)}")
    if ck.model_type not in ROPE_FAMILY:
        raise ConfigError(f"{ck.name} is a {ck.model_type} model; pe-bench evaluates RoPE-family checkpoints "
                          f"({', '.join(ROPE_FAMILY)}), whose positions it can name and extend")
    base, fraction, _ = rope_setup(ck)
    if any(o.startswith("task.filler=") for o in overrides):
        raise ConfigError("task.filler is not read here: a checkpoint's passkey filler is the corpus's text (data=...)")
    passkey = ["task.filler=text"] if "task=passkey" in overrides else []
    cfg = compose([f"train.seq_len={ck.context}", "eval.variants=false", "scheme=rope", f"scheme.base={base}",
                   f"scheme.rotary_fraction={fraction}", *overrides, *passkey])
    if cfg.task.name not in ("lm", *TASKS):
        raise ConfigError(f"task={cfg.task.name} is not one pe-bench builds in a checkpoint's tokenizer; use "
                          f"{' or '.join(f'task={t}' for t in TASKS)}, or no task (perplexity)")
    cfg.model.name = ck.name
    return cfg


def run_dir(ck: Checkpoint, cfg: Config) -> Path:
    """<results_dir>/pretrained/<checkpoint>-[<task>-]<data>-L<L>-<weights sha256[:8]>."""
    task = "" if cfg.task.name == "lm" else f"{cfg.task.name}-"
    return (Path(cfg.results_dir) / "pretrained"
            / f"{ck.name}-{task}{cfg.data.name}-L{ck.context}-{ck.weights_sha256[:8]}")


def evaluate_checkpoint(path: str | Path, overrides: list[str], context: int | None = None,
                        progress: bool = True) -> Run:
    """Evaluate the checkpoint at ``path`` (see the module docstring) by perplexity, or with task=passkey or
    task=needle_multikey by exact match (pe_bench.pretrained.tasks), with the method asked for and, with
    eval.variants=true, every eval-time variant of configs/scheme/rope.yaml the checkpoint can take; returns its run
    directory. Every refusal (no checkpoint, a hub id, a method the architecture cannot take, a split too short)
    comes before anything is written."""
    ck = open_checkpoint(path, context)
    cfg = checkpoint_config(ck, overrides)
    methods = _methods(ck, cfg)
    device = resolve_device(cfg.train.device)
    tokenizer = load_tokenizer(ck)
    texts = load_corpus(cfg.data)[cfg.eval.split][cfg.data.text_field]
    tokens = encode(tokenizer, texts, cfg.data.doc_separator)
    if cfg.task.name == "lm":
        check_feasible(cfg, len(tokens))
    run = Run(run_dir(ck, cfg))
    run.path.mkdir(parents=True, exist_ok=True)
    with run.lock():
        _begin(run, ck, cfg, device)
        dtype = torch.bfloat16 if use_bf16(cfg.train, device) else torch.float32
        t0 = time.time()
        for scheme in methods:
            model = PretrainedLM(load_model(ck, scheme.options.scaling, device, dtype), scheme)
            if cfg.task.name == "lm":
                _perplexity(run, cfg, model, tokens, token_bytes(tokenizer), device, progress)
            else:
                _task(run, cfg, ck, model, tokenizer, tokens, device, dtype)
        written = ({"eval_csv_sha256": file_sha256(run.eval_csv)} if cfg.task.name == "lm"
                   else {"accuracy_csv_sha256": file_sha256(run.accuracy_csv)})
        run.update_meta(status=Status.DONE, eval_seconds=time.time() - t0, eval_attention_backend="transformers",
                        n_params=sum(p.numel() for p in model.parameters()), **written)
    return run


def _methods(ck: Checkpoint, cfg: Config) -> list[RoPE]:
    """The asked method (refused in one line when the checkpoint cannot take it) and, with eval.variants, each
    eval-time variant it can take (one line for each it cannot), once per label."""
    spec = scheme_spec(to_dict(cfg)["scheme"])
    asked = rope_scheme(ck, spec.options.scaling)
    check_applies(ck, asked.options.scaling)
    out = {asked.label(): asked}
    for variant in spec.eval_variants if cfg.eval.variants else []:
        scheme = rope_scheme(ck, with_options(spec, variant).options.scaling)
        try:
            check_applies(ck, scheme.options.scaling)
        except ConfigError as e:
            say(f"{ck.name}: {scheme.label()} left out: {e}")
            continue
        out.setdefault(scheme.label(), scheme)
    return list(out.values())


def _task(run: Run, cfg: Config, ck: Checkpoint, model: PretrainedLM, tokenizer, tokens, device: torch.device,
          dtype: torch.dtype) -> None:
    """The task's accuracy rows of one method, merged into the run's accuracy.csv."""
    base = {"scheme": model.label(), "base_scheme": "rope", "model": cfg.model.name, "L_train": ck.context,
            "seed": cfg.seed, "step": cfg.train.steps, "precision": "bf16" if dtype == torch.bfloat16 else "fp32",
            "heldout": ""}
    rows = task_rows(model, cfg, tokenizer, tokens, device, base)
    merge_csv(run.accuracy_csv, rows, ACCURACY_COLUMNS, ACCURACY_KEY)
    say(f"{run.path.name} eval {model.label()}: {accuracy_summary(rows, ck.context)}")


def _perplexity(run: Run, cfg: Config, model: PretrainedLM, tokens, tb, device: torch.device, progress: bool) -> None:
    """pe-bench's evaluator on the checkpoint; its rows merged into the run's files."""
    done = evaluate(model, cfg, tokens, tb, device, name=run.path.name, progress=progress)
    merge_csv(run.path / "windows.csv", done.windows, WINDOW_COLUMNS, WINDOW_KEY)
    merge_csv(run.positions_csv, done.positions, POSITION_COLUMNS, POSITION_KEY)
    merge_csv(run.context_csv, done.context, CONTEXT_COLUMNS, CONTEXT_KEY)
    if done.repetition:
        merge_csv(run.repetition_csv, done.repetition, REPETITION_COLUMNS, REPETITION_KEY)
    merge_csv(run.eval_csv, done.rows, EVAL_COLUMNS, EVAL_KEY)


def _begin(run: Run, ck: Checkpoint, cfg: Config, device: torch.device) -> None:
    """A new directory gets its config and meta; an existing one must record this very checkpoint."""
    if run.meta_path.exists():
        recorded = run.meta().pretrained or {}
        if recorded != ck.record():
            changed = sorted(k for k in ck.record() if recorded.get(k) != ck.record()[k])
            raise ConfigError(f"{run.path} was made from another checkpoint or transformers ({', '.join(changed)} "
                              "differ); move it away or give another results_dir")
        if run.meta().status == Status.DONE:
            return
    else:
        run.create(cfg)
    run.update_meta(status=Status.RUNNING, run_name=run.path.name, scheme=cfg.scheme.get("name"),
                    started=time.strftime("%Y-%m-%dT%H:%M:%S"), pretrained=ck.record(), **environment(device))

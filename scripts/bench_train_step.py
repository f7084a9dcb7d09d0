"""The CPU training step against what the cores can do, and what moves it.

For NoPE, RoPE, ALiBi and T5, at the two shapes the sweeps train (the default sweep: the tiny model, L = 64,
B = 32, train=quick's 2 threads; the tasks sweep: L = 32, B = 32, train=task's 1 thread, the passkey vocabulary), each
variant of the step is timed in interleaved rounds (the order rotated and reversed from round to round; the median
of each round's time ÷ the baseline's):

- ``eager``: the trainer's step as it runs by default (eager forward and backward, gradient clipping, the fused
  AdamW; scripts/bench.py section 2 times the same function);
- ``compiled``: the same with the model's forward compiled by torch.compile (``train.compile=on``; inductor's C++
  kernels on the CPU), its compile time measured apart;
- ``foreach``: the eager step with the multi-tensor (foreach) AdamW instead of the fused one.

Tokens/s are set against the step's FLOPs — 6 · (non-embedding parameters + the LM head) · tokens plus the attention's
12 · layers · L · d per token (Kaplan et al. 2020, without causal halving) — and against the cores' peak, measured
as the best of a few 2048² fp32 matrix products on the same threads. Each variant's losses over the timed steps are
compared with eager's from the same weights and batches (max |Δ|): a variant that changes them is opt-in.

Writes results/benchmarks/cpu-<date>-train-step.md. Usage: ``python scripts/bench_train_step.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench import in_turn, model_for  # noqa: E402
from pe_bench.train import loss_of  # noqa: E402

SCHEMES = ("nope", "rope", "alibi", "t5")
SHAPES = {"default sweep (L=64, B=32, 2 threads)": (64, 32, 2, 256),
          "tasks sweep (L=32, B=32, 1 thread)": (32, 32, 1, 30)}
VARIANTS = ("eager", "compiled", "foreach")


def peak_gflops(threads: int) -> float:
    """The best of five 2048 × 2048 fp32 matrix products on ``threads`` threads, GFLOP/s."""
    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * 2048 ** 3 / best / 1e9


def flops_per_token(model: torch.nn.Module, L: int) -> float:
    """6 · N + 12 · layers · L · d: N the parameters a token's forward multiplies by (all but the embedding table's
    lookup; a tied head counts once, as the head)."""
    n = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("tok_emb"))
    if model.lm_head.weight is model.tok_emb.weight:  # tied: listed once, as the embedding
        n += model.lm_head.weight.numel()
    layers, d = len(model.blocks), model.tok_emb.weight.shape[1]
    return 6 * n + 12 * layers * L * d


def optimizer(model: torch.nn.Module, lr: float, fused: bool) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=fused, foreach=None if fused else True)


def stepper(model, opt, fwd, batches):
    """One training step per call on the next batch; the losses it saw, as floats."""
    losses, it = [], iter(batches)

    def step() -> None:
        x, y = next(it)
        loss = loss_of(fwd(x), y, None)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return step, losses


def measure(scheme: str, L: int, B: int, threads: int, vocab: int, rounds: int, steps: int) -> list[dict]:
    torch.set_num_threads(threads)
    base, cfg = model_for(scheme, "tiny", L, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    n = (rounds + 1) * steps + 1
    data = torch.randint(0, vocab, (n, B, L + 1), generator=g)
    batches = [(d[:, :-1].contiguous(), d[:, 1:].contiguous()) for d in data]
    steps_of, losses_of, compile_s = {}, {}, 0.0
    for v in VARIANTS:
        model = copy.deepcopy(base).train()
        fwd = torch.compile(model) if v == "compiled" else model
        fn, losses = stepper(model, optimizer(model, cfg.train.lr, fused=v != "foreach"), fwd, batches)
        t = time.perf_counter()
        fn()  # warm-up (the compile, for compiled)
        if v == "compiled":
            compile_s = time.perf_counter() - t
        steps_of[v], losses_of[v] = fn, losses
    times = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for v in in_turn(list(VARIANTS), r):
            t = time.perf_counter()
            for _ in range(steps):
                steps_of[v]()
            times[v].append((time.perf_counter() - t) / steps)
    fpt = flops_per_token(base, L)
    rows = []
    for v in VARIANTS:
        tps = B * L / statistics.median(times[v])
        rows.append({"scheme": scheme, "variant": v, "tokens_per_s": tps, "gflops": tps * fpt / 1e9,
                     "speedup": statistics.median(b / a for a, b in zip(times[v], times["eager"])),
                     "loss_diff": max(abs(a - b) for a, b in zip(losses_of[v], losses_of["eager"])),
                     "compile_s": compile_s if v == "compiled" else 0.0})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5, help="steps per variant per round")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks")
    args = ap.parse_args()
    t0 = time.perf_counter()
    lines = [f"# pe-bench CPU training step, {time.strftime('%Y-%m-%d')}", "",
             f"cpu ({torch.backends.cpu.get_cpu_capability()}), torch {torch.__version__}, {args.rounds} interleaved "
             f"rounds of {args.steps} steps, `python scripts/bench_train_step.py "
             f"{' '.join(sys.argv[1:])}`".rstrip(), "",
             "FLOP/s: 6 · parameters (the head included, the embedding lookup not) + 12 · layers · L · d per token "
             "(no causal halving); % of peak: of the best 2048² fp32 matrix product on the same threads. `compile s`: "
             "the first compiled step, compile included (inductor reuses its on-disk cache from the schemes and runs "
             "before it: a cold compile of the first took about 17 s here)."]
    for shape, (L, B, threads, vocab) in SHAPES.items():
        peak = peak_gflops(threads)
        lines += ["", f"## {shape}: peak {peak:.0f} GFLOP/s (2048² fp32 matrix product, {threads} thread(s))", "",
                  "| scheme | variant | tokens/s | GFLOP/s | % of peak | speed-up vs eager | max loss Δ vs eager "
                  "| compile s |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for scheme in SCHEMES:
            for r in measure(scheme, L, B, threads, vocab, args.rounds, args.steps):
                lines.append(f"| {r['scheme']} | {r['variant']} | {r['tokens_per_s']:,.0f} | {r['gflops']:.1f} | "
                             f"{100 * r['gflops'] / peak:.1f} | {r['speedup']:.2f}× | {r['loss_diff']:.1e} | "
                             f"{r['compile_s']:.0f} |".replace("| 0 |", "| |"))
            print(f"{shape}: {scheme} measured", flush=True)
    lines += ["", f"{time.perf_counter() - t0:.0f} s in all."]
    out = args.out / f"cpu-{time.strftime('%Y-%m-%d')}-train-step.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

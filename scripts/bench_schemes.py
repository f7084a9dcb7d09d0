"""Training and evaluation throughput of every registered scheme, measured side by side in one process.

Rounds are interleaved (every scheme once per round) and the reported ratio is the median over rounds of each
scheme's step time divided by `nope`'s step time in the same round, so machine noise cancels. Usage:

    python scripts/bench_schemes.py                       # tiny model, train L=64 (B=32), eval at 8L
    python scripts/bench_schemes.py --device cuda --model small --seq-len 512 --batch 32
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from pe_bench import schemes
from pe_bench.build import build_model
from pe_bench.config import compose, scheme_spec, with_options
from pe_bench.schemes import LengthNotSupported
from pe_bench.train import make_optimizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--eval-ratio", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5, help="steps per scheme per round")
    args = ap.parse_args()
    dev = torch.device(args.device)
    names = schemes.available()
    bf16 = dev.type == "cuda"

    T, Te, B = args.seq_len, args.seq_len * args.eval_ratio, args.batch
    setups = {}
    for name in names:
        cfg = compose([f"scheme={name}", f"model={args.model}", f"train.seq_len={T}"])
        spec = scheme_spec(cfg.scheme)
        torch.manual_seed(0)
        model = build_model(cfg, 256, spec).to(dev)
        try:  # a scheme that refuses the eval length is measured with its first eval variant (learned: clamp)
            with torch.no_grad():
                model(torch.zeros(1, Te, dtype=torch.long, device=dev))
        except LengthNotSupported:
            model = build_model(cfg, 256, with_options(spec, spec.eval_variants[0])).to(dev)
        setups[name] = (model, make_optimizer(model, cfg.train, dev))

    x = torch.randint(0, 256, (B, T + 1), device=dev)
    xe = torch.randint(0, 256, (max(1, B // args.eval_ratio), Te), device=dev)
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else torch.autocast("cpu", enabled=False)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def train_steps(name: str) -> float:
        model, opt = setups[name]
        model.train()
        sync()
        t = time.perf_counter()
        for _ in range(args.steps):
            with ctx:
                loss = F.cross_entropy(model(x[:, :-1]).float().flatten(0, 1), x[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        sync()
        return (time.perf_counter() - t) / args.steps

    @torch.inference_mode()
    def eval_steps(name: str) -> float:
        model = setups[name][0].eval()
        sync()
        t = time.perf_counter()
        for _ in range(args.steps):
            with ctx:
                model(xe)
        sync()
        return (time.perf_counter() - t) / args.steps

    for fn in (train_steps, eval_steps):  # warm-up
        for name in names:
            fn(name)
    times = {(k, n): [] for k in ("train", "eval") for n in names}
    for _ in range(args.rounds):
        for name in names:
            times[("train", name)].append(train_steps(name))
            times[("eval", name)].append(eval_steps(name))

    print(f"device={dev} model={args.model} train L={T} B={B} | eval L={Te} B={xe.shape[0]} | "
          f"{args.rounds} interleaved rounds × {args.steps} steps, threads={torch.get_num_threads()}")
    print("time ratios are per-round step time / nope's step time in the same round, median over rounds (>1 = slower)")
    print(f"{'scheme':<12}{'train tok/s':>14}{'train time/nope':>17}{'eval tok/s':>14}{'eval time/nope':>16}")
    for name in names:
        row = [name]
        for kind, tokens in (("train", B * T), ("eval", xe.numel())):
            med = statistics.median(times[(kind, name)])
            ratio = statistics.median(a / b for a, b in zip(times[(kind, name)], times[(kind, "nope")]))
            row += [f"{tokens / med:,.0f}", f"{ratio:.2f}"]
        print(f"{row[0]:<12}{row[1]:>14}{row[2]:>17}{row[3]:>14}{row[4]:>16}")


if __name__ == "__main__":
    main()

"""pe-bench's speed and memory, measured side by side in one run, with the targets beside each ratio.

1. pe-bench's training step (scheme=nope) against a minimal nanoGPT-style loop written below: same model size,
   data, batch, device and optimizer; interleaved rounds (the order rotated and reversed from round to round), the
   median over rounds of the per-round tokens/s ratio (target >= 1.0).
2. Every scheme's training step time / NoPE's (targets: <= 1.10 for sinusoidal, learned, rope, alibi, t5, kerple,
   sandwich, ssmax, layered; <= 1.25 for fire, conv, xpos, hybrid, fope; <= 2 for shaw, xl, cope, fox, pope; <= 3 for
   the others: PaTH, stick-breaking, DAPE and any scheme added since).
3. Evaluation at 8L at the evaluator's own batch (eval.tokens_per_batch tokens a forward) — the tiny model at 8 × 64
   tokens (B = 32), and a 4-layer, d=256, 8-head model at 2048 tokens (B = 8): forward time / NoPE's (interleaved
   rounds; target <= 2, <= 1.2 for the bias schemes, <= 3 for the schemes whose attention is written out or whose
   bias or transforms come from the data: Shaw, Transformer-XL, CoPE, PaTH, FoX, stick-breaking, DAPE, PoPE) and peak
   memory / NoPE's (target <= 1.5), for every scheme. Peak memory is measured for each scheme in a fresh process: the largest resident set seen (sampled every
   0.2 ms while its first forward runs, with glibc returning every allocation of 64 KiB or more to the OS) above the
   resident set just before it — what a mask kept for the next forward costs is in it.

On a GPU, scripts/bench_gpu.py measures what only CUDA has (FlexAttention training, MFU).

Writes results/benchmarks/<device>-<date>.csv and .md and prints the table. Usage:

    python scripts/bench.py                        # CPU: ~10 min on 2 cores
    python scripts/bench.py --threads 1 --rounds 3   # the evaluator's shapes on one thread
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pe_bench import schemes  # noqa: E402
from pe_bench.build import build_model  # noqa: E402
from pe_bench.config import compose, scheme_spec, with_options  # noqa: E402
from pe_bench.schemes import LengthNotSupported  # noqa: E402
from pe_bench.train import loss_of, make_optimizer  # noqa: E402

# Every scheme has a target in each section: its own where listed, else the default (a scheme added later is held to
# the default until it is listed).
TRAIN_TARGETS = {**dict.fromkeys(("sinusoidal", "learned", "rope", "alibi", "t5", "kerple_log", "kerple_power",
                                  "sandwich", "ssmax", "layered"), 1.10),
                 **dict.fromkeys(("fire", "conv", "xpos", "hybrid", "fope"), 1.25),
                 **dict.fromkeys(("shaw", "xl", "cope", "fox", "pope"), 2.0)}
TRAIN_TARGET = 3.0  # the schemes whose attention is written out (PaTH, stick-breaking, DAPE) and any unlisted one
BIAS_SCHEMES = ("alibi", "t5", "kerple_log", "kerple_power", "sandwich", "fire", "hybrid")
EVAL_TIME_TARGET, EVAL_BIAS_TIME_TARGET, MEMORY_TARGET = 2.0, 1.2, 1.5
# explicit attention, data-dependent biases and transforms: within 3× NoPE's forward at 8L
EVAL_EXPLICIT_TIME_TARGET = 3.0
EXPLICIT_SCHEMES = ("shaw", "xl", "cope", "path", "fox", "stickbreaking", "dape", "pope")
VOCAB = 256
MMAP_THRESHOLD = 65536  # bytes: larger allocations are mmapped and given back when freed, so RSS tracks live memory


# ---------------------------------------------------------------------------------------------------------------
# The reference: a minimal nanoGPT-style decoder (no positional encoding, as NoPE) and its training step
# ---------------------------------------------------------------------------------------------------------------
class RefBlock(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.fc, self.out = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class RefGPT(nn.Module):
    def __init__(self, layers: int, d: int, h: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(RefBlock(d, h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def ref_optimizer(model: nn.Module, lr: float, wd: float) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


# ---------------------------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------------------------
def model_for(name: str, model: str, seq_len: int, dev: torch.device, overrides: tuple[str, ...] = (),
              length: int | None = None):
    """(model, cfg) of a scheme; a scheme that refuses ``length`` is built with its first eval variant (learned:
    clamp), as the evaluator reports such lengths."""
    preset, *more = model.split(",")  # "tiny" or "tiny,model.d_model=256,model.n_heads=8"
    cfg = compose([f"scheme={name}", f"model={preset}", *more, f"train.seq_len={seq_len}", *overrides])
    spec = scheme_spec(cfg.scheme)
    torch.manual_seed(0)
    m = build_model(cfg, VOCAB, spec).to(dev)
    if length:
        try:
            with torch.no_grad():
                m(torch.zeros(1, length, dtype=torch.long, device=dev))
        except LengthNotSupported:  # the variant runs the probe too: every measured forward is a process's second
            m = build_model(cfg, VOCAB, with_options(spec, spec.eval_variants[0])).to(dev)
            with torch.no_grad():
                m(torch.zeros(1, length, dtype=torch.long, device=dev))
        m._mask_cache = None  # the probe's mask is not the measured forward's
    return m, cfg


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, dev: torch.device, n: int) -> float:
    sync(dev)
    t = time.perf_counter()
    for _ in range(n):
        fn()
    sync(dev)
    return (time.perf_counter() - t) / n


def train_step_fn(model: nn.Module, opt, x: torch.Tensor, y: torch.Tensor, ctx, pe_bench: bool):
    def step() -> None:
        with ctx:
            logits = model(x)
        loss = loss_of(logits, y, None) if pe_bench else F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def forward_fn(model: nn.Module, x: torch.Tensor, ctx):
    """One evaluation forward of ``model`` on ``x`` (no autograd: the evaluator's lean path)."""
    def forward() -> None:
        with torch.inference_mode(), ctx:
            model(x)
    return forward


def in_turn(names: list[str], r: int) -> list[str]:
    """Round r's order: rotated by r and reversed every other round, so that no one is always measured first or
    right after the same neighbour (the order alone moved a ratio by ~5 % here)."""
    order = names[r % len(names):] + names[: r % len(names)]
    return order[::-1] if r % 2 else order


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory_child(name: str, model: str, seq_len: int, length: int, batch: int, device: str) -> None:
    """In a fresh process: the forward's peak memory above what was resident just before it (bytes, printed)."""
    dev = torch.device(device)
    m, _ = model_for(name, model, seq_len, dev, length=length)
    m.eval()
    x = torch.randint(0, VOCAB, (batch, length), device=dev)
    with torch.inference_mode():  # the first forward: what is built once and kept (a bias mask) counts too
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            m(x)
            torch.cuda.synchronize()
            print(json.dumps({"peak": torch.cuda.max_memory_allocated() - base}))
            return
        base, peak, done = rss_bytes(), [0], threading.Event()

        def poll() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], rss_bytes())
                time.sleep(0.0002)

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        m(x)
        done.set()
        t.join()
        peak[0] = max(peak[0], rss_bytes())
    print(json.dumps({"peak": peak[0] - base}))


def peak_memory(name: str, model: str, seq_len: int, length: int, batch: int, device: str) -> int:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": "0"}
    out = subprocess.run([sys.executable, __file__, "--memory-child", name, model, str(seq_len), str(length),
                          str(batch), device], capture_output=True, text=True, env=env, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak"])


def verdict(ratio: float, target: float | None) -> str:
    return "" if target is None else ("ok" if ratio <= target else "MISS")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="training steps per scheme per round")
    ap.add_argument("--schemes", default="", help="sections 2-3: only these schemes (comma list; nope, the "
                    "reference, is always in); the files are then named <device>-<date>-s<sections>-some")
    ap.add_argument("--sections", default="1,2,3", help="which sections to run (comma list); the files are named "
                    "<device>-<date>[-s<sections>] when not all")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks")
    ap.add_argument("--memory-child", nargs=6, metavar=("SCHEME", "MODEL", "L", "T", "B", "DEVICE"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        n, mdl, L, T, B, d = args.memory_child
        peak_memory_child(n, mdl, int(L), int(T), int(B), d)
        return
    dev = torch.device(args.device)
    bf16 = dev.type == "cuda"
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else torch.autocast("cpu", enabled=False)
    names = schemes.available() if not args.schemes else sorted({"nope", *args.schemes.split(",")})
    L, B = 64, 32
    t0 = time.perf_counter()
    rows: list[dict] = []

    sections = {int(s) for s in args.sections.split(",")}
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, VOCAB, (B, L + 1), generator=g).to(dev)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    if 1 in sections:
        rows += reference_section(dev, ctx, args, x, y, L, B)
    if 2 in sections:
        rows += train_section(dev, ctx, args, names, x, y, L, B)
    if 3 in sections:
        rows += eval_section(dev, ctx, args, names, g, L)
    write(rows, args, dev, time.perf_counter() - t0, sections)


def reference_section(dev, ctx, args, x, y, L: int, B: int) -> list[dict]:
    """1. pe-bench's training step vs the reference loop (NoPE, the tiny model: 4 layers, d=128, 4 heads)."""
    rows = []
    ours, cfg = model_for("nope", "tiny", L, dev)
    ref = RefGPT(cfg.model.n_layers, cfg.model.d_model, cfg.model.n_heads).to(dev)
    steps = {"pe-bench": train_step_fn(ours, make_optimizer(ours, cfg.train, dev), x, y, ctx, True),
             "reference": train_step_fn(ref, ref_optimizer(ref, cfg.train.lr, cfg.train.weight_decay), x, y, ctx,
                                        False)}
    for fn in steps.values():
        timed(fn, dev, 2)
    per_round = {k: [] for k in steps}
    for r in range(args.rounds):
        for k in in_turn(list(steps), r):
            per_round[k].append(timed(steps[k], dev, args.steps))
    ratio = statistics.median(b / a for a, b in zip(per_round["pe-bench"], per_round["reference"]))
    rows.append({"section": "1 train step vs reference", "scheme": "nope", "shape": f"tiny L={L} B={B}",
                 "tokens_per_s": round(B * L / statistics.median(per_round["pe-bench"])),
                 "ratio": round(ratio, 3), "what": "tokens/s ÷ reference's (higher is better)", "target": ">= 1.0",
                 "verdict": "ok" if ratio >= 1.0 else "MISS",
                 "note": f"reference {B * L / statistics.median(per_round['reference']):,.0f} tok/s"})
    print(f"[1] pe-bench train step {ratio:.3f}× the reference's tokens/s", flush=True)
    return rows


def train_section(dev, ctx, args, names: list[str], x, y, L: int, B: int) -> list[dict]:
    """2. every scheme's training step ÷ NoPE's."""
    rows, setups = [], {}
    for n in names:
        m, c = model_for(n, "tiny", L, dev)
        setups[n] = train_step_fn(m, make_optimizer(m, c.train, dev), x, y, ctx, True)
        timed(setups[n], dev, 1)
    times = {n: [] for n in names}
    for r in range(args.rounds):
        for n in in_turn(names, r):
            times[n].append(timed(setups[n], dev, args.steps))
    for n in names:
        r = statistics.median(a / b for a, b in zip(times[n], times["nope"]))
        rows.append({"section": "2 train step", "scheme": n, "shape": f"tiny L={L} B={B}",
                     "tokens_per_s": round(B * L / statistics.median(times[n])), "ratio": round(r, 3),
                     "what": "step time ÷ nope's", "target": TRAIN_TARGETS.get(n, TRAIN_TARGET),
                     "verdict": verdict(r, TRAIN_TARGETS.get(n, TRAIN_TARGET)), "note": ""})
    print("[2] train steps measured", flush=True)
    return rows


def eval_section(dev, ctx, args, names: list[str], g: torch.Generator, L: int) -> list[dict]:
    """3. evaluation at 8L: time (interleaved, in this process) and peak memory (a fresh process per scheme)."""
    rows = []
    per_batch = compose([]).eval.tokens_per_batch  # the evaluator's batch: this many tokens a forward
    for label, mdl, trained, length in (("tiny", "tiny", L, 8 * L),
                                        ("d256", "tiny,model.d_model=256,model.n_heads=8", 256, 2048)):
        batch = max(1, per_batch // length)
        xe = torch.randint(0, VOCAB, (batch, length), generator=g).to(dev)
        forwards = {n: forward_fn(model_for(n, mdl, trained, dev, (), length)[0].eval(), xe, ctx) for n in names}
        for n in names:
            timed(forwards[n], dev, 1)
        et = {n: [] for n in names}
        for r in range(max(2, args.rounds - 2) if label == "d256" else args.rounds):
            for n in in_turn(names, r):
                et[n].append(timed(forwards[n], dev, 1))
        del forwards
        shape = f"{label} T={length} B={batch}"
        peaks = {n: peak_memory(n, mdl, trained, length, batch, args.device) for n in names}
        for n in names:
            r = statistics.median(a / b for a, b in zip(et[n], et["nope"]))
            mr = peaks[n] / max(peaks["nope"], 1)
            time_target = (EVAL_BIAS_TIME_TARGET if n in BIAS_SCHEMES else
                           EVAL_EXPLICIT_TIME_TARGET if n in EXPLICIT_SCHEMES else EVAL_TIME_TARGET)
            rows.append({"section": "3 eval time", "scheme": n, "shape": shape,
                         "tokens_per_s": round(xe.numel() / statistics.median(et[n])), "ratio": round(r, 3),
                         "what": "forward time ÷ nope's", "target": time_target, "verdict": verdict(r, time_target),
                         "note": ""})
            rows.append({"section": "3 eval memory", "scheme": n, "shape": shape, "tokens_per_s": "",
                         "ratio": round(mr, 3), "what": "peak memory ÷ nope's", "target": MEMORY_TARGET,
                         "verdict": verdict(mr, MEMORY_TARGET), "note": f"{peaks[n] / 2**20:,.0f} MiB"})
        print(f"[3] evaluation at {shape} measured", flush=True)
    return rows


COLUMNS = ["section", "scheme", "shape", "tokens_per_s", "ratio", "what", "target", "verdict", "note"]


def write(rows: list[dict], args, dev: torch.device, seconds: float, sections: set[int]) -> None:
    device = torch.cuda.get_device_name(dev).replace(" ", "-") if dev.type == "cuda" else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    part = "" if sections >= {1, 2, 3} else "-s" + "".join(map(str, sorted(sections)))
    part += "-some" if args.schemes else ""
    base = args.out / f"{device}-{time.strftime('%Y-%m-%d')}{part}"
    what = f"device {device if dev.type == 'cuda' else 'cpu (' + torch.backends.cpu.get_cpu_capability() + ')'}"
    write_table(rows, base, f"{what}, torch {torch.__version__}, {torch.get_num_threads()} threads", args.rounds,
                seconds)


def write_table(rows: list[dict], base: Path, what: str, rounds: int, seconds: float) -> None:
    """``base``.csv and ``base``.md (a header — ``what``, the rounds, the command, the wall time — and the table)."""
    import csv

    with open(f"{base}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    script = Path(sys.argv[0]).name
    head = f"{what}, {rounds} interleaved rounds, `python scripts/{script} {' '.join(sys.argv[1:])}`".rstrip()
    misses = [r for r in rows if r["verdict"] == "MISS"]
    lines = [f"# pe-bench benchmark, {time.strftime('%Y-%m-%d')}", "", f"{head}, {seconds:.0f} s", "",
             f"{len(misses)} of {sum(bool(r['verdict']) for r in rows)} targets missed.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    Path(f"{base}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[2:]))
    print(f"wrote {base}.csv and {base}.md")


if __name__ == "__main__":
    main()

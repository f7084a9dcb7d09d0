"""pe-bench on a CUDA GPU, measured side by side in one process (interleaved rounds, medians of per-round ratios).

1. FlexAttention's kernel options: the candidates of CANDIDATES in order, each compiled for the training step of every
   bias scheme no earlier candidate compiled for (a fresh process per scheme, shape and candidate, all at once,
   beside the SDPA steps: this also fills torch.compile's on-disk caches, so the timed process compiles from them).
   Each scheme is timed below with its first candidate that compiles; the one for all goes in
   pe_bench.model.attention.FLEX_KERNEL_OPTIONS for this GPU.
2. Training step of model=small, compiled, bf16, at every shape of --shapes (L×B; default 512×16) in one interleaved
   run: every bias scheme on FlexAttention and on SDPA with a materialised mask, ÷ NoPE's on flash causal SDPA at the
   same shape (targets: flex <= 1.15× NoPE's, FlexAttention's published ratio, and <= SDPA+mask's); the learned
   tables (T5, KERPLE) on flex both ways (pe_bench.schemes.base.FLEX_LEARNED_TABLE; --table-modes 1: pe-bench's
   default only).
3. Evaluation forward at 8L (T = 4096, B = 4, eager model, bf16): the same ratios (the evaluator's path).
4. MFU of NoPE's training step by batch size (6·N + 12·layers·d·T flops per token over the device's dense bf16
   peak; the attention term counted whole, as nanoGPT and PaLM do), and a profile of the step at B = 128.
5. CUDA graphs for the tiny models of the tasks sweep (model=tiny, train=task: L = 32, B = 32): the trainer's step
   compiled as `train.compile=on` (torch's default mode) and as `train.compile=graphs` (mode="reduce-overhead"),
   tokens/s of each and graphs ÷ default, for NoPE, RoPE and ALiBi.

Usage (on the GPU machine, from the project root): python scripts/bench_gpu.py --out DIR
  [--sections 1,2,3,4,5] [--shapes 512x64,1024x16] [--schemes alibi,t5]
Writes DIR/gpu-bench.csv, DIR/gpu-bench.md (the table and the header: device, torch, command, wall time) and
DIR/gpu-profile.txt. `--device cpu` runs the same code on the CPU at the shapes given (a check of the script
before a GPU sitting: no flex training there, so those rows say "failed"; no section 1 or 4).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch._dynamo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench import VOCAB, in_turn, model_for, timed, train_step_fn, write_table  # noqa: E402

from pe_bench.model import attention  # noqa: E402
from pe_bench.schemes import base as scheme_base  # noqa: E402
from pe_bench.train import make_optimizer  # noqa: E402

BIAS_SCHEMES = ("alibi", "t5", "kerple_log", "kerple_power", "sandwich", "hybrid")  # FIRE: refused on flex
# Kernel options to try for the flex training step, in order ("fwd_"/"bwd_" keys reach one kernel only). torch's sm90
# defaults at head dimension 64: forward 128/64 with 3 stages, backward 64/128/128/64 with 3 stages and 8 warps.
CANDIDATES = ({"fwd_BLOCK_M": 64},
              {"fwd_num_stages": 2},
              {"fwd_num_stages": 2, "bwd_BLOCK_N1": 64, "bwd_BLOCK_M2": 64, "bwd_num_warps": 4})
# The schemes whose per-distance table has gradients, timed on flex with each way of taking it (FLEX_LEARNED_TABLE in
# pe_bench.schemes.base; the first is pe-bench's default and the row named plain "flex").
LEARNED_TABLES = ("t5", "kerple_log", "kerple_power")
TABLE_MODES = (scheme_base.FLEX_LEARNED_TABLE, *({"matrix", "distance"} - {scheme_base.FLEX_LEARNED_TABLE}))
L, B, EVAL_T, EVAL_B = 512, 16, 4096, 4
SHAPES = ((L, B),)  # the training shapes of section 2 (--shapes); the first is section 1's
MODEL = "small"
MFU_BATCHES = (16, 64, 128, 256)
GRAPH_SCHEMES, GRAPH_L, GRAPH_B = ("nope", "rope", "alibi"), 32, 32  # section 5: model=tiny at train=task's shape
GRAPH_MODEL = "tiny,train=task"
TRAIN_TARGET = 1.15
# Dense bf16 tensor-core peaks (spec sheets), the first name that the device's contains: the PCIe H100 is slower.
PEAK_BF16_FLOPS = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12}
CTX = None  # bf16 autocast, set in main
DEV = torch.device("cuda")


def set_flex_options(options: dict | None) -> None:
    """Make ``options`` pe-bench's FlexAttention kernel options for this GPU at head dimension 64 (None: torch's)."""
    if DEV.type != "cuda":
        return
    key = (*torch.cuda.get_device_capability(), 64)
    if attention.FLEX_KERNEL_OPTIONS.get(key) == options:  # unchanged: compiled graphs guarded on it stay valid
        return
    attention.FLEX_KERNEL_OPTIONS.pop(key, None)
    if options:
        attention.FLEX_KERNEL_OPTIONS[key] = dict(options)


def batch(b: int, t: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, VOCAB, (b, t + 1), generator=g).to(DEV)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def in_table_mode(table: str, fn):
    """``fn`` run with pe_bench.schemes.base.FLEX_LEARNED_TABLE = ``table`` (a global its compiled graph is guarded
    on: each timed model keeps the mode it was compiled in, or it would recompile inside the rounds)."""
    def f() -> None:
        scheme_base.FLEX_LEARNED_TABLE = table
        fn()
    return f


def train_step(name: str, backend: str, shape: tuple[int, int], table: str | None = None, model: str = "",
               mode: str | None = None):
    """The compiled bf16 training step of ``model`` (default: --model) for ``name`` on ``backend`` at ``shape``
    (L, B), warmed up (with FLEX_LEARNED_TABLE = ``table`` when given; torch.compile's ``mode``: "reduce-overhead"
    is train.compile=graphs, each step a new replay): (step, flops per token)."""
    seq, b = shape
    m, c = model_for(name, model or MODEL, seq, DEV, (f"attention.backend={backend}",))
    x, y = batch(b, seq)
    step = train_step_fn(torch.compile(m, dynamic=False, mode=mode), make_optimizer(m, c.train, DEV), x, y, CTX, True)
    fn = step
    if mode == "reduce-overhead":
        def fn() -> None:
            torch.compiler.cudagraph_mark_step_begin()
            step()
    timed(in_table_mode(table, fn) if table else fn, DEV, 3)
    return fn, 6 * m.num_params() + 12 * c.model.n_layers * c.model.d_model * seq


def eval_forward(name: str, backend: str):
    """The evaluator's forward at 8L (eager model, bf16, inference mode), warmed up."""
    m, _ = model_for(name, MODEL, L, DEV, (f"attention.backend={backend}",))
    m.eval()
    x, _ = batch(EVAL_B, EVAL_T, seed=1)

    def f() -> None:
        with torch.inference_mode(), CTX:
            m(x)
    timed(f, DEV, 2)
    return f


def child(name: str, backend: str, shape: tuple[int, int], candidate: int) -> None:
    """In a fresh process: compile (and so cache) one training step, and for flex the 8L forward; print the outcome."""
    set_flex_options(CANDIDATES[candidate] if candidate >= 0 else None)
    backend, _, table = backend.partition("/")  # flex/distance: the learned table taken the other way
    try:
        if backend == "graphs":  # graphs/default, graphs/graphs: section 5's tiny step in that mode
            train_step(name, "auto", shape, model=GRAPH_MODEL, mode=graph_modes()[table])
            print(json.dumps({"ok": True}))
            return
        train_step(name, backend, shape, table or None)
        if backend == "flex" and not table and shape == SHAPES[0]:
            eval_forward(name, backend)
        print(json.dumps({"ok": True}))
    except Exception as e:  # the outcome is the data here: which options compile
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}))


def shape_text(shape: tuple[int, int], backend: str, model: str = "") -> str:
    return f"{model or MODEL} L={shape[0]} B={shape[1]} {backend}"


def run_children(jobs: list[tuple], workers: int) -> dict:
    """jobs: (scheme, backend, (L, B), candidate) -> {job: {"ok": bool, "error": str}}, each in a fresh process."""
    def one(job):
        name, backend, (seq, b), cand = job
        shapes = ",".join(f"{a}x{c}" for a, c in SHAPES)
        out = subprocess.run([sys.executable, __file__, "--device", DEV.type, "--model", MODEL, "--shapes", shapes,
                              "--eval-shape", f"{EVAL_T}x{EVAL_B}", "--child", name, backend, str(seq), str(b),
                              str(cand)], capture_output=True, text=True)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        return job, json.loads(lines[-1]) if lines else {"ok": False, "error": out.stderr.strip()[-300:]}

    with ThreadPoolExecutor(workers) as pool:
        return dict(pool.map(one, jobs))


def search(workers: int, sections: set[int], modes: tuple[str, ...]) -> tuple[list[dict], dict[str, int | None]]:
    """Section 1: which candidate compiles for which scheme (rows, at the first shape), and the candidate index to
    use per scheme: the candidates in order, each tried only on the schemes no earlier one compiled for. Beside them,
    the steps the later sections time at every shape, so that they compile from the caches."""
    first = SHAPES[0]
    jobs = [(n, "flex", first, 0) for n in BIAS_SCHEMES]
    jobs += [(n, "sdpa", shape, -1) for shape in SHAPES for n in ("nope", *BIAS_SCHEMES)]
    jobs += [(n, f"flex/{t}", shape, 0) for shape in SHAPES for n in BIAS_SCHEMES if n in LEARNED_TABLES
             for t in modes[1:]]
    jobs += [(n, "flex", shape, 0) for shape in SHAPES[1:] for n in BIAS_SCHEMES]
    jobs += [("nope", "sdpa", (L, b), -1) for b in MFU_BATCHES if (L, b) not in SHAPES] if 4 in sections else []
    jobs += [(n, f"graphs/{m}", (GRAPH_L, GRAPH_B), -1) for n in GRAPH_SCHEMES for m in graph_modes()] \
        if 5 in sections else []
    done = run_children(jobs, workers)
    for i in range(1, len(CANDIDATES)):
        failing = [n for n in BIAS_SCHEMES if not any(done.get((n, "flex", first, j), {}).get("ok") for j in range(i))]
        if failing:
            done |= run_children([(n, "flex", first, i) for n in failing], workers)
    rows = [row("1 flex kernel options", job[0], shape_text(job[2], job[1]),
                note=f"{json.dumps(CANDIDATES[job[3]])}: " + ("compiles" if out["ok"] else out["error"]))
            for job, out in done.items() if job[1].startswith("flex") and job[2] == first]
    rows += [row("1 compile", job[0], shape_text(job[2], job[1], "tiny" if job[1].startswith("graphs") else MODEL),
                 note=out["error"])
             for job, out in done.items() if not out["ok"] and (job[2] != first or job[1] == "sdpa")]
    chosen = {n: next((i for i in range(len(CANDIDATES)) if done.get((n, "flex", first, i), {}).get("ok")), None)
              for n in BIAS_SCHEMES}
    return rows, chosen


def row(section: str, scheme: str, shape: str, tokens_per_s="", ratio="", what="", target="", verdict="",
        note="") -> dict:
    return {"section": section, "scheme": scheme, "shape": shape, "tokens_per_s": tokens_per_s, "ratio": ratio,
            "what": what, "target": target, "verdict": verdict, "note": note}


def rounds(fns: dict, n: int, steps: int) -> dict:
    times = {k: [] for k in fns}
    for r in range(n):
        for k in in_turn(sorted(fns), r):
            times[k].append(timed(fns[k], DEV, steps))
    return times


def ratio(times: dict, a, b) -> float:
    return round(statistics.median(x / y for x, y in zip(times[a], times[b])), 3)


def timed_options(chosen: dict) -> int | None:
    """The candidate the flex models of one timed process share: the one most schemes compile with. Kernel options are
    a global that compiled graphs are guarded on, so models of other options would recompile inside the rounds."""
    picked = [c for c in chosen.values() if c is not None]
    return max(set(picked), key=picked.count) if picked else None


def untimed(chosen: dict, n: str, section: str, shape: str) -> dict | None:
    """The row of a scheme not timed on flex here (no candidate compiles, or another candidate than the shared one)."""
    if chosen[n] is None:
        return row(section, n, shape, target=TRAIN_TARGET, verdict="MISS", note="no candidate compiles")
    if chosen[n] != timed_options(chosen):
        return row(section, n, shape, note=f"compiles with {json.dumps(CANDIDATES[chosen[n]])} only: not timed "
                   "beside the others (run it alone with --schemes)")
    return None


def failed(section: str, scheme: str, shape: str, e: Exception) -> dict:
    """A step that failed to build or compile is a row that says so, not a lost benchmark."""
    return row(section, scheme, shape, target=TRAIN_TARGET, verdict="MISS",
               note=f"failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}")


def train_section(chosen: dict, args) -> list[dict]:
    """Section 2: flex and SDPA+mask training steps of every bias scheme ÷ NoPE's flash step, at every shape, all
    timed in the same rounds."""
    fns, out = {}, []
    for shape in SHAPES:
        fns[(shape, "nope", "sdpa")] = train_step("nope", "sdpa", shape)[0]
        for n in BIAS_SCHEMES:
            try:
                fns[(shape, n, "sdpa")] = train_step(n, "sdpa", shape)[0]
            except Exception as e:
                out.append(failed("2 train step", n, shape_text(shape, "sdpa"), e))
                continue
            skip = untimed(chosen, n, "2 train step", shape_text(shape, "flex"))
            if skip:
                out.append(skip)
                continue
            set_flex_options(CANDIDATES[chosen[n]])
            for table in args.table_modes if n in LEARNED_TABLES else args.table_modes[:1]:
                backend = "flex" if table == TABLE_MODES[0] else f"flex/{table}"
                try:
                    fns[(shape, n, backend)] = in_table_mode(table, train_step(n, "flex", shape, table)[0])
                except Exception as e:
                    out.append(failed("2 train step", n, shape_text(shape, backend), e))
    times = rounds(fns, args.rounds, args.steps)
    for (shape, n, backend) in sorted(fns):
        r = ratio(times, (shape, n, backend), (shape, "nope", "sdpa"))
        tps = round(shape[0] * shape[1] / statistics.median(times[(shape, n, backend)]))
        if not backend.startswith("flex"):
            out.append(row("2 train step", n, shape_text(shape, backend), tps, r, "step time ÷ nope's (flash)"))
            continue
        vs_mask = ratio(times, (shape, n, backend), (shape, n, "sdpa"))
        ok = r <= TRAIN_TARGET and vs_mask <= 1.0
        note = f"÷ sdpa+mask {vs_mask}; options {json.dumps(CANDIDATES[chosen[n]])}"
        if n in LEARNED_TABLES:
            note += f"; learned table by {backend.partition('/')[2] or TABLE_MODES[0]}"
        out.append(row("2 train step", n, shape_text(shape, backend), tps, r, "step time ÷ nope's (flash)",
                       f"<= {TRAIN_TARGET}, <= sdpa+mask", "ok" if ok else "MISS", note))
    print("[2] training steps measured", flush=True)
    return out


def eval_section(chosen: dict, args) -> list[dict]:
    """Section 3: the 8L forward of every bias scheme on flex and SDPA (by blocks of rows) ÷ NoPE's."""
    fns, out = {("nope", "sdpa"): eval_forward("nope", "sdpa")}, []
    for n in BIAS_SCHEMES:
        fns[(n, "sdpa")] = eval_forward(n, "sdpa")
        skip = untimed(chosen, n, "3 eval 8L", f"{MODEL} T={EVAL_T} B={EVAL_B} flex")
        if skip:
            out.append(skip)
        else:
            set_flex_options(CANDIDATES[chosen[n]])
            try:
                fns[(n, "flex")] = eval_forward(n, "flex")
            except Exception as e:
                out.append(failed("3 eval 8L", n, f"{MODEL} T={EVAL_T} B={EVAL_B} flex", e))
    times = rounds(fns, args.rounds, 2)
    for (n, backend) in sorted(fns):
        r = ratio(times, (n, backend), ("nope", "sdpa"))
        tps = round(EVAL_B * EVAL_T / statistics.median(times[(n, backend)]))
        note = f"÷ sdpa {ratio(times, (n, 'flex'), (n, 'sdpa'))}" if backend == "flex" else ""
        ok = backend != "flex" or (r <= TRAIN_TARGET and ratio(times, (n, "flex"), (n, "sdpa")) <= 1.0)
        out.append(row("3 eval 8L", n, f"{MODEL} T={EVAL_T} B={EVAL_B} {backend}", tps, r, "forward time ÷ nope's",
                       f"<= {TRAIN_TARGET}, <= sdpa" if backend == "flex" else "",
                       ("ok" if ok else "MISS") if backend == "flex" else "", note))
    print("[3] 8L forwards measured", flush=True)
    return out


def mfu_section(args, peak: float | None) -> list[dict]:
    """Section 4: NoPE's compiled training step by batch: tokens/s and MFU; the largest batch's profile."""
    fns, flops = {}, 0.0
    for b in MFU_BATCHES:
        fns[b], flops = train_step("nope", "sdpa", (L, b))
    times = rounds(fns, args.rounds, args.steps)
    out = []
    for b in MFU_BATCHES:
        tps = b * L / statistics.median(times[b])
        mfu = f"{tps * flops / peak:.1%}" if peak else "unknown peak"
        out.append(row("4 MFU", "nope", f"{MODEL} L={L} B={b} sdpa", round(tps), "", "MFU", ">= 25%", "ok" if peak and
                       tps * flops / peak >= 0.25 else "MISS", f"MFU {mfu}, {1000 * statistics.median(times[b]):.1f} ms"))
    profile(fns[MFU_BATCHES[-2]], args.out / "gpu-profile.txt")
    print("[4] MFU measured", flush=True)
    return out


def graph_modes() -> dict[str, str | None]:
    """Section 5's torch.compile modes by label; the CPU has no CUDA graphs to take."""
    return {"default": None, "graphs": "reduce-overhead" if DEV.type == "cuda" else None}


def graphs_section(args) -> list[dict]:
    """Section 5: the tiny models' training step compiled in torch's default mode (train.compile=on) and with CUDA
    graphs (train.compile=graphs: mode="reduce-overhead"), interleaved: tokens/s of each, graphs ÷ default."""
    fns, out = {}, []
    shape = (GRAPH_L, GRAPH_B)
    for n in GRAPH_SCHEMES:
        for label, mode in graph_modes().items():
            try:
                fns[(n, label)] = train_step(n, "auto", shape, model=GRAPH_MODEL, mode=mode)[0]
            except Exception as e:
                out.append(failed("5 cuda graphs", n, f"tiny L={GRAPH_L} B={GRAPH_B} {label}", e))
    times = rounds(fns, args.rounds, 4 * args.steps)
    for (n, label) in sorted(fns):
        tps = round(GRAPH_L * GRAPH_B / statistics.median(times[(n, label)]))
        r = ratio(times, (n, label), (n, "default")) if (n, "default") in fns else ""
        out.append(row("5 cuda graphs", n, f"tiny L={GRAPH_L} B={GRAPH_B} compile={label}", tps, r,
                       "step time ÷ the default mode's",
                       note="" if DEV.type == "cuda" else "no CUDA graphs on the CPU: the default mode twice"))
    print("[5] CUDA graphs measured", flush=True)
    return out


def profile(fn, path: Path) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    path.write_text(f"NoPE, model=small, L={L}, B={MFU_BATCHES[-2]}, compiled bf16 step, 3 steps\n\n"
                    + prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))


def parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    """"512x64,1024x16" -> ((512, 64), (1024, 16)): L×B of each training shape."""
    try:
        shapes = tuple((int(a), int(b)) for a, b in (part.lower().split("x") for part in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: give L×B pairs, e.g. 512x64,1024x16") from None
    if min(min(sh) for sh in shapes) < 1:
        raise argparse.ArgumentTypeError(f"{text}: give L×B pairs of positive numbers, e.g. 512x64,1024x16")
    return shapes


def main() -> None:
    global CTX, BIAS_SCHEMES, SHAPES, MODEL, DEV, EVAL_T, EVAL_B
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="training steps per model per round")
    ap.add_argument("--workers", type=int, default=16, help="compile processes at once (section 1)")
    ap.add_argument("--sections", default="1,2,3,4,5")
    ap.add_argument("--schemes", default=",".join(BIAS_SCHEMES), help="the bias schemes measured (comma list)")
    ap.add_argument("--shapes", type=parse_shapes, default=((L, B),), help="section 2's training shapes, L×B (comma list)")
    ap.add_argument("--table-modes", type=int, default=len(TABLE_MODES), choices=range(1, len(TABLE_MODES) + 1),
                    help="1: the learned tables on flex pe-bench's way only")
    ap.add_argument("--model", default=MODEL, help="sections 2 and 3's model preset (a quick check: tiny)")
    ap.add_argument("--eval-shape", type=parse_shapes, default=((EVAL_T, EVAL_B),), help="section 3's forward, T×B")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a check of the script")
    ap.add_argument("--child", nargs=5, metavar=("SCHEME", "BACKEND", "L", "B", "CANDIDATE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    DEV, MODEL, SHAPES = torch.device(args.device), args.model, args.shapes
    (EVAL_T, EVAL_B), = args.eval_shape
    args.table_modes = TABLE_MODES[:args.table_modes]
    if DEV.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu.py measures the CUDA path: no CUDA GPU is visible (the CPU benchmark is scripts/bench.py; "
                 "--device cpu checks this script)")
    CTX = torch.autocast(DEV.type, dtype=torch.bfloat16)
    # Every model measured here is compiled in this one process: a graph each, past dynamo's default limit of 8
    # recompiles of one function (beyond it dynamo would run the rest eagerly, and time the wrong thing). 64 was hit
    # by 16 models on 2026-11-27 (a graph break compiled each layer's Block.forward on its own): 1024.
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)
    if args.child:
        n, backend, seq, b, cand = args.child
        child(n, backend, (int(seq), int(b)), int(cand))
        return
    BIAS_SCHEMES = tuple(args.schemes.split(","))
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    order = [int(x) for x in args.sections.split(",") if not (DEV.type == "cpu" and int(x) in (1, 4))]
    sections = set(order)
    name = torch.cuda.get_device_name() if DEV.type == "cuda" else "cpu"
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
    rows: list[dict] = []

    def write() -> None:  # the table so far: a run stopped at its limit keeps what it has measured
        write_table(rows, args.out / "gpu-bench", f"device {name.replace(' ', '-')}, torch {torch.__version__}",
                    args.rounds, time.perf_counter() - t0)

    chosen = {n: 0 for n in BIAS_SCHEMES}
    run = {2: lambda: train_section(chosen, args), 3: lambda: eval_section(chosen, args),
           4: lambda: mfu_section(args, peak), 5: lambda: graphs_section(args)}
    try:
        if 1 in sections:
            found, chosen = search(args.workers, sections, args.table_modes)
            rows += found
            print(f"[1] flex options searched: {chosen}", flush=True)
            write()
        for number in (n for n in order if n != 1):  # in the order given: the one that matters most first
            try:
                rows += run[number]()
            except Exception as e:  # a section that fails is a row that says so; the others still run
                rows.append(failed(f"{number} section", "", "", e))
            write()
    except KeyboardInterrupt:  # `timeout -s INT`: the rows so far, then stop
        rows.append(row("stopped", "", "", note="interrupted at the time limit; later sections not measured"))
        write()
        sys.exit(130)


if __name__ == "__main__":
    main()

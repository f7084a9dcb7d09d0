"""Progress for training and evaluation: a tqdm bar on a terminal, plain log lines everywhere else.

Off a terminal (Slurm, nohup, a parallel sweep's train.log) or with the bar off (``--no-progress``: no bar, not
silence) the same progress is printed as plain text lines on stdout, flushed at once, no markup and no ANSI, so that
logs grep well:

    rope-tiny-pg19-L64-s0-1a2b3c4d step 300/1000 (30%) loss 2.134 lr 8.1e-04 41,230 tok/s ETA 1m12s
    rope-tiny-pg19-L64-s0-1a2b3c4d eval L=512 nonoverlapping: ppl 6.62 (12 windows, 6,144 tokens, 3,100 tok/s, 2.0 s)
    done rope-tiny-pg19-L64-s0-1a2b3c4d: final train loss 1.934, ppl 6.73 at L=64, 6.62 at 512 (8L), wall 2m37s

A training line is due when both LINE_FRACTION of the run's steps and LINE_MIN_S seconds have passed since the last
one, or LINE_MAX_S seconds whatever the steps (a long run still says it is alive), and at the last step.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable

import torch
from tqdm import tqdm

LINE_MIN_S = 30.0  # at most one training line per 30 s ...
LINE_FRACTION = 0.05  # ... and, faster than that, one per 5% of the run's steps ...
LINE_MAX_S = 300.0  # ... but at least one per 5 minutes, however long 5% takes


def interactive() -> bool:
    """stdout and stderr are both terminals: a bar (on stderr) is seen, and plain lines are not needed."""
    return _isatty(sys.stdout) and _isatty(sys.stderr)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced by a capture object, or closed
        return False


VERBOSE = "PE_BENCH_VERBOSE"  # set by --verbose (train, finetune, eval, sweep); inherited by the runs a sweep starts


def per_length_lines() -> bool:
    """One line per evaluated length × mode (on a terminal, or with --verbose), or one summary line per scheme
    variant and mode (a log file, a pipe, a Slurm job's output)."""
    return interactive() or os.environ.get(VERBOSE, "") not in ("", "0")


def use_bar(progress: bool) -> bool:
    """A bar when asked for and on a terminal; otherwise plain lines."""
    return progress and interactive()


def say(line: str) -> None:
    """One plain line on stdout, flushed (above any bar)."""
    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()


def duration(seconds: float) -> str:
    """45s, 1m12s, 2h05m."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class TrainProgress:
    """The training loop's progress: call ``step`` after every optimizer step, ``postfix`` at each train.csv row
    (the bar's loss/lr/tok/s, read when the loop syncs anyway), ``close`` at the end.

    The loss in a plain line is the mean since the previous line; the per-step losses stay on the device until a
    line is printed (one host sync per line). ETA: the steps left at this session's rate after its first step
    (which holds compilation and warm-up)."""

    def __init__(self, name: str, start: int, total: int, tokens_per_step: int, bar: bool, quiet: bool = False,
                 clock: Callable[[], float] = time.perf_counter, min_s: float | None = None,
                 fraction: float | None = None, max_s: float | None = None) -> None:
        self.name, self.total, self.tokens_per_step, self.clock = name, total, tokens_per_step, clock
        self.min_s = LINE_MIN_S if min_s is None else min_s
        self.max_s = LINE_MAX_S if max_s is None else max_s
        self.every = max(1, math.ceil((LINE_FRACTION if fraction is None else fraction) * total))
        self.lines = not bar and not quiet
        self.bar = tqdm(total=total, initial=start, desc=name, unit="step", dynamic_ncols=True, leave=False,
                        disable=not bar or quiet)
        self.t_line = self.t_start = clock()
        self.t_first = None  # when this session's first step ended
        self.first_done = self.last_line = start
        self.losses: list[torch.Tensor] = []

    def step(self, done: int, loss: torch.Tensor, lr: float) -> None:
        self.bar.update(1)
        if not self.lines:
            return
        now = self.clock()
        if self.t_first is None:
            self.t_first, self.first_done = now, done
        self.losses.append(loss.detach())
        since = now - self.t_line
        due = (done - self.last_line >= self.every and since >= self.min_s) or since >= self.max_s
        if due or done == self.total:
            self._line(done, lr, now)

    def _line(self, done: int, lr: float, now: float) -> None:
        mean = float(torch.stack(self.losses).float().mean()) if self.losses else float("nan")
        tps = (done - self.last_line) * self.tokens_per_step / max(now - self.t_line, 1e-9)
        if done > self.first_done:
            eta = (self.total - done) * (now - self.t_first) / (done - self.first_done)
        else:
            eta = (self.total - done) * (now - self.t_start) / max(1, done - self.last_line)
        say(f"{self.name} step {done}/{self.total} ({100 * done // self.total}%) loss {mean:.3f} lr {lr:.1e} "
            f"{tps:,.0f} tok/s ETA {duration(eta)}")
        self.losses, self.t_line, self.last_line = [], now, done

    def postfix(self, loss: float, lr: float, tokens_per_s: float) -> None:
        if not self.bar.disable:
            self.bar.set_postfix_str(f"loss {loss:.3f} lr {lr:.1e} {tokens_per_s:,.0f} tok/s", refresh=False)

    def close(self) -> None:
        self.bar.close()


class EvalProgress:
    """One evaluation pass (one length × mode): a bar of windows done/total with tokens/s and ETA on a terminal,
    and one plain line when it finishes (on a terminal too, above the bars: the numbers as they come)."""

    def __init__(self, name: str, total_windows: int, bar: bool, quiet: bool = False,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.name, self.total, self.quiet, self.clock = name, total_windows, quiet, clock
        self.t0 = clock()
        self.bar = tqdm(total=total_windows, desc=name, unit="win", dynamic_ncols=True, leave=False,
                        disable=not bar or quiet)

    def update(self, windows: int, tokens_so_far: int) -> None:
        self.bar.update(windows)
        if not self.bar.disable:
            tps = tokens_so_far / max(self.clock() - self.t0, 1e-9)
            self.bar.set_postfix_str(f"{tps:,.0f} tok/s", refresh=False)

    def close(self) -> None:
        self.bar.close()

    def finish(self, loss: float, windows: int, tokens: int) -> None:
        self.bar.close()
        if self.quiet:
            return
        seconds = self.clock() - self.t0
        ppl = f"{math.exp(loss):.2f}" if math.isfinite(loss) and loss < 700 else "nan"
        say(f"{self.name}: ppl {ppl} ({windows:,} windows, {tokens:,} tokens, "
            f"{tokens / max(seconds, 1e-9):,.0f} tok/s, {seconds:.1f} s)")

    def skip(self, reason: str) -> None:
        self.bar.close()
        if not self.quiet:
            say(f"{self.name}: not applicable ({reason})")


def run_summary(name: str, final_loss: float | str | None, rows: list[dict], train_len: int, seconds: float) -> str:
    """``done NAME: final train loss 1.934, ppl 6.73 at L=64, 6.62 at 512 (8L), wall 2m37s`` from the base scheme's
    nonoverlapping rows (at L, or the shortest length, and at the longest)."""
    rows = sorted((r for r in rows if r.get("mode") == "nonoverlapping"), key=lambda r: int(r["L_eval"]))
    parts = [f"final train loss {_num(final_loss, 3)}"]
    if rows:
        first = next((r for r in rows if int(r["L_eval"]) == train_len), rows[0])
        picked = [first] + [rows[-1]] * (rows[-1] is not first)
        for i, r in enumerate(picked):
            n = int(r["L_eval"])
            at = f"L={n}" if n == train_len else f"{n} ({_ratio(n / train_len)}L)"
            value = _num(r.get("ppl"), 2) if r.get("status", "ok") == "ok" else r.get("status") or "n/a"
            parts.append(f"{'ppl ' * (i == 0)}{value} at {at}")
    parts.append(f"wall {duration(seconds)}")
    return f"done {name}: " + ", ".join(parts)


def _num(value, digits: int) -> str:
    try:
        return f"{float(value):.{digits}f}"
    except (TypeError, ValueError):
        return "?"


def _ratio(r: float) -> str:
    return f"{r:g}"

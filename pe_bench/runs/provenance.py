"""Provenance: where a run's numbers come from beyond its config — the code's commit, torch, the device and the
CPU kernels (docs/trust.md, "Determinism")."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def _git(src: Path, *args: str) -> str | None:
    """``git -C src args``'s output, or None outside a git checkout (or without git)."""
    try:
        out = subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_sha(src: Path | None = None) -> str | None:
    """The commit checked out where pe-bench runs from (``src``: a folder of the checkout), or None."""
    out = _git(src or Path(__file__).resolve().parent, "rev-parse", "HEAD")
    return out.strip() or None if out is not None else None


def git_tracked(path: Path) -> bool:
    """Whether git tracks any file under ``path`` (False outside a git checkout, or where ``path`` is not)."""
    if not path.is_dir():
        return False
    out = _git(path, "ls-files", "--", ".")
    return bool(out and out.strip())


CODE = (":/pe_bench", ":/configs")  # what a run's numbers come from (results/ is tracked too, and rewritten by runs)


def git_modified(src: Path | None = None) -> bool | None:
    """Whether the tracked code (CODE) differs from that commit: a run made from modified code does not match its
    git_sha (None outside a git checkout)."""
    out = _git(src or Path(__file__).resolve().parent, "status", "--porcelain", "--untracked-files=no", "--", *CODE)
    return None if out is None else bool(out.strip())


def numerics(device: torch.device) -> str:
    """What a run's numbers depend on beyond its config (docs/trust.md, "Determinism"): the torch version, the device
    (the GPU model) and, on the CPU, the kernels' instruction set and the number of threads (reductions are split
    by thread). Recorded in meta.json;
    runs that differ in it are never one table row."""
    import torch

    if device.type == "cuda":
        return f"torch {torch.__version__}, {torch.cuda.get_device_name(device)}"
    return f"torch {torch.__version__}, cpu {cpu_isa()}, {torch.get_num_threads()} threads"


ISA_CAPS = ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")  # MKL's and oneDNN's own instruction-set caps


def cpu_isa() -> str:
    """The instruction set torch's CPU kernels dispatch to (AVX2, AVX512, ...). ATEN_CPU_CAPABILITY caps torch's own
    kernels only: unless MKL and oneDNN are capped alike, their matrix products keep the CPU's widest and the
    numbers are another CPU's, so the name says so (docs/trust.md, "Determinism")."""
    import torch

    isa = torch.backends.cpu.get_cpu_capability()
    cap = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    if cap and not all(os.environ.get(k, "").lower().startswith(cap) for k in ISA_CAPS):
        return f"{isa} (MKL, oneDNN not capped)"
    return isa


def device_name(device: torch.device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def environment(device: torch.device) -> dict[str, Any]:
    """What meta.json records of where a run was made."""
    import torch

    from pe_bench import __version__

    return {"pe_bench": __version__, "git_sha": git_sha(), "git_modified": git_modified(),
            "torch": torch.__version__, "python": platform.python_version(), "device": device_name(device),
            "host": platform.node(), "numerics": numerics(device)}

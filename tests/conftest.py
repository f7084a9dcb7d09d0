import os

import pytest
import torch

# Never touch the network or the user's caches from tests.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The tests read the evaluation's line per length × mode (what a terminal and --verbose show); the one summary line
# per mode that a log file gets without --verbose is tested in tests/test_progress.py.
os.environ.setdefault("PE_BENCH_VERBOSE", "1")


@pytest.fixture(scope="session", autouse=True)
def _isolated_caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("caches")
    os.environ["PE_BENCH_CACHE"] = str(root / "pe-bench")
    os.environ["HF_HOME"] = str(root / "hf")
    yield


@pytest.fixture(autouse=True)
def _cpu_unless_marked_cuda(request, monkeypatch):
    """Every test but those marked `cuda` runs as on a machine without a GPU.

    `train.device=auto` picks CUDA (with bf16 and torch.compile) when one is visible, so on a GPU machine the
    suite's CLI tests would train compiled bf16 models against expectations measured in fp32 on the CPU. Hidden
    here in-process (`torch.cuda.is_available`) and for the subprocesses a test starts (sweep workers, Slurm
    jobs) through CUDA_VISIBLE_DEVICES; `tests/test_cuda.py` is where the GPU is tested.
    """
    if request.node.get_closest_marker("cuda") is None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    yield


@pytest.fixture
def smoke_args(tmp_path):
    """CLI overrides for a seconds-long run in a temporary results directory."""
    return ["train=smoke", "eval=smoke", "model.n_layers=2", "model.d_model=64", f"results_dir={tmp_path / 'results'}"]

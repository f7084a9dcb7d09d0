import os

import pytest

# Never touch the network or the user's caches from tests.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def _isolated_caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("caches")
    os.environ["PE_BENCH_CACHE"] = str(root / "pe-bench")
    os.environ["HF_HOME"] = str(root / "hf")
    yield


@pytest.fixture
def smoke_args(tmp_path):
    """CLI overrides for a seconds-long run in a temporary results directory."""
    return ["train=smoke", "eval=smoke", "model.n_layers=2", "model.d_model=64", f"results_dir={tmp_path / 'results'}"]

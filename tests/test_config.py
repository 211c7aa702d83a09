"""The config presets name real model presets and a batch their documented torchrun command can split."""
import glob
import os
import re
import runpy

import pytest

from model import PRESETS, preset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "config", "*.py"))))
def test_config_preset_is_runnable_as_documented(path):
    text = open(path).read()
    cfg = runpy.run_path(path)
    assert cfg["preset"] in PRESETS
    T = preset(cfg["preset"]).block_size
    m = re.search(r"--nproc_per_node=(\d+)", text)
    world = int(m.group(1)) if m else 1
    assert cfg["total_batch_tokens"] % (cfg["batch_size"] * T * world) == 0, (path, world)
    if cfg["dataset"] == "fineweb":
        assert cfg["tokenizer"] == "gpt2" and cfg["total_batch_tokens"] == 32768  # SPEC §4

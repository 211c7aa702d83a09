"""gpu_check.py --dry: the GPU check's every step, on the CPU at tiny shapes."""
import os
import re
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_dry_run_prints_the_table():
    p = subprocess.run([sys.executable, "gpu_check.py", "--dry"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [line.split(" | ") for line in p.stdout.splitlines() if re.match(r"\| (mha|gqa|mqa|mla|lrkv) \|", line)]
    assert [r[0][2:] for r in rows] == ["mha", "lrkv", "mla", "gqa", "mqa"]
    for r in rows:
        assert len(r) == 11 and r[4] in ("flash", "efficient", "cudnn", "math")  # SDPA ran in training
        measured, formula = re.fullmatch(r"([\d,]+) \(([\d,]+)\)", r[8]).groups()
        assert measured == formula  # the caches hold what flops.py says
        assert float(r[6]) == 0.0  # dynamo's eager backend: the same ops
    assert "SDPA" in p.stdout and "kill and resume of a tiny train.py run on cpu: ok" in p.stdout
    if not torch.cuda.is_available():  # without --dry it needs a GPU, and says what to do instead
        p = subprocess.run([sys.executable, "gpu_check.py"], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode != 0 and p.stderr.startswith("error: ") and "--dry" in p.stderr

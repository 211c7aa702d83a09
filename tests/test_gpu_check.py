"""gpu_check.py --dry: the GPU check's every step, on the CPU at tiny shapes."""
import os
import re
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_dry_run_prints_the_table(tmp_path):
    p = subprocess.run([sys.executable, "gpu_check.py", "--dry", f"--out={tmp_path}"], cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "results.md").read_text() == p.stdout  # written line by line as printed
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 5
    assert "torch " + torch.__version__ in p.stdout and "SDPA priority" in p.stdout
    rows = [line.split(" | ") for line in p.stdout.splitlines() if re.match(r"\| (mha|gqa|mqa|mla|lrkv) \| [\d,]+ \| ", line)
            and line.count(" | ") == 9]  # the design table's rows, not the decode table's
    assert [r[0][2:] for r in rows] == ["mha", "lrkv", "mla", "gqa", "mqa"]
    for r in rows:
        assert len(r) == 10 and r[4] in ("flash", "efficient", "cudnn", "math")  # SDPA ran in training
        assert r[5] == "none (matmuls)"  # and none in decoding
        measured, formula = re.fullmatch(r"([\d,]+) \(([\d,]+)\)", r[8]).groups()
        assert measured == formula  # the caches hold what flops.py says
        assert float(r[6]) == 0.0  # dynamo's eager backend: the same ops
    decode = [line for line in p.stdout.splitlines() if line.startswith("| lrkv-f | ")]  # the decode table
    assert len(decode) == 1 and len(decode[0].split(" | ")) == 3  # eager at two contexts
    assert "kill and resume of a tiny train.py run on cpu: ok" in p.stdout
    if not torch.cuda.is_available():  # without --dry it needs a GPU, and says what to do instead
        p = subprocess.run([sys.executable, "gpu_check.py"], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode != 0 and p.stderr.startswith("error: ") and "--dry" in p.stderr


def test_a_spent_budget_skips_phases_and_says_so(tmp_path):
    p = subprocess.run([sys.executable, "gpu_check.py", "--dry", f"--out={tmp_path}", "--budget=1"], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    skipped = [line for line in p.stdout.splitlines() if "skipped, the 1 s budget is spent" in line]
    assert len(skipped) == 7 and (tmp_path / "results.md").read_text() == p.stdout  # 5 designs, decode, resume

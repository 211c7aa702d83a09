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
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 7  # and DeepSeek's MLA, the factored LRKV
    assert "torch " + torch.__version__ in p.stdout and "SDPA priority" in p.stdout
    rows = [line.split(" | ") for line in p.stdout.splitlines() if re.match(r"\| (mha|gqa|mqa|mla|lrkv) \| [\d,]+ \| ", line)
            and line.count(" | ") == 11]  # the design table's rows, not the decode table's
    assert [r[0][2:] for r in rows] == ["mha", "lrkv", "mla", "gqa", "mqa"]
    for r in rows:
        assert len(r) == 12 and r[6] in ("flash", "efficient", "cudnn", "math")  # SDPA ran in training
        assert r[7] == "none (matmuls)" and 0 < float(r[4].rstrip("%")) < 100  # none in decoding; the optimiser's share
        measured, formula = re.fullmatch(r"([\d,]+) \(([\d,]+)\)", r[10]).groups()
        assert measured == formula  # the caches hold what flops.py says
        assert float(r[8]) == 0.0  # dynamo's eager backend: the same ops
    assert [line.split(" | ")[0] for line in p.stdout.splitlines() if line.count(" | ") == 11][-2:] == ["| mla-ds", "| lrkv-f"]
    decode = [line for line in p.stdout.splitlines() if line.startswith("| lrkv-f | ") and line.count(" | ") == 2]
    assert len(decode) == 1  # the decode table: eager at two contexts
    assert "kill and resume of a tiny train.py run on cpu: ok" in p.stdout
    if not torch.cuda.is_available():  # without --dry it needs a GPU, and says what to do instead
        p = subprocess.run([sys.executable, "gpu_check.py"], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode != 0 and p.stderr.startswith("error: ") and "--dry" in p.stderr


def test_a_spent_budget_skips_phases_and_says_so(tmp_path):
    p = subprocess.run([sys.executable, "gpu_check.py", "--dry", f"--out={tmp_path}", "--budget=1"], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    skipped = [line for line in p.stdout.splitlines() if "skipped, the 1 s budget is spent" in line]
    assert len(skipped) == 9 and (tmp_path / "results.md").read_text() == p.stdout  # 7 designs and variants, decode, resume

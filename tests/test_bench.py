"""bench.py: every design and the reference, side by side, with ratios, memory, the data loader and a profile."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_table_has_every_model_its_ratios_and_a_profile(data_dir):
    p = subprocess.run([sys.executable, "bench.py", "--rounds=1", "--batch_size=2", "--block_size=32",
                        f"--data_dir={data_dir}", "--profile=lrkv"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {m[0]: m[1:] for m in (line.split() for line in p.stdout.splitlines())
            if m and m[0] in ("mha", "gqa", "mqa", "mla", "lrkv", "gpt2")}
    assert list(rows) == ["mha", "gqa", "mqa", "mla", "lrkv", "gpt2"]
    for name, (tok_s, vs_mha, vs_ref, fb, opt, share, saved, mflop) in rows.items():
        assert float(tok_s.replace(",", "")) > 0 and float(fb) > 0 and float(opt) > 0 and float(saved) > 0
        assert 0 < float(share.rstrip("%")) < 100
        assert (mflop == "-") == (name == "gpt2")
    assert rows["mha"][1] == "1.00x" and rows["gpt2"][2] == "1.00x"
    assert re.search(r"data loader \(prepare.windows, as train.py\): [\d.]+ ms a step", p.stdout)
    assert "lrkv: 3 steps, ops by their own time" in p.stdout and "aten::mm" in p.stdout

"""bench.py: every design and the reference, side by side, with ratios, memory, the data loader and a profile."""
import os
import re
import runpy
import subprocess
import sys

import torch

import attention

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_table_has_every_model_its_ratios_and_a_profile(data_dir):
    p = subprocess.run([sys.executable, "bench.py", "--rounds=1", "--batch_size=2", "--block_size=32",
                        f"--data_dir={data_dir}", "--profile=lrkv,gpt2"], cwd=ROOT, capture_output=True, text=True,
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
    # the profile: each op's ms a step, the two models side by side
    prof = p.stdout[p.stdout.index("ms a step by op"):].splitlines()
    assert prof[1].split() == ["op", "lrkv", "gpt2"]
    mm, total = (next(line.split()[1:] for line in prof if line.startswith(op)) for op in ("aten::mm ", "total "))
    assert 0 < float(mm[0]) < float(total[0]) and 0 < float(mm[1]) < float(total[1])


def test_bench_refuses_an_unknown_model_to_profile():
    p = subprocess.run([sys.executable, "bench.py", "--profile=mha,gpt3"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "--profile=mha,gpt3: name models among mha,gqa,mqa,mla,lrkv,gpt2" in p.stderr


def test_bare_is_mha_with_rope_and_qk_norm_made_identities(data_dir, monkeypatch):
    # bench.py --bare: the same MHA model, called with attention.rope and attention.norm swapped for
    # identities and put back after each call
    monkeypatch.setattr(sys, "argv", ["bench.py", "--rounds=1", "--batch_size=2", "--block_size=16", "--bare",
                                      f"--data_dir={data_dir}"])
    rope, norm = attention.rope, attention.norm
    g = runpy.run_path(os.path.join(ROOT, "bench.py"))
    assert (attention.rope, attention.norm) == (rope, norm)
    _, model, run, _ = g["models"]["bare"]
    x = g["x"]
    with torch.no_grad():
        bare_loss, mha_loss = run(x, x)[1], model(x, x)[1]
        monkeypatch.setattr(attention, "rope", lambda x, cos, sin: x)
        monkeypatch.setattr(attention, "norm", lambda x: x)
        assert torch.equal(bare_loss, model(x, x)[1]) and not torch.allclose(bare_loss, mha_loss)

"""bench.py: training steps, decode speed and cache bytes of every design at one shape, side by side."""
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

import bench
import flops
from common import DESIGNS
from model import preset
from test_model import tiny
from test_train import exits_in_one_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_train_table_has_every_model_and_its_ratios(data_dir):
    p = subprocess.run([sys.executable, "bench.py", "--rounds=1", "--batch_size=2", "--block_size=32",
                        f"--data_dir={data_dir}"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {m[0]: m[1:] for m in (line.split() for line in p.stdout.splitlines()) if m and m[0] in list(DESIGNS) + ["gpt2"]}
    assert list(rows) == list(DESIGNS) + ["gpt2"]
    for name, (tok_s, vs_mha, vs_ref, fb, opt, share, saved, mflop) in rows.items():
        assert float(tok_s.replace(",", "")) > 0 and float(fb) > 0 and float(opt) > 0 and float(saved) > 0
        assert 0 < float(share.rstrip("%")) < 100
        assert (mflop == "-") == (name == "gpt2")
    assert rows["mha"][1] == "1.00x" and rows["gpt2"][2] == "1.00x"
    assert "data loader (prepare.windows, as train.py)" in p.stdout


def test_kv_table_allocated_bytes_equal_formula():
    cfg = tiny("gqa")
    rows = bench.kv_table(cfg, 24, batch=2)
    assert [r["design"] for r in rows] == list(DESIGNS) + ["lrkv-f"]
    for r, c in zip(rows, bench.design_cfgs(cfg).values()):
        assert r["allocated"] == r["formula"] == 2 * 24 * flops.kv_cache_bytes_per_token(c, bytes_per_elem=4)
    pct = {r["design"]: r["pct_mha"] for r in rows}
    H, d_h, r = cfg.n_head, cfg.head_dim, cfg.lrkv_rank
    assert pct["mha"] == 100 and pct["gqa"] == 50 and pct["mqa"] == 25
    assert pct["lrkv"] == pytest.approx(100 * (1 / H + r / d_h + 1 / (2 * d_h)))  # Eq. 9 + H key norms
    assert pct["lrkv-f"] == pct["lrkv"]  # the factored variant caches the same
    with pytest.raises(ValueError, match="block_size=32"):
        bench.kv_table(cfg, 33)


def test_design_cfgs_keep_the_shape_and_gqa_its_heads():
    cfgs = bench.design_cfgs(tiny("gqa", n_head=8, n_embd=128, n_kv_head=4))
    assert [cfgs[a].kv_heads for a in ("mha", "gqa", "mqa")] == [8, 4, 1]
    assert {(c.n_layer, c.n_embd, c.block_size) for c in cfgs.values()} == {(2, 128, 32)}
    assert cfgs["lrkv"].lrkv_rank == 6 and cfgs["mla"].mla_kv_rank == 24 and cfgs["lrkv-f"].lrkv_factored


def test_decode_bench_with_sharing_adds_k_eq_v_kv_share_and_e8s_ways_where_they_apply():
    cfgs = bench.design_cfgs(tiny("gqa"), sharing=True)
    half = lambda a: flops.kv_cache_bytes_per_token(cfgs[a]) / flops.kv_cache_bytes_per_token(cfgs["mha"])
    # tiny: 2 layers, 4 heads of 16, context 32; MLA's rope part is 8 wide, LRKV's r at most 16
    assert set(cfgs) - set(bench.design_cfgs(tiny("gqa"))) == \
        {"mha=kv", "gqa=kv", "mqa=kv", *(f"{a}/2" for a in DESIGNS),  # MLA and LRKV refuse K=V
         "mla56", "mla24", "lrkv3", "lrkv3/2", "mha=kv/2", "mha w16", "mha w8"}
    assert cfgs["gqa=kv"].k_eq_v and cfgs["lrkv/2"].kv_share == 2 and not cfgs["lrkv/2"].k_eq_v
    # the widest within the share: one more of d_c or r would pass it
    assert [half(a) for a in ("mla56", "mla24", "mha=kv/2")] == [0.5, 0.25, 0.25]
    assert 0.5 - 1 / 16 < half("lrkv3") <= 0.5 and half("lrkv3/2") == half("lrkv3") / 2
    assert cfgs["mha w8"].window == 8 and cfgs["mha=kv/2"].k_eq_v and cfgs["mha=kv/2"].kv_share == 2
    assert "lrkv3/2" not in bench.equal_cache_cfgs(replace(cfgs["mha"], n_layer=3))  # 3 layers: no pairs
    res = bench.decode_bench(tiny("gqa"), [8, 32], steps=1, warmup=0, sharing=True,
                             designs=("mha", "mha=kv", "mla/2", "mha w16"))
    assert {a for a, _, _ in res} == {"mha", "mha=kv", "mla/2", "mha w16"} and res["mha", 8, "eager"]["vs_mha"] == 1
    assert res["mha=kv", 8, "eager"]["bytes"] < res["mha", 8, "eager"]["bytes"]  # half the cache
    # a window of 16 holds all 8 tokens at context 8, and half of them at 32
    assert res["mha w16", 8, "eager"]["bytes"] == res["mha", 8, "eager"]["bytes"]
    assert res["mha w16", 32, "eager"]["bytes"] < res["mha", 32, "eager"]["bytes"]


# compiled, two designs: the bench's compiled mode is generate.decoder, which test_generate compiles
# for every design, so four more inductor compiles here (a minute of the suite, cold) test nothing new
@pytest.mark.parametrize("modes, designs", [(("eager",), None), (("eager", "compiled"), ("mha", "lrkv"))])
def test_decode_bench_times_every_design(modes, designs):
    torch.set_num_threads(1)
    cfg = tiny("gqa", n_layer=1)
    res = bench.decode_bench(cfg, [8, 32], steps=2, batch=3, warmup=1, no_cache=len(modes) == 1, modes=modes,
                             designs=designs)
    every = designs or list(DESIGNS) + ["lrkv-f"]
    assert set(res) == {(a, N, m) for a in every for N in (8, 32) for m in modes}
    cfgs = bench.design_cfgs(cfg)
    for (a, N, m), r in res.items():
        assert r["ms"] > 0 and r.get("ms_no_cache", 1) > 0 and r["tok_s"] == pytest.approx(3000 / r["ms"])
        assert r["bytes"] == flops.decode_bytes(cfgs[a], N, batch=3, bytes_per_elem=4)
        assert r["gbs"] == pytest.approx(r["bytes"] / (r["ms"] / 1000) / 1e9)
        assert r["vs_mha"] == pytest.approx(r["tok_s"] / res["mha", N, m]["tok_s"])
        assert r["mflop"] > 0
    assert res["mha", 8, modes[-1]]["vs_mha"] == 1
    if "lrkv-f" in every:
        assert res["lrkv-f", 32, "eager"]["mflop"] < res["lrkv", 32, "eager"]["mflop"]


def test_cli_kv_and_decode_on_a_preset(capsys):
    bench.main(["kv", "--preset=cpu", "--context=16"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[0] for r in rows] == list(DESIGNS) + ["lrkv-f"]
    assert all(r[-4] == r[-3] for r in rows)  # allocated == formula
    bench.main(["decode", "--preset=cpu", "--block_size=64", "--contexts=8,64", "--steps=1", "--modes=eager",
                "--batch_size=2"])
    out = capsys.readouterr().out
    assert out.startswith("decode, batch 2, fp32") and "reads" in out and "GFLOP/s" in out
    # design, mode, context, ms, tok/s, vs MHA, KV %, MB, GB/s, % read, GFLOP, roofline, % roof: a
    # row per context
    rows = [line.split() for line in out.splitlines()[-12:]]
    assert [r[0] for r in rows[::2]] == list(DESIGNS) + ["lrkv-f"] and [r[2] for r in rows[:2]] == ["8", "64"]
    assert all(len(r) == 13 and r[1] == "eager" and float(r[3]) > 0 for r in rows)
    assert {r[0]: r[6] for r in rows}["gqa"] == "50%"  # the cache beside the speed
    mb = {(r[0], r[2]): float(r[7]) for r in rows}
    c = preset("cpu", block_size=64)
    assert mb["mha", "64"] == round(flops.decode_bytes(c, 64, batch=2, bytes_per_elem=4) / 1e6, 1)
    assert rows[0][5] == rows[1][5] == "1.00x" and mb["mqa", "64"] < mb["mha", "64"]


@pytest.mark.parametrize("argv, msg", [
    (["kv", "--preset=nope"], "preset='nope' is unknown"),
    (["kv", "--preset=cpu", "--context=257"], "outside 2..block_size=256"),
    (["decode", "--preset=cpu", "--contexts=64,512"], "outside 2..block_size=256"),
    (["decode", "--preset=cpu", "--modes=fast"], "--modes=fast: use some of eager, compiled, graphs"),
    (["kv", "--device=gpu"], "--device='gpu' is unknown"),
])
def test_cli_bad_input_is_one_line(argv, msg, capsys):
    assert msg in exits_in_one_line(bench.main, argv, capsys)

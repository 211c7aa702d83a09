"""Muon shared across ranks: two gloo ranks give bit for bit the step of one process, with
replicated (DDP) and with sharded (FSDP2) weights. The test runs this file under torchrun."""
import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from muon import DistMuon, Muon  # noqa: E402

# batches of one shape: 2 split 1 + 1 over the ranks, 3 split 2 + 1; (7, 5) and (1, 4) shard
# unevenly under FSDP2 (4 + 3 rows, 1 + 0); the last: 4 head blocks of (6, 6)
SHAPES = [(64, 32), (32, 96), (48, 48), (64, 32), (48, 48), (48, 48), (8, 8), (7, 5), (1, 4), (24, 6)]


def make(seed=0):
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s)) for s in SHAPES]


def groups(ps):
    # the last matrix is 4 stacked head blocks, in a group of its own (as muon.optimizers puts LRKV's B)
    return [dict(params=ps[:-1]), dict(params=ps[-1:], heads=4)]


def steps(ps, opt, n=3, grads=None):
    g = torch.Generator().manual_seed(1)
    for _ in range(n):
        for p in ps:
            full = torch.randn(p.shape, generator=g)
            p.grad = grads(p, full) if grads else full
        opt.step()


def worker():
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, distribute_tensor
    dist.init_process_group("gloo")
    for dtype in (torch.float32, torch.bfloat16):
        # Muon on this process vs DistMuon shared across the two ranks
        alone, shared = make(), make()
        opt_a, opt_s = Muon(groups(alone), ns_dtype=dtype), DistMuon(groups(shared), ns_dtype=dtype)
        g = torch.Generator().manual_seed(1)
        for _ in range(3):
            for a, s in zip(alone, shared):
                a.grad = torch.randn(a.shape, generator=g)
                s.grad = a.grad.clone()
            opt_a.step()
            opt_s.step()
        assert all(torch.equal(a, s) for a, s in zip(alone, shared)), ("shared Muon differs", dist.get_rank(), dtype, [(a - s).abs().max().item() for a, s in zip(alone, shared)])
        # FSDP2: each parameter a DTensor sharded on dim 0, its gradient too
        model = torch.nn.Module()
        model.ps = torch.nn.ParameterList(make())
        fully_shard(model)
        sharded = list(model.ps)
        opt_f = DistMuon(groups(sharded), ns_dtype=dtype)
        whole = DTensor.full_tensor  # no rank gathers a matrix whole: its shards go to its owner alone
        DTensor.full_tensor = lambda self: (_ for _ in ()).throw(AssertionError("DistMuon gathered a matrix"))
        steps(sharded, opt_f, grads=lambda p, full: distribute_tensor(full, p.device_mesh, p.placements))
        DTensor.full_tensor = whole
        for a, f in zip(alone, sharded):
            rows = [len(c) for c in torch.arange(len(a)).chunk(2)] + [0]  # this rank's shard: torch.chunk's
            assert len(f.to_local()) == rows[dist.get_rank()] and torch.equal(a, f.full_tensor()), "FSDP2 Muon differs"
    # gradient accumulation as train.py runs it under FSDP2: every micro-step's gradients are
    # reduce-scattered, so after each a rank holds only its shard (skipping the sync until the
    # last micro-step keeps every parameter's whole gradient in FSDP2's unsharded parameters)
    for sync_every in (True, False):
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Linear(64, 16))
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        whole = sum(p.numel() for p in model.parameters())
        for i in range(2):
            model.set_requires_gradient_sync(sync_every or i == 1)
            model(torch.randn(4, 16)).square().sum().backward()
            fps = [fp for layer in model for fp in layer._get_fsdp_state()._fsdp_param_group.fsdp_params]
            held = sum(getattr(fp, "unsharded_accumulated_grad", None) is not None  # under mixed precision
                       or getattr(fp._unsharded_param, "grad", None) is not None for fp in fps)  # in fp32
            shards = sum(p.grad.to_local().numel() for p in model.parameters() if p.grad is not None)
            if sync_every or i == 1:
                assert held == 0 and shards == whole // 2, ("a whole gradient held", i, held, shards)
            else:
                assert held == 4 and shards == 0, ("FSDP2 no longer holds unsynced gradients whole", held, shards)
    print(f"rank {dist.get_rank()} ok")
    dist.destroy_process_group()


def test_two_ranks_step_exactly_as_one():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__]
    p = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.count(" ok") == 2, p.stdout[-2000:] + p.stderr[-3000:]


if __name__ == "__main__":
    worker()


# ---- train.py on two gloo ranks: FSDP2 against DDP and one process; its sharded checkpoints

import json  # noqa: E402
import re  # noqa: E402

import pytest  # noqa: E402

import test_train  # noqa: E402
from test_train import FAULT, curve, one_line_error, read_log, refused, score, train  # noqa: E402

TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
# evals every 4 steps, checkpoints every 3; LRKV: a per-head Muon parameter, which FSDP2 must keep;
# 5 test windows: rank 0 evaluates 3 in 2 batches, rank 1 2 in 1 and a dropped one (FSDP2's forwards must pair)
SHARDED = ["--attn=lrkv", "--max_iters=8", "--eval_interval=4", "--ckpt_interval=3", "--batch_size=2",
           "--eval_tokens=160"]


@pytest.fixture(autouse=True)
def _data(data_dir):
    test_train.DATA = data_dir


def test_fsdp_matches_ddp_and_one_process_and_resumes_exactly(tmp_path):
    train(tmp_path, *SHARDED, "--run_name=one")
    train(tmp_path, *SHARDED, "--run_name=ddp", launcher=TORCHRUN)
    train(tmp_path, *SHARDED, "--run_name=fsdp", "--fsdp", launcher=TORCHRUN)
    runs = {r: read_log(tmp_path / r / "log.jsonl")[1] for r in ("one", "ddp", "fsdp")}
    # fp32 Newton-Schulz on CPU: the runs differ only in the order of float sums (measured: FSDP2 vs
    # DDP 0 in train loss and 1.9e-7 in test loss, either vs one process 4.8e-7): 5e-6 is 10x that
    for key in ("train_loss", "test_loss"):
        one = curve(runs["one"], key)
        for r in ("ddp", "fsdp"):
            other = curve(runs[r], key)
            assert other.keys() == one.keys() and len(one) >= 3
            assert all(abs(one[k] - other[k]) < 5e-6 for k in one), (r, key, one, other)
    scores = {r: score(tmp_path / r / "log.jsonl") for r in runs}  # every held-out token, split over ranks
    for key in ("val_loss", "test_loss"):
        assert all(abs(scores[r][key] - scores["one"][key]) < 5e-6 for r in runs), (key, scores)
    assert sorted(os.listdir(tmp_path / "fsdp")) == ["ckpt_8", "log.jsonl"]  # the last good one only
    # eval.py reads the sharded checkpoint in one process: the test loss the run logged at step 8
    out = subprocess.run([sys.executable, "eval.py", str(tmp_path / "fsdp" / "ckpt_8")], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    loss = float(re.search(r"step 8, lrkv: test loss ([\d.]+)", out.stdout).group(1))
    assert loss == pytest.approx(scores["fsdp"]["test_loss"], abs=1e-4)  # printed to 4 decimals
    # killed while writing step 6's checkpoint: step 3's stays, and the same command with --resume
    # finishes the run with the losses of the uninterrupted one
    p = train(tmp_path, *SHARDED, "--run_name=cut", "--fsdp", launcher=(*TORCHRUN, FAULT), check=False,
              env={"NANOKV_FAULT": "ckpt:6"})
    assert p.returncode != 0 and os.path.exists(tmp_path / "cut" / "ckpt_3" / "meta.pt")
    assert not os.path.exists(tmp_path / "cut" / "ckpt_6" / "meta.pt")
    one_line_error(refused(tmp_path, *SHARDED, "--run_name=cut", "--resume"), "--fsdp")
    train(tmp_path, *SHARDED, "--run_name=cut", "--fsdp", "--resume", launcher=TORCHRUN)
    headers = [json.loads(l) for l in open(tmp_path / "cut" / "log.jsonl") if '"header"' in l]
    assert [h["start_step"] for h in headers] == [0, 3]
    cut = read_log(tmp_path / "cut" / "log.jsonl")[1]
    for key in ("train_loss", "test_loss"):
        assert curve(cut, key) == curve(runs["fsdp"], key)  # exactly
    assert sorted(os.listdir(tmp_path / "cut")) == ["ckpt_8", "log.jsonl"]


def test_fsdp_bf16_computes_what_ddp_bf16_does(tmp_path):
    # the same forward: FSDP2 gathers each block's weights in bf16, as DDP's autocast casts them,
    # and keeps the embedding, head and residual stream fp32. Measured on 2 gloo ranks: equal to
    # the bit at the step-0 eval and steps 1-3, then 2.8e-5 apart (every micro-step's gradients are
    # reduce-scattered, another order of float sums). The recipe before, bf16 weights everywhere,
    # was 3e-6 apart at the step-0 eval and 1.8e-4 by step 8
    for r in ("ddp", "fsdp"):
        train(tmp_path, *SHARDED, "--dtype=bf16", f"--run_name={r}", *["--fsdp"] * (r == "fsdp"), launcher=TORCHRUN)
    ddp, fsdp = (read_log(tmp_path / r / "log.jsonl")[1] for r in ("ddp", "fsdp"))
    assert curve(fsdp, "test_loss")[0] == curve(ddp, "test_loss")[0]
    assert [curve(fsdp, "train_loss")[k] for k in (1, 2, 3)] == [curve(ddp, "train_loss")[k] for k in (1, 2, 3)]
    for key in ("train_loss", "test_loss"):
        assert all(abs(curve(fsdp, key)[k] - v) < 1e-4 for k, v in curve(ddp, key).items())


def test_fsdp_needs_ranks(tmp_path):
    # (--fsdp with --dtype=fp16 is refused too, but only under torchrun: 15 s for one line, not tested)
    one_line_error(refused(tmp_path, "--fsdp"), "torchrun")


def test_kv_sharing_trains_the_same_on_one_process_ddp_and_fsdp(tmp_path):
    # a K/V group's later layer reads its first layer's keys and values across blocks, each block an
    # FSDP2 unit of its own: the gradient flows back into the first; K=V's one projection with it
    # (LRKV's per-head B_h in a group: tests/test_train.py's tiny runs)
    ranks = ("ddp", "fsdp")
    args = ["--attn=mha", "--k_eq_v=True", "--kv_share=2", "--max_iters=6", "--eval_interval=3",
            "--batch_size=2", "--eval_tokens=160"]
    train(tmp_path, *args, "--run_name=one")
    for r in ranks:
        train(tmp_path, *args, f"--run_name={r}", *["--fsdp"] * (r == "fsdp"), launcher=TORCHRUN)
    runs = {r: read_log(tmp_path / r / "log.jsonl") for r in ("one", *ranks)}
    header = runs["one"][0]
    assert header["config"]["kv_share"] == 2 and header["kv_params"] < header["params"]
    for key in ("train_loss", "test_loss"):
        one = curve(runs["one"][1], key)
        assert len(one) >= 2
        for r in ranks:
            assert all(abs(one[k] - curve(runs[r][1], key)[k]) < 5e-6 for k in one), (r, key)


def test_a_start_that_does_not_shard_does_not_import_dtensor():
    # FSDP2, DCP and DistMuon import DTensor, which adds about a second to every start: train.py,
    # checkpoint.py and muon.py import them where a sharded or multi-rank run needs them (a
    # compiled run still imports it, through dynamo; an eager one, eval.py and bench.py do not)
    code = ("import runpy, sys\nsys.argv = ['train.py', '--help']\ntry:\n    runpy.run_path('train.py', "
            "run_name='__main__')\nexcept SystemExit:\n    pass\nimport eval\n"
            "print('dtensor' if 'torch.distributed.tensor' in sys.modules else 'none')")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "none", p.stderr[-2000:]

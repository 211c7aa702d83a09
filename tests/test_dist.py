"""Muon shared across ranks: two gloo ranks give bit for bit the step of one process, with
replicated (DDP) and with sharded (FSDP2) weights. The test runs this file under torchrun."""
import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from muon import Muon  # noqa: E402

SHAPES = [(64, 32), (32, 96), (48, 48), (8, 8), (24, 6)]  # the last: 4 head blocks of (6, 6)


def make(seed=0):
    torch.manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(*s)) for s in SHAPES]
    ps[-1].heads = 4
    return ps


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
    from torch.distributed.tensor import distribute_tensor
    dist.init_process_group("gloo")
    for dtype in (torch.float32, torch.bfloat16):
        # unshared on this process (share=False) vs shared across the two ranks
        alone, shared = make(), make()
        opt_a, opt_s = Muon(alone, ns_dtype=dtype), Muon(shared, ns_dtype=dtype)
        g = torch.Generator().manual_seed(1)
        for _ in range(3):
            for a, s in zip(alone, shared):
                a.grad = torch.randn(a.shape, generator=g)
                s.grad = a.grad.clone()
            opt_a.step(share=False)
            opt_s.step()
        assert all(torch.equal(a, s) for a, s in zip(alone, shared)), ("shared Muon differs", dist.get_rank(), dtype, [(a - s).abs().max().item() for a, s in zip(alone, shared)])
        # FSDP2: each parameter a DTensor sharded on dim 0, its gradient too
        model = torch.nn.Module()
        model.ps = torch.nn.ParameterList(make())
        fully_shard(model)
        sharded = list(model.ps)
        sharded[-1].heads = 4  # fully_shard makes new Parameters: the attribute must be set again
        opt_f = Muon(sharded, ns_dtype=dtype)
        steps(sharded, opt_f, grads=lambda p, full: distribute_tensor(full, p.device_mesh, p.placements))
        for a, f in zip(alone, sharded):
            assert f.to_local().numel() < a.numel() and torch.equal(a, f.full_tensor()), "FSDP2 Muon differs"
    print(f"rank {dist.get_rank()} ok")
    dist.destroy_process_group()


def test_two_ranks_step_exactly_as_one():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__]
    p = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.count(" ok") == 2, p.stdout[-2000:] + p.stderr[-3000:]


if __name__ == "__main__":
    worker()

"""muon.py: the same algorithm as torch.optim.Muon, per-head blocks, and the fp32 choice."""
import pytest
import torch

from muon import Muon, orthogonalise


def params(shapes, seed=0):
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s)) for s in shapes]


def run(opt_cls, ps, steps=3, **kw):
    opt = opt_cls(ps, lr=0.02, weight_decay=0.1, **kw)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return ps


def test_bf16_equals_torch_muon_exactly():
    # same reduction order, same bf16 roundings: no tolerance needed; matrices of one shape are
    # orthogonalised as one batch, torch's one at a time
    shapes = [(64, 32), (32, 96), (48, 48), (64, 32), (48, 48), (48, 48)]
    ours = run(Muon, params(shapes), ns_dtype=torch.bfloat16)
    theirs = run(torch.optim.Muon, params(shapes))
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_fp32_is_close_to_bf16_and_orthogonal():
    G = torch.randn(1, 40, 24)
    O32, O16 = orthogonalise(G, dtype=torch.float32), orthogonalise(G, dtype=torch.bfloat16)
    assert O32.dtype == torch.float32
    s = torch.linalg.svdvals(O32[0])
    assert s.min() > 0.5 and s.max() < 1.5  # the quintic's band, not exactly 1
    assert (O32 - O16.float()).abs().max() < 0.05  # bf16 differs only by its rounding


def test_heads_orthogonalise_each_block_alone():
    # a block-diagonal map stored as H stacked (d_h, r) blocks: each block's step is the step Muon
    # would take on that block as its own matrix
    H, d_h, r = 4, 8, 3
    stacked = params([(H * d_h, r)])[0]
    blocks = [torch.nn.Parameter(b.detach().clone()) for b in stacked.detach().split(d_h)]
    run(Muon, [stacked], ns_dtype=torch.float32, heads=H)
    g = torch.Generator().manual_seed(1)
    opt = Muon(blocks, lr=0.02, weight_decay=0.1, ns_dtype=torch.float32)
    for _ in range(3):
        full = torch.randn(H * d_h, r, generator=g)
        for b, gb in zip(blocks, full.split(d_h)):
            b.grad = gb.clone()
        opt.step()
    torch.testing.assert_close(stacked.detach(), torch.cat([b.detach() for b in blocks]), rtol=1e-5, atol=1e-6)
    # and it is not what the stack as one matrix would get
    one = params([(H * d_h, r)])[0]
    run(Muon, [one], ns_dtype=torch.float32)
    assert (one - stacked).abs().max() > 1e-3


@pytest.mark.parametrize("shape", [(16, 64), (64, 16)])
def test_lr_scale_follows_each_block_shape(shape):
    # step size: lr·√max(1, rows/cols) of the (block) matrix, times an orthogonal-ish update
    p = params([shape])[0]
    before = p.detach().clone()
    run(Muon, [p], steps=1, ns_dtype=torch.float32)
    step = (p.detach() - before * (1 - 0.02 * 0.1)) / 0.02
    expected = max(1.0, shape[0] / shape[1]) ** 0.5
    assert torch.linalg.matrix_norm(step, ord=2) == pytest.approx(expected, rel=0.35)


def test_lrkv_names_its_per_head_weights_and_muon_groups_them():
    # which weights Muon takes a head at a time is said in one place, the class's per_head, and
    # lands in a parameter group of their own: every B_k and B_v, nothing else, heads = H
    from model import GPT, preset
    from muon import optimizers
    model = GPT(preset("cpu", attn="lrkv", n_layer=2))
    groups = optimizers(model, torch.float32)[0].param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert [g["heads"] for g in groups] == [1, model.cfg.n_head]
    assert sorted(names[id(p)].rsplit(".", 1)[1] for p in groups[1]["params"]) == ["B_k", "B_k", "B_v", "B_v"]
    assert not any(names[id(p)].endswith((".B_k", ".B_v")) for p in groups[0]["params"])
    assert len(optimizers(GPT(preset("cpu", attn="mha", n_layer=2)), torch.float32)[0].param_groups) == 1


def test_newton_schulz_flops_are_what_a_step_runs():
    # bench.muon_flops (bench.py muon's estimate of the optimiser's share) counts what Muon.step
    # multiplies, per-head blocks included: torch's FLOP counter over one step of a small LRKV model
    from torch.utils.flop_counter import FlopCounterMode

    from bench import muon_flops
    from model import GPT, preset
    from muon import ns_flops, optimizers
    assert ns_flops(64, 32) == ns_flops(32, 64) == 5 * (4 * 32 * 32 * 64 + 2 * 32 ** 3)  # the wide side
    cfg = preset("cpu", attn="lrkv", n_layer=2)
    model = GPT(cfg)
    muon = optimizers(model, torch.float32)[0]
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    with FlopCounterMode(display=False) as counter:
        muon.step()
    assert muon_flops(cfg) == counter.get_total_flops() > 0

"""The sliding window (GPTConfig.window), for every design: what a token sees, the ring cache
against the full forward across its wrap, and the window's FLOPs and bytes against torch's counter."""
from dataclasses import replace

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import flops
from common import DESIGNS
from test_model import randomized, tiny, tokens


WINDOWED = [(a, dict(window=6)) for a in DESIGNS] + [("lrkv", dict(window=6, lrkv_factored=True)),
                                                    ("mla", dict(window=6, mla_deepseek=True))]


@pytest.mark.parametrize("attn, kw", WINDOWED)
def test_a_window_sees_the_last_w_tokens_and_its_ring_cache_equals_the_full_forward(attn, kw):
    cfg = tiny(attn, **kw)
    model = randomized(cfg)
    idx = tokens(cfg, T=20)
    with torch.no_grad():
        full, _ = model(idx)
        # token 0 reaches W - 1 positions further each layer, and no further
        moved = (model(torch.cat([idx[:, :1] ^ 1, idx[:, 1:]], dim=1))[0] != full).any(dim=-1)  # (B, T)
        reach = cfg.n_layer * (6 - 1)
        assert moved[:, :reach + 1].all() and not moved[:, reach + 1:].any()
        for prefill in (3, 8):  # shorter than the window, then longer: the ring wraps in both
            caches = model.new_caches()
            steps = [model(idx[:, :prefill], caches=caches)[0]]
            steps += [model(idx[:, t:t + 1], caches=caches)[0] for t in range(prefill, 20)]
            torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)
            assert sum(c.nbytes() for c in caches) == flops.cache_bytes(cfg, 20, batch=2, bytes_per_elem=4)
        with pytest.raises(ValueError, match="one token a call"):  # a chunk would overwrite what it needs
            model(idx[:, :2], caches=caches)


@pytest.mark.parametrize("attn, kw", WINDOWED[:5])
def test_a_windows_flops_and_bytes_equal_torchs_counter_and_the_cache(attn, kw):
    cfg = tiny(attn, block_size=48, **kw)
    model = randomized(cfg).train()
    idx = tokens(cfg, B=2)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:  # the dense banded kernel
        model(idx, idx)[1].backward()
    assert abs(counter.get_total_flops() / idx.numel() / flops.train_flops_per_token(cfg) - 1) < 0.01
    model.eval()
    caches = model.new_caches(max_len=20)  # the new token at 19 attends over the window's 6 slots
    with torch.no_grad():
        model(idx[:, :19], caches=caches)
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(idx[:, 19:20], caches=caches, pos=torch.tensor([19]))
    unseen = 2 * 2 * cfg.n_head * cfg.lrkv_rank * 6 * cfg.n_layer if attn == "lrkv" else 0  # as above, batch 2
    assert counter.get_total_flops() + unseen == 2 * flops.decode_flops_per_token(cfg, 20)  # batch 2
    assert flops.decode_flops_per_token(cfg, 20) == flops.decode_flops_per_token(replace(cfg, window=0), 6)
    weights = sum(p.numel() * 4 for n, p in model.named_parameters() if n != "wte.weight")
    assert flops.decode_bytes(cfg, 20, batch=2, bytes_per_elem=4) == sum(c.nbytes() for c in caches) + weights


@pytest.mark.parametrize("attn", ["lrkv", "mha"])  # MHA with a window is E6's control
def test_compiled_training_with_a_window_gives_eager_gradients(attn):
    # inductor, as train.py compiles; the banded mask goes into SDPA
    model = randomized(tiny(attn, n_layer=1, n_embd=32, block_size=16, lrkv_rank=4, window=5)).train()
    idx = tokens(model.cfg)
    grads = []
    for m in (model, torch.compile(model)):
        m(idx, idx)[1].backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)
    for n, g in grads[0].items():
        torch.testing.assert_close(grads[1][n], g, rtol=1e-4, atol=1e-6, msg=n)


@pytest.mark.parametrize("attn", list(DESIGNS))
def test_a_window_applied_at_inference_is_the_banded_forward_at_the_same_weights(attn):
    # eval.py --window: a model trained on full attention, rebuilt with a window, weights unchanged
    import eval as evaluation
    from model import GPT
    full = randomized(tiny(attn))
    W, idx = 6, tokens(tiny(attn), T=20)
    cut = evaluation.rebuilt(full, window=W)
    banded = GPT(tiny(attn, window=W)).eval()  # a model built with the window: its banded mask
    banded.load_state_dict(full.state_dict())  # strict: no weight depends on the window
    with torch.no_grad():
        want = banded(idx)[0]
        torch.testing.assert_close(cut(idx)[0], want, rtol=0, atol=0)
        # the same band through the explicit mask (attention.padded, two matmuls), not SDPA's
        torch.testing.assert_close(cut(idx, pad=torch.zeros(2, dtype=torch.long))[0], want,
                                   rtol=1e-4, atol=1e-4)
        # before the window drops anything it is full attention; after, it is not
        plain = full(idx)[0]
        torch.testing.assert_close(want[:, :W], plain[:, :W], rtol=1e-5, atol=1e-5)
        assert (want[:, W:] - plain[:, W:]).abs().amax(-1).min() > 1e-4
        # through the ring cache of W slots, a prefill then a token a call, across the wrap
        caches = cut.new_caches()
        steps = [cut(idx[:, :3], caches=caches)[0]]
        steps += [cut(idx[:, t:t + 1], caches=caches)[0] for t in range(3, 20)]
        assert {c.slots for c in caches} == {W}
        torch.testing.assert_close(torch.cat(steps, dim=1), want, rtol=1e-4, atol=1e-4)


def test_eval_refuses_a_window_outside_the_context_in_one_line(tmp_path):
    import subprocess
    import sys
    from model import GPT
    model = GPT(tiny("mha"))
    path = tmp_path / "ckpt.pt"
    torch.save(dict(model=model.state_dict(), model_config=dict(vars(model.cfg)), step=0,
                    train_config=dict(tokenizer="byte")), path)
    for w in (0, 33):  # the context is 32
        p = subprocess.run([sys.executable, "eval.py", str(path), "--recall", f"--window={w}"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert p.stderr.startswith(f"error: --window={w}: a window holds 1 to 32 tokens")

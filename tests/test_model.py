"""The five designs: shapes, causality, the equivalences the math promises, and exact accounting."""
import math
from dataclasses import replace

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import flops
from common import DESIGNS
from model import GPT, PRESETS, GPTConfig, preset

# every design, plus the options that change a design's shapes or its attention
VARIANTS = [(a, {}) for a in DESIGNS] + [("mla", dict(mla_deepseek=True)),
                                         ("mla", dict(mla_deepseek=True, mla_q_rank=16)),
                                         ("mha", dict(attn_scale=2.5)), ("lrkv", dict(attn_scale=2.5)),
                                         ("lrkv", dict(lrkv_factored=True)), ("gqa", dict(mlp_hidden=200))]
# K=V (one projection, one cached tensor) and kv_share (a K/V group of layers, its first makes them)
SHARING = [("mha", dict(k_eq_v=True)), ("gqa", dict(k_eq_v=True))] + \
    [(a, dict(kv_share=2)) for a in DESIGNS] + [("lrkv", dict(kv_share=2, lrkv_factored=True)),
                                               ("mha", dict(k_eq_v=True, kv_share=2))]
VARIANTS += SHARING


def tiny(attn, **kw):
    base = dict(attn=attn, n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=97, n_kv_head=2,
                mla_kv_rank=24, mla_rope_dim=8, lrkv_rank=6)
    return GPTConfig(**{**base, **kw})


def randomized(cfg, seed=0):
    # the real init zeroes output projections and the head, which would make several of these
    # checks pass trivially: give every weight a random value instead
    torch.manual_seed(seed)
    model = GPT(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 1 / math.sqrt(p.shape[-1]))
    return model.eval()


def tokens(cfg, B=2, T=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (B, T or cfg.block_size), generator=g)


@pytest.mark.parametrize("attn", DESIGNS)
def test_forward_backward_and_initial_loss(attn):
    cfg = tiny(attn)
    model = GPT(cfg)
    idx = tokens(cfg)
    logits, loss = model(idx, idx)  # training: the loss alone (LinearCrossEntropy)
    assert logits is None and model(idx)[0].shape == (2, cfg.block_size, cfg.vocab_size)
    assert abs(loss.item() - math.log(cfg.vocab_size)) < 0.01  # uniform prediction at init
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    # one step of learning moves the loss: the graph really reaches the attention weights
    assert model.h[0].attn.c_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("attn", DESIGNS)
def test_strictly_causal(attn):
    cfg = tiny(attn)
    model = randomized(cfg)
    idx = tokens(cfg)
    t = 13
    changed = idx.clone()
    changed[:, t + 1:] = (changed[:, t + 1:] + 1) % cfg.vocab_size
    a, _ = model(idx)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :t + 1], b[:, :t + 1], rtol=0, atol=1e-5)
    assert (a[:, t + 1:] - b[:, t + 1:]).abs().max() > 1e-3  # the later positions do see the change


def test_gqa_with_all_heads_is_mha_and_mqa_is_gqa_with_one():
    idx = tokens(tiny("mha"))
    mha = randomized(tiny("mha"))
    gqa = GPT(tiny("gqa", n_kv_head=4)).eval()
    gqa.load_state_dict(mha.state_dict())
    torch.testing.assert_close(gqa(idx)[0], mha(idx)[0])
    mqa = randomized(tiny("mqa"))
    gqa1 = GPT(tiny("gqa", n_kv_head=1)).eval()
    gqa1.load_state_dict(mqa.state_dict())
    torch.testing.assert_close(gqa1(idx)[0], mqa(idx)[0])
    assert mha.h[0].attn.c_k.weight.shape[0] == 4 * 16 and mqa.h[0].attn.c_k.weight.shape[0] == 16


def lrkv_parts(attn, i):
    """(W_s, U_h for every head, B_h for every head) of K (i=0) or V (i=1), in the paper's
    orientation: W_s (d, d_h), U (H, d, r), B (H, d_h, r)."""
    H, r, d_h = attn.H, attn.r, attn.d_h
    W_s = (attn.W_sk, attn.W_sv)[i].weight.T
    U = (attn.U_k, attn.U_v)[i].weight.view(H, r, -1).transpose(1, 2)
    B = (attn.B_k, attn.B_v)[i].view(H, d_h, r)
    return W_s, U, B


def test_lrkv_is_mha_with_weights_W_s_plus_U_B():
    # Eqs. 2-3: head h uses W_h = W_s + U_h B_hᵀ. Build an MHA whose per-head K/V weights are
    # exactly these, copy the rest, and the two models must compute the same function.
    cfg = tiny("lrkv")
    lrkv = randomized(cfg)
    mha = GPT(tiny("mha")).eval()
    state = {k: v for k, v in lrkv.state_dict().items()}
    for l, block in enumerate(lrkv.h):
        for i, name in enumerate(("c_k", "c_v")):
            W_s, U, B = lrkv_parts(block.attn, i)
            W = W_s + U @ B.transpose(1, 2)  # (H, d, d_h): one full weight per head
            state[f"h.{l}.attn.{name}.weight"] = W.transpose(1, 2).reshape(-1, cfg.n_embd)
        for k in ("W_sk.weight", "W_sv.weight", "U_k.weight", "U_v.weight", "B_k", "B_v"):
            del state[f"h.{l}.attn.{k}"]
    mha.load_state_dict(state)
    idx = tokens(cfg)
    torch.testing.assert_close(lrkv(idx)[0], mha(idx)[0], rtol=1e-4, atol=1e-4)


def test_lrkv_without_residuals_is_mqa():
    cfg = tiny("lrkv")
    lrkv = randomized(cfg)
    mqa = GPT(tiny("mqa")).eval()
    state = dict(lrkv.state_dict())
    for l, block in enumerate(lrkv.h):
        block.attn.B_k.data.zero_()
        block.attn.B_v.data.zero_()
        state[f"h.{l}.attn.c_k.weight"] = state.pop(f"h.{l}.attn.W_sk.weight")
        state[f"h.{l}.attn.c_v.weight"] = state.pop(f"h.{l}.attn.W_sv.weight")
        for k in ("U_k.weight", "U_v.weight", "B_k", "B_v"):
            del state[f"h.{l}.attn.{k}"]
    mqa.load_state_dict(state)
    idx = tokens(cfg)
    torch.testing.assert_close(lrkv(idx)[0], mqa(idx)[0], rtol=1e-5, atol=1e-5)


def test_lrkv_residual_starts_at_a_tenth_of_shared():
    model = GPT(tiny("lrkv", n_embd=128, lrkv_rank=13))
    for block in model.h:
        for i in (0, 1):
            W_s, U, B = lrkv_parts(block.attn, i)
            ratio = (U @ B.transpose(1, 2)).flatten(1).norm(dim=1) / W_s.norm()  # (H,)
            assert torch.allclose(ratio, torch.full_like(ratio, 0.1), atol=0.005)


@pytest.mark.parametrize("q_rank", [0, 16])
@pytest.mark.parametrize("deepseek", [False, True])
def test_mla_absorbed_equals_naive(q_rank, deepseek):
    cfg = tiny("mla", mla_q_rank=q_rank, mla_deepseek=deepseek)
    model = randomized(cfg)
    idx = tokens(cfg)
    naive, _ = model(idx)
    # the whole sequence through the decode path, written into a cache at its positions: absorbed
    T = idx.size(1)
    absorbed, _ = model(idx, caches=model.new_caches(T), pos=torch.arange(T))
    torch.testing.assert_close(absorbed, naive, rtol=1e-4, atol=1e-4)


KV_WEIGHTS = {"mha": ("c_k", "c_v", "c_kv"), "gqa": ("c_k", "c_v", "c_kv"), "mqa": ("c_k", "c_v", "c_kv"),
              "mla": ("W_dkv", "W_kr", "W_uk", "W_uv", "kv_norm"),
              "lrkv": ("W_sk", "W_sv", "U_k", "U_v", "B_k", "B_v")}


@pytest.mark.parametrize("attn, kw", VARIANTS)
def test_parameter_counts_equal_formulas(attn, kw):
    cfg = tiny(attn, **kw)
    model = GPT(cfg)
    # each design's K/V weights and (below) their count by hand, apart from flops.py: add a new design's
    assert attn in KV_WEIGHTS, f"tests/test_model.py: add {attn}'s K/V weights and their count by hand"
    kv_names = KV_WEIGHTS[attn]
    kv = sum(p.numel() for n, p in model.named_parameters() if n.split(".")[2:3] == ["attn"]
             and n.split(".")[3] in kv_names)
    assert kv == flops.kv_params(cfg)
    assert sum(p.numel() for p in model.parameters()) == flops.params(cfg)
    # SPEC's K/V formulas written out once more, per layer (DeepSeek's MLA: d_n = d_h, + kv_norm's d_c)
    d, H, d_h, L = cfg.n_embd, cfg.n_head, cfg.head_dim, cfg.n_layer
    mla = d * (24 + 8) + (24 * H * (d_h + d_h) + 24 if cfg.mla_deepseek else 24 * H * (d_h - 8 + d_h))
    n = 1 if cfg.k_eq_v else 2  # K=V: one projection
    expected = {"mha": n * H * d * d_h, "gqa": n * 2 * d * d_h, "mqa": n * d * d_h,
                "lrkv": 2 * d * d_h + 2 * H * 6 * (d + d_h), "mla": mla}[attn]
    assert kv == L // cfg.kv_share * expected  # in the first layer of each K/V group


@pytest.mark.parametrize("shape", ["tiny", "cpu", "512m-8k"])
def test_match_params_gives_mhas_count_to_the_models_own(shape):
    # every design and variant, its MLP sized by flops.match_params; the paper preset is built on
    # the meta device (shapes only, no memory)
    for attn, kw in VARIANTS:
        kw = {k: v for k, v in kw.items() if k != "mlp_hidden"}
        cfg = tiny(attn, **kw) if shape == "tiny" else preset(shape, attn=attn, **kw)
        mha = flops.params(tiny("mha") if shape == "tiny" else preset(shape, attn="mha"))
        matched = flops.match_params(cfg)
        with torch.device("meta"):
            model = GPT(matched)
        count = sum(p.numel() for p in model.parameters())
        assert count == flops.params(matched)
        assert abs(count - mha) <= cfg.n_layer * cfg.n_embd and abs(count / mha - 1) < 0.005
        assert model.h[0].mlp.c_fc.weight.shape == (matched.mlp_hidden, cfg.n_embd)
        assert (matched.mlp_hidden > 4 * cfg.n_embd) == (flops.params(cfg) < mha)  # fewer K/V weights: wider MLP
        assert replace(matched, mlp_hidden=None) == cfg  # the attention is left as it was
    odd = tiny("mla", mla_deepseek=True, mla_kv_rank=25)  # kv_norm's 25 gains: no whole width closes the gap
    assert 0 < abs(flops.params(flops.match_params(odd)) - flops.params(tiny("mha"))) <= odd.n_layer * odd.n_embd


@pytest.mark.parametrize("attn, kw", VARIANTS)
def test_train_flops_equal_flop_counter(attn, kw):
    cfg = tiny(attn, block_size=48, **kw)
    model = GPT(cfg)
    idx = tokens(cfg, B=2)
    # the math backend runs attention as matmuls the counter sees (as full, non-causal attention)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    measured = counter.get_total_flops() / idx.numel()
    assert abs(measured / flops.train_flops_per_token(cfg) - 1) < 0.01


@pytest.mark.parametrize("attn, kw", VARIANTS)
def test_decode_flops_per_token_equal_torchs_counter(attn, kw):
    cfg = tiny(attn, **kw)
    model = randomized(cfg)
    idx = tokens(cfg, B=1, T=20)
    caches = model.new_caches(max_len=20)  # the new token at position 19 attends over all 20 slots
    with torch.no_grad():
        model(idx[:, :19], caches=caches)
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(idx[:, 19:], caches=caches, pos=torch.tensor([19]))
    # the counter sees matmuls only: the exact LRKV's dot of its rotated queries with R_h^K over r
    # (linalg.vecdot, which reads the latents in place) is a product and a sum, 2·H·r a cached token
    unseen = 2 * cfg.n_head * cfg.lrkv_rank * 20 * cfg.n_layer if attn == "lrkv" and not cfg.lrkv_factored else 0
    if cfg.k_eq_v:  # K=V's cache made keys again, once a K/V group: RoPE and QK-norm, 6 an element
        unseen += 6 * cfg.kv_heads * cfg.head_dim * 20 * cfg.kv_groups
    assert counter.get_total_flops() + unseen == flops.decode_flops_per_token(cfg, 20)


@pytest.mark.parametrize("attn, kw", VARIANTS)
def test_cache_bytes_allocated_equal_formula(attn, kw):
    cfg = tiny(attn, **kw)
    model = randomized(cfg)
    caches = model.new_caches(max_len=20)
    with torch.no_grad():
        model(tokens(cfg, B=3, T=20), caches=caches)
    allocated = sum(c.nbytes() for c in caches)
    assert allocated == 3 * 20 * flops.kv_cache_bytes_per_token(cfg, bytes_per_elem=4)
    # what a decode step must read: every weight but the embedding table, and each layer's cache
    # (a kv_share group's, read by each of its layers)
    weights = sum(p.numel() * 4 for n, p in model.named_parameters() if n != "wte.weight")
    assert flops.decode_bytes(cfg, 20, batch=3, bytes_per_elem=4) == cfg.kv_share * allocated + weights


@pytest.mark.parametrize("attn, kw", VARIANTS)
def test_cached_decoding_equals_full_forward(attn, kw):
    cfg = tiny(attn, **kw)
    model = randomized(cfg)
    idx = tokens(cfg, T=20)
    with torch.no_grad():
        full, _ = model(idx)
        caches = model.new_caches()
        steps = [model(idx[:, :8], caches=caches)[0]]  # prefill 8, chunk of 5, then one at a time
        steps.append(model(idx[:, 8:13], caches=caches)[0])
        steps += [model(idx[:, t:t + 1], caches=caches)[0] for t in range(13, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)


def test_paper_cache_shares():
    share = {}
    for name in PRESETS:
        lrkv, mha = preset(name, attn="lrkv"), preset(name, attn="mha")
        norms = lrkv.n_layer * lrkv.n_head * 2  # our H key norms per layer, which the paper does not count
        share[name] = round(100 * (flops.kv_cache_bytes_per_token(lrkv) - norms) / flops.kv_cache_bytes_per_token(mha), 1)
    assert [share[n] for n in ("128m", "512m-8k", "1.2b", "2.5b", "6.3b")] == [52.6, 48.2, 48.2, 48.5, 45.3]
    # and per token in bytes, from the formula: 512m-8k MHA caches 24 layers × 2·12·128 bf16 values
    assert flops.kv_cache_bytes_per_token(preset("512m-8k", attn="mha")) == 24 * 2 * 12 * 128 * 2
    assert flops.kv_cache_bytes_per_token(preset("512m-8k", attn="mla")) == 24 * (256 + 64) * 2
    assert flops.kv_cache_bytes_per_token(preset("512m-8k", attn="gqa")) == 24 * 2 * 4 * 128 * 2


@pytest.mark.parametrize("kw, field", [
    (dict(attn="bogus"), "attn"),
    (dict(attn="gqa", n_head=6, n_kv_head=4), "n_kv_head"),
    (dict(n_embd=100, n_head=3), "n_embd"),
    (dict(attn="lrkv", lrkv_rank=200), "lrkv_rank"),
    (dict(attn="lrkv", lrkv_rank=-1), "lrkv_rank"),
    (dict(attn="mla", mla_rope_dim=64, n_embd=256, n_head=4), "mla_rope_dim"),
    (dict(attn="mla", mla_rope_dim=7, n_embd=256, n_head=4), "mla_rope_dim"),
    (dict(attn="mla", mla_kv_rank=-5), "mla_kv_rank"),
    (dict(attn="lrkv", lrkv_rank=0), "lrkv_rank"),  # 0 is not "the default": None is
    (dict(attn="gqa", n_kv_head=0), "n_kv_head"),
    (dict(attn="mla", mla_kv_rank=0), "mla_kv_rank"),
    (dict(attn_scale=0.0), "attn_scale"),
])
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(ValueError) as e:
        GPTConfig(**kw)
    msg = str(e.value)
    assert msg.startswith(f"{field}=") and "\n" not in msg


def test_defaults_follow_the_papers_ratios():
    c = GPTConfig(attn="lrkv", n_head=12, n_embd=1536)
    assert c.lrkv_rank == 51  # 0.4·128
    assert GPTConfig(attn="gqa", n_head=12, n_embd=1536).n_kv_head == 3
    assert GPTConfig(attn="gqa", n_head=18, n_embd=2304).n_kv_head == 6
    m = GPTConfig(attn="mla", n_head=12, n_embd=1536)
    assert (m.mla_kv_rank, m.mla_rope_dim) == (128, 64)
    assert GPTConfig(attn="mha", n_kv_head=3).kv_heads == 6  # MHA has H K/V heads, whatever GQA's setting


def test_replace_changes_the_design_and_keeps_each_designs_own_setting():
    # a config's other designs' fields are left as given, so replace(cfg, attn=...) builds that
    # design with cfg's setting for it (before, an MHA config had lost GQA's n_kv_head to H)
    cfg = preset("cpu")  # mha, with the preset's settings of the others
    assert replace(cfg, attn="gqa").kv_heads == PRESETS["cpu"]["n_kv_head"] == 2
    assert replace(replace(cfg, attn="mqa"), attn="gqa").kv_heads == 2
    assert replace(cfg, attn="lrkv").lrkv_rank == 13 and replace(cfg, attn="mla").mla_kv_rank == 32
    assert replace(replace(cfg, attn="gqa"), attn="mha").kv_heads == cfg.n_head
    assert flops.params(replace(cfg, attn="gqa")) == flops.params(preset("cpu", attn="gqa"))


@pytest.mark.parametrize("sharing", [{}, dict(k_eq_v=True, kv_share=2, n_layer=2), dict(kv_share=2, n_layer=2)])
def test_torch_compile_gives_eager_gradients_for_every_design(sharing):
    # every parameter's gradient, compiled as train.py compiles (inductor) against eager, with random
    # weights so that none is zero by init. torch 2.11's compile zeroed every gradient below the head
    # (a no-op .type_as at the end of RMSNorm's forward); a test of the loss going down did not see it.
    # Shared K/V: a group's first layer gets its gradient from every layer that reads it (K=V: MHA's
    # class, whose GQA and MQA differ in a count; kv_share: the other two classes)
    designs = list(DESIGNS) if not sharing else ["mha"] if sharing.get("k_eq_v") else ["mla", "lrkv"]
    for attn in designs:
        kw = {**dict(n_layer=1, n_embd=32, block_size=16, mla_rope_dim=4, lrkv_rank=4), **sharing}
        model = randomized(tiny(attn, **kw)).train()
        idx = tokens(model.cfg)
        grads = []
        for m in (model, torch.compile(model)):
            m(idx, idx)[1].backward()
            grads.append({n: p.grad for n, p in model.named_parameters()})
            model.zero_grad(set_to_none=True)
        eager, compiled = grads
        for n, g in eager.items():
            assert g.norm() > 0, (attn, n)
            torch.testing.assert_close(compiled[n], g, rtol=1e-4, atol=1e-6, msg=f"{attn} {n}")


@pytest.mark.parametrize("attn", DESIGNS)
def test_attn_scale_reaches_every_qk_normed_design(attn):
    # the scale multiplies the logits of MHA/GQA/MQA/LRKV (training and, via the cached test above,
    # LRKV's own decode softmax); MLA has no QK-norm and keeps 1/√(d_n + d_r)
    cfg = tiny(attn)
    a, b = randomized(cfg), randomized(tiny(attn, attn_scale=3.0))
    idx = tokens(cfg)
    with torch.no_grad():
        differ = (a(idx)[0] - b(idx)[0]).abs().max() > 1e-3
        cache_a, cache_b = a.new_caches(), b.new_caches()
        a(idx[:, :5], caches=cache_a), b(idx[:, :5], caches=cache_b)
        step_differs = (a(idx[:, 5:6], caches=cache_a)[0] - b(idx[:, 5:6], caches=cache_b)[0]).abs().max() > 1e-3
    assert differ == step_differs == (attn != "mla")


@pytest.mark.parametrize("attn", DESIGNS)
def test_every_input_projection_starts_at_one_std(attn):
    # one init rule (Kaiming, gain 1): a key weight is 1/√d_model whatever the design stores
    torch.manual_seed(0)
    model = GPT(tiny(attn, n_embd=256, n_head=4, mla_kv_rank=64, mla_rope_dim=16, lrkv_rank=16))
    for name, p in model.h[0].attn.named_parameters():
        if name.startswith(("W_", "c_q", "c_k", "c_v")) and p.ndim == 2:
            assert p.std().item() == pytest.approx(p.size(1) ** -0.5, rel=0.15), name


def test_muon_treats_k_and_v_alike_in_every_design():
    # K and V are separate 2-D weights everywhere, and only LRKV's block-diagonal B is per head
    for attn in DESIGNS:
        model = GPT(tiny(attn))
        names = [n.split(".")[-2] if n.endswith("weight") else n.split(".")[-1]
                 for n, p in model.h[0].attn.named_parameters() if p.ndim == 2]
        assert all("kv" not in n or n == "W_dkv" for n in names), names  # no joint K|V matrix
        assert set(getattr(model.h[0].attn, "per_head", ())) == ({"B_k", "B_v"} if attn == "lrkv" else set())


@pytest.mark.parametrize("attn, kw", VARIANTS)
def test_caches_hold_the_compute_dtype_under_autocast(attn, kw, monkeypatch):
    # CUDA's autocast policy runs rms_norm in fp32 (CPU's does not): imitate it on CPU, and every
    # cached tensor must still be bf16, or the cache bytes of the QK-normed designs would double
    rms_norm = torch.nn.functional.rms_norm
    monkeypatch.setattr(torch.nn.functional, "rms_norm", lambda x, *a, **k: rms_norm(x.float(), *a, **k))
    cfg = tiny(attn, **kw)
    model = randomized(cfg)
    caches = model.new_caches(max_len=12)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(tokens(cfg, T=12), caches=caches)
    assert {b.dtype for c in caches for b in c.buf.values()} == {torch.bfloat16}
    assert sum(c.nbytes() for c in caches) == 2 * 12 * flops.kv_cache_bytes_per_token(cfg, bytes_per_elem=2)


@pytest.mark.parametrize("attn, kw", VARIANTS)
def test_decode_attention_is_matmuls_over_the_cache(attn, kw, monkeypatch):
    # after a cache no design calls SDPA (whose fused GPU kernels run batch-1 decode one thread
    # block per K/V head); MLA's value is c_kv alone, d_c wide, not the whole key
    calls, widths = [], []
    sdpa, matmul = torch.nn.functional.scaled_dot_product_attention, torch.Tensor.__matmul__
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(a[0].shape) or sdpa(*a, **k))
    cfg = tiny(attn, **kw)
    model = randomized(cfg)
    idx = tokens(cfg, T=12)
    caches = model.new_caches()
    with torch.no_grad():
        model(idx[:, :8], caches=caches)  # a prefill: causal SDPA, one call a layer (LRKV's too)
        assert len(calls) == cfg.n_layer
        monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: widths.append(b.shape[-1]) or matmul(a, b))
        model(idx[:, 8:11], caches=caches)
        model(idx[:, 11:12], caches=caches)
    assert len(calls) == cfg.n_layer
    if attn == "mla":  # each attention's two matmuls: scores (Tk wide), then values (d_c wide)
        assert len(widths) == 4 * cfg.n_layer and set(widths[1::2]) == {cfg.mla_kv_rank}


def test_lrkv_factored_rotates_only_the_shared_key():
    plain, fact = randomized(tiny("lrkv")), randomized(tiny("lrkv", lrkv_factored=True))  # the same weights
    idx = tokens(plain.cfg)
    with torch.no_grad():
        assert not torch.allclose(plain(idx)[0], fact(idx)[0], atol=1e-3)  # the flag changes the keys
        for model in (plain, fact):  # without key residuals both keys are RoPE(K_s): one model
            for block in model.h:
                block.attn.B_k.zero_()
        torch.testing.assert_close(plain(idx)[0], fact(idx)[0])
    # and its decode reads the small cache with B_h in the query: far fewer FLOPs at long context
    big = dict(n_layer=4, n_head=8, n_embd=512, block_size=4096, lrkv_rank=26)
    ratio = flops.decode_flops_per_token(tiny("lrkv", lrkv_factored=True, **big), 4096) / \
        flops.decode_flops_per_token(tiny("lrkv", **big), 4096)
    assert ratio < 0.25


@pytest.mark.parametrize("shape", [(3, 7, 32), (2, 5, 4, 16)])
def test_written_out_gradients_equal_autograds(shape):
    # norm() and ReLU² carry their own backward (speed), RoPE is written for speed: values and
    # gradients must be torch's own autograd of the math written out
    from attention import norm, rope
    from model import ReLU2
    torch.manual_seed(0)
    x, g = torch.randn(shape, dtype=torch.float64) * 3, torch.randn(shape, dtype=torch.float64)
    rms = lambda t: torch.nn.functional.rms_norm(t.float(), (t.size(-1),))
    pairs = [(norm, rms), (ReLU2.apply, lambda t: torch.relu(t).square())]
    if len(shape) == 4:  # (B, T, H, D): RoPE turns the halves of each head by their position's angles
        angles = torch.randn(shape[1], shape[-1] // 2) * 3
        cos, sin, d = angles.cos(), angles.sin(), shape[-1] // 2
        c, s = cos[:, None, :], sin[:, None, :]  # (T, 1, D/2)
        rotated = lambda t: torch.cat([t[..., :d] * c + t[..., d:] * s, t[..., d:] * c - t[..., :d] * s], -1)
        pairs.append((lambda t: rope(t, cos, sin), rotated))
    for ours, theirs in pairs:
        a, b = x.float().requires_grad_(), x.float().requires_grad_()
        ya, yb = ours(a), theirs(b)
        ya.backward(g.float())
        yb.backward(g.float())
        torch.testing.assert_close(ya, yb, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    # bf16 in, bf16 out (so caches keep the compute dtype), computed in fp32 inside
    xb = x.bfloat16().requires_grad_()
    yb = norm(xb)
    yb.backward(g.bfloat16())
    assert yb.dtype == xb.grad.dtype == torch.bfloat16
    torch.testing.assert_close(yb.float(), rms(x.bfloat16()), rtol=1e-2, atol=1e-2)


def test_a_bf16_model_trains_without_autocast():
    # model.bfloat16(), no autocast: the loss head's products in bf16, its gradients bf16 like the weights
    cfg = tiny("lrkv")
    model = randomized(cfg).train()
    idx = tokens(cfg)
    with torch.no_grad():
        want = model(idx, idx)[1].item()
    model.bfloat16()
    _, loss = model(idx, idx)
    loss.backward()
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(want, rel=2e-2)
    assert all(p.grad is not None and p.grad.dtype == torch.bfloat16 for p in model.parameters() if p.requires_grad)
    logits, _ = model(idx)  # and the eval path
    assert logits.dtype == torch.float32

"""Generation with and without the KV cache, head diversity, and eval.py's command line."""
from dataclasses import asdict

import numpy as np
import pytest
import torch

import eval as ev
from common import DESIGNS
from generate import decoder
from model import GPT
from test_model import randomized, tiny
from test_train import exits_in_one_line


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # these models are tiny: a second thread only adds sync overhead, and 20x that when the two
    # cores are busy with something else
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def prompt(cfg, B=2, T=5):
    return torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("attn, kw", [(a, {}) for a in DESIGNS] + [("mla", dict(mla_deepseek=True)),
                                                                   ("lrkv", dict(lrkv_factored=True)),
                                                                   ("lrkv", dict(window=4)), ("mla", dict(window=4)),
                                                                   ("mha", dict(window=4)),
                                                                   ("gqa", dict(k_eq_v=True, window=4)),
                                                                   ("mla", dict(kv_share=2, n_layer=2)),
                                                                   ("lrkv", dict(kv_share=2, n_layer=2))])
def test_compiled_decode_is_one_graph_equal_to_eager(attn, kw):  # with a window: across its ring's wrap
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    model = randomized(tiny(attn, **{"n_layer": 1, **kw}))
    idx = prompt(model.cfg)
    compiled = model.generate(idx, 8, temperature=0, compile=True)
    assert counters["stats"]["unique_graphs"] == 1  # 7 decode steps at positions 5..11: one graph
    assert torch.equal(compiled, model.generate(idx, 8, temperature=0, use_cache=False))
    # and one step's logits: compiled against eager, from the same prefilled cache
    caches = [model.new_caches(12), model.new_caches(12)]
    steps = []
    with torch.no_grad():  # as generate runs it (with gradients, torch 2.11's inductor refused MQA's step)
        for run, c in zip((decoder(model, True), model), caches):
            model(idx, caches=c)
            steps.append(run(idx[:, 2:3].contiguous(), caches=c, pos=torch.tensor([5]))[0])
    torch.testing.assert_close(steps[0], steps[1], rtol=1e-4, atol=1e-4)
    # the cache keeps one address for its life, marked so (a CUDA graph would write it in place)
    assert all(getattr(b, "_dynamo_static_input_type", None) == "unguarded" for c in caches[0] for b in c.buf.values())


@pytest.mark.parametrize("attn", DESIGNS)
def test_greedy_with_cache_equals_without(attn):
    cfg = tiny(attn)
    model = randomized(cfg)
    idx = prompt(cfg)
    cached = model.generate(idx, 20, temperature=0)
    full = model.generate(idx, 20, temperature=0, use_cache=False)
    assert cached.shape == (2, 25) and torch.equal(cached[:, :5], idx)
    assert torch.equal(cached, full)
    assert len(set(cached[:, 5:].flatten().tolist())) > 3  # a real continuation, not one token repeated
    # and greedy is the argmax of the full forward at every step
    logits, _ = model(full[:, :-1])
    assert torch.equal(logits[:, 4:].argmax(-1), full[:, 5:])
    # generate's head: the last row alone (another matmul shape: last-digit differences only)
    torch.testing.assert_close(model(full[:, :-1], last=True)[0], logits[:, -1:], rtol=1e-5, atol=1e-5)


def left_padded(rows):
    # prompts of different lengths as one batch padded on the left, and its attention mask
    L = max(map(len, rows))
    idx, mask = torch.zeros(len(rows), L, dtype=torch.long), torch.zeros(len(rows), L, dtype=torch.long)
    for r, p in enumerate(rows):
        idx[r, L - len(p):], mask[r, L - len(p):] = p, 1
    return idx, mask


@pytest.mark.parametrize("attn, kw", [(a, {}) for a in DESIGNS] + [("lrkv", dict(lrkv_factored=True)),
                                                                   ("lrkv", dict(window=4)), ("mla", dict(window=4)),
                                                                   ("mha", dict(window=4)),
                                                                   ("mha", dict(k_eq_v=True)),  # keys made per row
                                                                   ("gqa", dict(k_eq_v=True, window=4))])
def test_a_left_padded_batch_gives_each_row_the_tokens_it_gives_alone(attn, kw):  # a window: across its ring's wrap
    model = randomized(tiny(attn, **kw))
    rows = [(prompt(model.cfg, 1, T)[0] + i) % model.cfg.vocab_size for i, T in enumerate((3, 9, 6))]
    idx, mask = left_padded(rows)
    for use_cache in (True, False):
        out = model.generate(idx, 16, temperature=0, attention_mask=mask, use_cache=use_cache)
        for r, p in enumerate(rows):
            assert torch.equal(out[r, idx.size(1) - len(p):], model.generate(p[None], 16, temperature=0)[0])


def test_padding_is_the_one_mask_a_prefill_gets(monkeypatch):
    import attention
    model = randomized(tiny("gqa"))
    calls, sdpa = [], attention.F.scaled_dot_product_attention
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(k) or sdpa(*a, **k))
    idx, mask = left_padded([prompt(model.cfg, 1, 5)[0], prompt(model.cfg, 1, 5)[0]])
    model.generate(idx, 3, temperature=0, attention_mask=mask)  # no row padded: fused causal attention
    assert calls and all(k.get("is_causal") and k.get("attn_mask") is None for k in calls)
    calls.clear()
    idx, mask = left_padded([prompt(model.cfg, 1, 5)[0], prompt(model.cfg, 1, 3)[0]])
    model.generate(idx, 3, temperature=0, attention_mask=mask)  # padded: the prefill attends under a mask
    assert not calls
    for bad, said in ((mask.flip(1), "pad on the left"), (mask[:, 1:], "must be the prompts' shape"),
                      (torch.zeros_like(mask), "all padding")):
        with pytest.raises(ValueError, match=said):
            model.generate(idx, 3, temperature=0, attention_mask=bad)


@pytest.mark.parametrize("attn", ["mha", "lrkv"])
def test_sampling_is_reproducible_with_a_seeded_generator(attn):
    cfg = tiny(attn)
    model = randomized(cfg)
    idx = prompt(cfg)

    def sample(seed, **kw):
        return model.generate(idx, 20, temperature=1.0, generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(sample(0), sample(0))
    assert not torch.equal(sample(0), sample(1))
    assert not torch.equal(sample(0, use_cache=False), sample(1, use_cache=False))
    assert torch.equal(sample(0), sample(0, use_cache=False))  # the same draws from the same distributions
    greedy = model.generate(idx, 20, temperature=0)
    assert torch.equal(sample(3, top_k=1), greedy)  # top-1 is greedy
    cold = model.generate(idx, 20, temperature=1e-4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(cold, greedy)  # temperature → 0 is greedy too


def test_top_k_draws_only_among_the_k_likeliest():
    cfg = tiny("mha")
    model = randomized(cfg)
    idx = prompt(cfg, B=8)
    out = model.generate(idx, 20, temperature=2.0, top_k=3, generator=torch.Generator().manual_seed(0))
    logits, _ = model(out[:, :-1])
    top3 = logits[:, 4:].topk(3, dim=-1).indices  # (B, 20, 3)
    picked = out[:, 5:].unsqueeze(-1)
    assert (top3 == picked).any(-1).all()
    assert (top3[..., :1] != picked).float().mean() > 0.2  # and not only the likeliest


def test_too_long_is_refused_with_a_clear_message():
    cfg = tiny("mha")
    model = randomized(cfg)
    with pytest.raises(ValueError, match=r"block_size=32; shorten the prompt or generate fewer") as e:
        model.generate(prompt(cfg, T=20), 13)
    assert "\n" not in str(e.value)
    assert model.generate(prompt(cfg, T=20), 12, temperature=0).shape == (2, 32)  # exactly full is fine


def test_random_mha_heads_are_diverse_and_identical_heads_are_not():
    H = 8
    model = randomized(tiny("mha", n_head=H, n_kv_head=H))
    for row in ev.head_diversity(model):
        assert row["uncentred"] > 95 and row["centred"] > 80
        G = row["gram"]
        assert torch.allclose(G.diagonal(), torch.ones(H, dtype=G.dtype))
    for block in model.h:  # copy head 0's query and key weights into every head
        for lin in (block.attn.c_q, block.attn.c_k):
            w = lin.weight.data.view(H, -1, lin.weight.size(1))
            w[:] = w[0].clone()
    for row in ev.head_diversity(model):
        assert abs(row["uncentred"] - 100 / H) < 0.1  # one direction among H
        assert row["mean_sim"] == pytest.approx(1.0)


def test_two_groups_of_identical_heads():
    # heads 0=1 and 2=3, the groups near orthogonal: G ≈ two blocks of ones, uncentred rank 2 of 4;
    # centring leaves G - 1/2 = ±1/2, one direction: 25%
    model = randomized(tiny("mha"))
    for block in model.h:
        for lin in (block.attn.c_q, block.attn.c_k):
            w = lin.weight.data.view(4, 16, 64)
            w[1], w[3] = w[0], w[2]
    for row in ev.head_diversity(model):
        assert abs(row["uncentred"] - 50) < 1.5 and abs(row["centred"] - 25) < 1.5


@pytest.mark.parametrize("attn", DESIGNS)
def test_gram_equals_explicit_bilinear_forms(attn):
    # the trace trick against A_h = W_Q,hᵀ W_K,h built as d × d matrices, from each module's own weights
    model = randomized(tiny(attn, mla_q_rank=16 if attn == "mla" else 0))
    attn_mod = model.h[1].attn
    Wq, Wk = ev.head_qk(attn_mod)
    H = model.cfg.n_head
    A = Wq.transpose(1, 2) @ Wk  # (H, d, d)
    S = torch.einsum("ixy,jxy->ij", A, A).double()
    torch.testing.assert_close(ev.head_gram(Wq, Wk), S / torch.outer(S.diagonal().sqrt(), S.diagonal().sqrt()))
    # and the per-head weights are the module's: q_h·k_h (no RoPE at position 0, no norms) from raw projections
    x = torch.randn(3, model.cfg.n_embd)
    if attn == "mla":
        d_n, d_c = attn_mod.d_n, attn_mod.d_c
        q = attn_mod.W_uq(attn_mod.W_dq(x)).view(3, H, -1)
        c, k_pe = attn_mod.W_dkv(x), attn_mod.W_kr(x)
        k_nope = attn_mod.W_uk(c).view(3, H, d_n)
        k = torch.cat([k_nope, k_pe.unsqueeze(1).expand(3, H, -1)], dim=-1)
    elif attn == "lrkv":
        k_s = attn_mod.W_sk(x)
        r_k = attn_mod.U_k(x).view(3, H, -1)  # (3, H, r)
        k = k_s.unsqueeze(1) + torch.einsum("nhr,hdr->nhd", r_k, attn_mod.B_k.view(H, attn_mod.d_h, -1))
        q = attn_mod.c_q(x).view(3, H, -1)
    else:
        q = attn_mod.c_q(x).view(3, H, -1)
        k = attn_mod.c_k(x).view(3, attn_mod.Hkv, -1).repeat_interleave(H // attn_mod.Hkv, dim=1)
    torch.testing.assert_close(torch.einsum("hax,nx->nha", Wq, x), q, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.einsum("hax,nx->nha", Wk, x), k, rtol=1e-4, atol=1e-4)


def test_lrkv_without_residuals_has_mqas_gram():
    lrkv = randomized(tiny("lrkv"))
    mqa = GPT(tiny("mqa")).eval()
    state = dict(lrkv.state_dict())
    for l, block in enumerate(lrkv.h):
        state[f"h.{l}.attn.c_k.weight"] = state.pop(f"h.{l}.attn.W_sk.weight")
        state[f"h.{l}.attn.c_v.weight"] = state.pop(f"h.{l}.attn.W_sv.weight")
        for k in ("U_k.weight", "U_v.weight", "B_k", "B_v"):
            del state[f"h.{l}.attn.{k}"]
    mqa.load_state_dict(state)
    with_residuals = [r["gram"] for r in ev.head_diversity(lrkv)]
    for block in lrkv.h:
        block.attn.B_k.data.zero_()
    for a, b, c in zip(ev.head_diversity(lrkv), ev.head_diversity(mqa), with_residuals):
        torch.testing.assert_close(a["gram"], b["gram"])
        assert (a["gram"] - c).abs().max() > 1e-3  # the residuals did make the heads' forms differ


def test_gqa_has_the_gram_of_mha_with_its_kv_heads_copied():
    # query head h reads K/V head h // (H / Hkv): an MHA with those copies is the same model
    gqa = randomized(tiny("gqa"))
    mha = GPT(tiny("mha")).eval()
    state = dict(gqa.state_dict())
    for l in range(2):
        for name in ("c_k", "c_v"):
            w = state[f"h.{l}.attn.{name}.weight"].view(2, 16, 64)
            state[f"h.{l}.attn.{name}.weight"] = w.repeat_interleave(2, dim=0).reshape(64, 64)
    mha.load_state_dict(state)
    idx = prompt(gqa.cfg, T=16)
    torch.testing.assert_close(gqa(idx)[0], mha(idx)[0])
    for a, b in zip(ev.head_diversity(gqa), ev.head_diversity(mha)):
        torch.testing.assert_close(a["gram"], b["gram"])


def test_lrkv_decode_without_rebuilding_keys_equals_rebuilding_them():
    # decode moves RoPE onto the query and reads cached key norms; the training path (prefix and
    # all) rebuilds every key, RoPEs and normalises it: the same attention output, to rounding
    from attention import KVCache
    cfg = tiny("lrkv", attn_scale=1.7)
    model = randomized(cfg)
    att = model.h[0].attn
    x = torch.randn(2, 20, cfg.n_embd, generator=torch.Generator().manual_seed(3))
    cache = KVCache(24)
    with torch.no_grad():
        att(x[:, :12], model.cos, model.sin, cache=cache)  # prefill 0..11
        ys = [att(x[:, t:t + 1], model.cos, model.sin, cache=cache, pos=torch.tensor([t]))[0]
              for t in range(12, 20)]
        full = att(x, model.cos, model.sin)[0]  # (2, 20, C)
    assert cache.buf["k_inv"].shape == (2, cfg.n_head, 24, 1) and cache.buf["k_s"].shape == (2, 1, 24, cfg.head_dim)
    torch.testing.assert_close(torch.cat(ys, 1), full[:, 12:], rtol=1e-5, atol=1e-5)


def test_cli_sample_and_heads_from_a_checkpoint(tmp_path, capsys):
    cfg = tiny("lrkv", vocab_size=320, block_size=64)
    model = randomized(cfg)
    path = str(tmp_path / "ckpt.pt")
    torch.save(dict(model=model.state_dict(), model_config=asdict(cfg), step=0,
                    train_config=dict(tokenizer="byte", preset="cpu", n_kv_head=0)), path)
    args = [path, "--device=cpu", "--sample=To be", "--max_new_tokens=20"]
    a, b = run_main(capsys, *args, "--seed=1"), run_main(capsys, *args, "--seed=1")
    assert a == b and a.startswith("To be") and a != run_main(capsys, *args, "--seed=2")
    # --dtype=bf16 (CUDA's auto): the weights held in bf16 and no autocast, so a compiled decode
    # step has no weight to cast; under autocast each call of a compiled step cast every one
    seen = []
    generate = GPT.generate
    try:
        GPT.generate = lambda self, *a, **k: seen.append(({p.dtype for p in self.parameters()},
                                                          torch.is_autocast_enabled("cpu"))) or generate(self, *a, **k)
        assert run_main(capsys, *args, "--seed=1", "--dtype=bf16").startswith("To be")
    finally:
        GPT.generate = generate
    assert seen == [({torch.bfloat16}, False)]
    out = run_main(capsys, path, "--device=cpu", "--heads")
    assert "approximate" in out and out.splitlines()[-1].split()[0] == "mean"
    assert "shorten the prompt" in exits_in_one_line(ev.main, [path, "--device=cpu", "--sample=To be", "--max_new_tokens=60"],
                                                     capsys)


def test_cli_heads_of_a_folder_of_runs(tmp_path, capsys):
    # eval.py FOLDER --heads: every run's mean over layers, then each design's mean and sd over runs
    means = {}
    for name, attn, seed in [("a_s0", "mha", 0), ("a_s1", "mha", 1), ("b_s0", "lrkv", 0)]:
        cfg = tiny(attn, vocab_size=320, block_size=64)
        model = randomized(cfg, seed)
        (tmp_path / name).mkdir()
        torch.save(dict(model=model.state_dict(), model_config=asdict(cfg), step=0,
                        train_config=dict(tokenizer="byte")), tmp_path / name / "ckpt.pt")
        rows = ev.head_diversity(model)
        means[name] = [sum(r[k] for r in rows) / len(rows) for k in ("uncentred", "centred", "mean_sim")]
    out = run_main(capsys, str(tmp_path), "--device=cpu", "--heads")
    sim = [means[n][2] for n in ("a_s0", "a_s1")]
    assert sim[0] != sim[1]  # two seeds, so the sd is not trivially 0
    assert f"a_s1/ckpt.pt (mha): {means['a_s1'][0]:.1f}% uncentred" in out
    mha = next(l for l in out.splitlines() if l.startswith("| mha |")).split("|")
    assert mha[2].strip() == "2" and mha[5].strip() == f"{np.mean(sim):.3f} ± {np.std(sim, ddof=1):.3f}"
    assert f"| lrkv | 1 | {means['b_s0'][0]:.1f} |" in out
    assert "only --heads" in exits_in_one_line(ev.main, [str(tmp_path), "--device=cpu"], capsys)


def run_main(capsys, *argv):
    ev.main(list(argv))
    return capsys.readouterr().out


def test_cli_bad_input_is_one_line(capsys):
    assert "no checkpoint at missing/ckpt.pt" in exits_in_one_line(ev.main, ["missing/ckpt.pt"], capsys)


@pytest.mark.parametrize("attn", ["mha", "lrkv"])
def test_generate_makes_no_host_tensor_and_reads_nothing_back_per_token(attn, monkeypatch):
    # on a GPU, a tensor made from a Python list is a host-to-device copy, and .item() or .tolist()
    # waits for the device: generate does neither once per token
    model = randomized(tiny(attn))
    idx = prompt(model.cfg)
    made, read = [], []
    tensor, item, tolist = torch.tensor, torch.Tensor.item, torch.Tensor.tolist
    monkeypatch.setattr(torch, "tensor", lambda *a, **k: made.append(a) or tensor(*a, **k))
    monkeypatch.setattr(torch.Tensor, "item", lambda self: read.append(1) or item(self))
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: read.append(1) or tolist(self))
    for temperature in (0, 1.0):
        model.generate(idx, 12, temperature=temperature, generator=torch.Generator().manual_seed(0))
    assert made == [] and read == []


def copied_bytes(fn):
    """The largest tensor copied (aten::copy_, bytes of its destination) while fn runs, eager."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    sizes = [torch.Size(e.input_shapes[0]).numel() for e in prof.events()
             if e.name == "aten::copy_" and e.input_shapes and e.input_shapes[0]]
    return 4 * max(sizes, default=0)  # fp32


@pytest.mark.parametrize("attn, kw", [(a, {}) for a in DESIGNS] + [("lrkv", dict(lrkv_factored=True))])
def test_a_decode_step_at_batch_4_reads_every_cache_in_place(attn, kw):
    # at batch > 1 a cache laid out (B, max_len, heads, d) and read through transposes is copied
    # whole by the batched matmuls every step; head-major buffers are read where they lie
    # d_h 64: the scores (B, H, 1, Tk) a step makes are small beside any cache buffer
    model = randomized(tiny(attn, n_layer=1, n_embd=256, block_size=64, mla_kv_rank=64, **kw))
    idx = torch.randint(0, model.cfg.vocab_size, (4, 48), generator=torch.Generator().manual_seed(0))
    caches = model.new_caches(64)
    with torch.no_grad():
        model(idx, caches=caches)  # a prefill of 48 tokens
        step = lambda: model(idx[:, :1], caches=caches, pos=torch.tensor([48]))
        step()
        biggest = copied_bytes(step)
    # an eighth of the layer's cache: less than any one of its K, V, latent or shared-key buffers
    assert biggest < caches[0].nbytes() / 8, (biggest, {k: tuple(b.shape) for k, b in caches[0].buf.items()})


def test_generate_stops_at_a_stop_token_or_when_told():
    model = randomized(tiny("mqa"))
    idx = prompt(model.cfg, B=2)
    full = model.generate(idx, 20, temperature=0)
    new = full[:, 5:].tolist()
    # stop tokens: the step at which both rows have made one of them
    tokens = {new[0][3], new[1][6]}
    last = max(min(i for i, t in enumerate(row) if t in tokens) for row in new)
    cut = model.generate(idx, 20, temperature=0, stop=tokens)
    assert torch.equal(cut, full[:, :5 + last + 1])
    one = model.generate(idx[:1], 20, temperature=0, stop=new[0][3])  # a bare token id
    assert one.size(1) <= 5 + 4 and torch.equal(model.generate(idx, 20, temperature=0, stop=[]), full)
    # a function of the new tokens so far
    seen = []
    cut = model.generate(idx, 20, temperature=0, stop=lambda ids: seen.append(len(ids[0])) or len(ids[0]) == 4)
    assert torch.equal(cut, full[:, :9]) and seen == [1, 2, 3, 4]


def eager_backends(monkeypatch):
    # torch.compile with a fresh eager backend per call, as each compile mode is its own backend:
    # dynamo's caching and its limits as with inductor, without inductor's compile time
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, fullgraph=False, mode=None, **kw: real(
        m, fullgraph=fullgraph, backend=lambda gm, example_inputs: gm.forward, **kw))
    torch._dynamo.reset()


def test_past_dynamos_recompile_limit_models_decode_eagerly_with_one_warning(monkeypatch, capsys):
    # every model's compiled decode step is an entry of one function, GPT.forward; fullgraph made
    # dynamo's limit (here 1) a FailOnRecompileLimitHit: now the models past it decode eagerly
    import generate
    eager_backends(monkeypatch)
    monkeypatch.setattr(generate, "LIMIT_WARNED", [])
    with torch._dynamo.config.patch(recompile_limit=1):
        for n_embd in (32, 64, 48):
            m = randomized(tiny("gqa", n_layer=1, n_embd=n_embd))
            idx = prompt(m.cfg, B=1)
            assert torch.equal(m.generate(idx, 6, temperature=0, compile=True),
                               m.generate(idx, 6, temperature=0, compile=False))
    warnings = [l for l in capsys.readouterr().err.splitlines() if l.startswith("warning: ")]
    assert len(warnings) == 1 and "recompile_limit" in warnings[0]


def test_bench_decodes_six_models_in_every_mode_at_several_contexts(monkeypatch):
    # 6 models x 3 contexts x 2 compiled modes = 36 entries of GPT.forward: bench lowered dynamo's
    # limit to 8 + 6 x 3 = 26, counting neither the modes nor what the process had set
    import bench
    eager_backends(monkeypatch)
    res = bench.decode_bench(tiny("gqa", n_layer=1), [8, 16, 32], steps=1, warmup=1,
                             modes=("eager", "compiled", "graphs"))
    assert len(res) == 6 * 3 * 3 and all(r["ms"] > 0 for r in res.values())


def test_a_decode_step_returning_to_its_bucket_runs_the_graph_compiled_for_it(monkeypatch):
    # the call in bucket 128 made the step dynamic, and dynamo served the return to 64 from that
    # dynamic graph, which cudagraph trees (keyed on a dynamic graph's sizes) recorded again. The
    # step compiled as generate.py compiles it, each graph by inductor (on the CPU), tagged: in
    # buckets 64, 128, then 64 again, the return runs the first graph and compiles none
    from torch._dynamo.utils import counters
    real, inductor, graphs, ran = torch.compile, torch._dynamo.lookup_backend("inductor"), [], []

    def tagged(gm, example_inputs):
        i, f = len(graphs), inductor(gm, example_inputs)
        graphs.append(i)
        return lambda *a: ran.append(i) or f(*a)
    monkeypatch.setattr(torch, "compile", lambda m, **kw: real(m, backend=tagged, **kw))
    torch._dynamo.reset()
    counters.clear()
    model = randomized(tiny("lrkv", n_layer=1, block_size=128))
    idx = prompt(model.cfg, B=1, T=16)
    for n, bucket in ((32, 64), (100, 128), (40, 64)):  # 16 + n - 1 slots
        ran.clear()
        out = model.generate(idx, n, temperature=0, compile=True)
        assert sorted(k[1] for k in model.__dict__["_kept"])[-1] >= bucket
    assert graphs == [0, 1] and ran == [0] * 39  # its steps, all on the graph of its first visit
    assert counters["stats"]["unique_graphs"] == 2
    assert torch.equal(out, model.generate(idx, 40, temperature=0, compile=False))


def test_a_compiled_decode_step_of_a_checkpoint_casts_no_weight():
    # inductor's code for the step (a real compile): under bf16 autocast with fp32 weights it
    # allocated a bf16 copy of every weight matrix each call; eval.py decodes a bf16 model instead
    import re
    from torch._inductor.utils import run_and_get_code
    model, amp = ev.for_decoding(randomized(tiny("mha", n_layer=1, block_size=32)), "cpu", "bf16")
    idx = prompt(model.cfg, B=1, T=8)
    caches = model.new_caches(16)
    with torch.no_grad(), amp:
        model(idx, caches=caches)
        step = decoder(model, True)
        _, code = run_and_get_code(lambda: step(idx[:, :1].contiguous(), caches=caches, pos=torch.tensor([8])))
    allocated = re.findall(r"empty_strided_cpu\(\(([\d, ]+)\)", "\n".join(code))
    weights = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    assert allocated and not [a for a in allocated if tuple(int(x) for x in a.split(",") if x.strip()) in weights]


@pytest.mark.parametrize("attn", DESIGNS)
def test_generate_keeps_its_caches_between_calls_of_one_batch_size(attn):
    # a fresh cache each call sized to the call gave a CUDA graph new addresses and a new length
    # to record every time; the kept caches are the same buffers, and nothing the last call left
    # in them leaks into the next
    model = randomized(tiny(attn, block_size=128))
    a, b = prompt(model.cfg, B=2, T=5), prompt(model.cfg, B=2, T=9) % 50
    model.generate(a, 20, temperature=0)
    ptrs = [buf.data_ptr() for cs in model.__dict__["_kept"].values() for c in cs for buf in c.buf.values()]
    second = model.generate(b, 30, temperature=0)  # 38 slots: the same bucket of 64
    assert [buf.data_ptr() for cs in model.__dict__["_kept"].values() for c in cs for buf in c.buf.values()] == ptrs
    assert torch.equal(second, model.generate(b, 30, temperature=0, use_cache=False))
    model.generate(prompt(model.cfg, B=3), 20, temperature=0)  # another batch size: other buffers
    assert sorted(k[:2] for k in model.__dict__["_kept"]) == [(2, 64), (3, 64)]


def test_two_length_buckets_visited_in_turn_keep_their_addresses():
    # one set kept (the old way) gave a bucket new buffers each time it came back, so its CUDA
    # graph was recorded again; now each (batch, bucket) keeps its own
    model = randomized(tiny("lrkv", block_size=256))
    short, long = prompt(model.cfg, B=2, T=5), prompt(model.cfg, B=2, T=90)
    ptrs = lambda: {k: [b.data_ptr() for c in cs for b in c.buf.values()] for k, cs in model.__dict__["_kept"].items()}
    model.generate(short, 10, temperature=0)
    model.generate(long, 10, temperature=0)  # 99 slots: the bucket of 128
    first = ptrs()
    for _ in range(2):
        out = model.generate(short, 10, temperature=0)
        model.generate(long, 10, temperature=0)
    assert ptrs() == first and sorted(k[1] for k in first) == [64, 128]
    assert torch.equal(out, model.generate(short, 10, temperature=0, use_cache=False))

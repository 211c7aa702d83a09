"""
Evaluate a checkpoint, sample from it, and measure what each KV-cache design costs at its shape.

    python eval.py out/cpu_lrkv_s0/ckpt.pt                  # test loss and bits per byte on the held-out split
    python eval.py out/cpu_lrkv_s0/ckpt.pt --sample="ROMEO:" --max_new_tokens=200 --seed=1
    python eval.py out/cpu_lrkv_s0/ckpt.pt --heads          # head diversity (paper §4.3, Table 3)
    python eval.py out/cpu_lrkv_s0/ckpt.pt --kv             # cache bytes of all five designs at this shape
    python eval.py --preset=cpu --block_size=1024 --decode-bench --contexts=64,256,1024

--kv and --decode-bench need only a shape: they build every design at the checkpoint's (or --preset's)
shape with random weights, which decide neither memory nor speed.
"""
import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, replace

import torch
import torch.distributed as dist

import flops
from model import GPT, PRESETS, GPTConfig, preset

DESIGNS = flops.DESIGNS


@torch.no_grad()
def evaluate(model, val, T, batch_size, eval_tokens, token_bytes, device, rank=0, world=1):
    """Mean cross-entropy (nats/token) and bits per byte over the first eval_tokens held-out tokens,
    cut into consecutive windows of T: the same tokens for every design and any world size.
    Ranks take windows round-robin and sum (loss, tokens, bytes) together. val is load_split's
    answer (a sharded split uses its first shard); token_bytes the tokenizer's bytes per token."""
    val = val[0] if isinstance(val, list) else val
    token_bytes = torch.as_tensor(token_bytes, dtype=torch.float64, device=device)
    model.eval()
    n_windows = max(1, min(eval_tokens, len(val) - 1) // T)
    mine = list(range(rank, n_windows, world))
    # every rank makes as many forwards as the first (FSDP2 gathers weights in each, a collective):
    # one with no windows left runs window 0 and drops it
    n_batches = math.ceil(math.ceil(n_windows / world) / batch_size)
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # nats, tokens, bytes
    for i in range(0, n_batches * batch_size, batch_size):
        ws = mine[i:i + batch_size]
        rows = [torch.from_numpy(val[w * T:w * T + T + 1].astype("int64")) for w in ws or [0]]
        xy = torch.stack(rows).to(device)
        x, y = xy[:, :-1], xy[:, 1:]
        logits, _ = model(x)
        nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum")
        if ws:
            sums += torch.stack([nats.double(), torch.tensor(y.numel(), dtype=torch.float64, device=device),
                                 token_bytes[y].sum()])
    if world > 1:
        dist.all_reduce(sums)
    model.train()
    nats, n, nbytes = sums.tolist()
    return nats / n, nats / (math.log(2) * nbytes)


def load_model(path, device="cpu"):
    """(model on device, the checkpoint's other fields but its weights and optimiser state) from a
    train.py checkpoint, or a one-line error. Memory-mapped on the CPU: the optimiser state, often
    twice the weights, is never read, and only the model goes to the device."""
    if not os.path.exists(path):
        sys.exit(f"error: no checkpoint at {path}; train one with `python train.py`")
    try:
        if os.path.isdir(path):  # a --fsdp checkpoint, ckpt_STEP/: every rank's shards, and meta.pt
            import torch.distributed.checkpoint as dcp
            ckpt = torch.load(os.path.join(path, "meta.pt"), map_location="cpu", weights_only=False)
            model = GPT(GPTConfig(**ckpt["model_config"]))
            state = {"model": model.state_dict()}
            dcp.load(state, checkpoint_id=path)  # one process gathers the shards; the optimisers' stay unread
            model.load_state_dict(state["model"])
        else:
            ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
            model = GPT(GPTConfig(**ckpt["model_config"]))
            model.load_state_dict(ckpt.pop("model"))
            ckpt.pop("optims", None)
    except Exception as e:
        sys.exit(f"error: {path} is not a readable nanoKV checkpoint ({type(e).__name__}: "
                 f"{str(e).splitlines()[0][:120]}); restore it or train again")
    return model.to(device).eval(), ckpt


# -----------------------------------------------------------------------------
# the five designs at one shape: cache memory and decode speed

def design_cfgs(cfg, gqa_kv_heads=None):
    """{design: config} at cfg's shape, each keeping cfg's design settings (r, d_c, ...), and the
    factored LRKV as "lrkv-f". An MHA or MQA config has n_kv_head resolved to H or 1, so its GQA
    takes gqa_kv_heads (None = the default)."""
    out = {}
    for attn in DESIGNS:
        fields = {**asdict(cfg), "attn": attn, "lrkv_factored": False}
        if attn == "gqa" and cfg.attn in ("mha", "mqa"):
            fields["n_kv_head"] = gqa_kv_heads
        out[attn] = GPTConfig(**fields)
    out["lrkv-f"] = GPTConfig(**{**asdict(out["lrkv"]), "lrkv_factored": True})
    return out


def shape(cfg):
    return (f"{cfg.n_layer} layers, {cfg.n_head} heads, d_model {cfg.n_embd}, d_h {cfg.head_dim}, "
            f"vocab {cfg.vocab_size}")


def build(cfg, device="cpu", dtype=torch.float32):
    torch.manual_seed(0)  # random weights: neither cache bytes nor speed depend on their values
    return GPT(cfg).to(device=device, dtype=dtype).eval()


def check_context(T, cfg):
    if not 2 <= T <= cfg.block_size:
        raise ValueError(f"context {T} is outside 2..block_size={cfg.block_size}; pass a smaller one "
                         "or a larger --block_size")


@torch.no_grad()
def kv_table(cfg, T, batch=1, dtype=torch.float32, device="cpu", gqa_kv_heads=None):
    """Per design: the bytes its caches hold after a prefill of T tokens (allocated, summed over
    layers), next to flops.kv_cache_bytes_per_token × T at the same element size."""
    check_context(T, cfg)
    rows = []
    for attn, c in design_cfgs(cfg, gqa_kv_heads).items():
        model = build(c, device, dtype)
        caches = model.new_caches(max_len=T)
        model(torch.zeros(batch, T, dtype=torch.long, device=device), caches=caches)
        elem = torch.finfo(dtype).bits // 8
        rows.append(dict(design=attn, setting=flops.setting(c), allocated=sum(k.nbytes() for k in caches),
                         formula=batch * T * flops.kv_cache_bytes_per_token(c, bytes_per_elem=elem)))
    for r in rows:
        r["pct_mha"] = 100 * r["allocated"] / rows[0]["allocated"]
    return rows


@torch.no_grad()
def decode_bench(cfg, contexts, steps=30, device="cpu", dtype=torch.float32, batch=1, warmup=5,
                 no_cache=False, gqa_kv_heads=None, modes=("eager",)):
    """Decode speed of every design at cfg's shape. A step at context N feeds token N after a prefill
    of N-1, so it attends over N positions; every step writes that token into the same slot, so every timed
    step sees exactly N. Within each repetition the designs run one step each, in a rotating order,
    so a drift in machine speed hits all alike; the median step is reported. modes: "eager", and/or
    "compiled", each design's decode step through torch.compile (GPT.decoder; the warm-up steps pay
    for compiling), timed side by side with the eager one on the same cache.
    Returns {(design, N, mode): dict(ms=per step, tok_s=, vs_mha=tok/s over MHA's in that mode,
    mflop=forward FLOPs per token[, ms_no_cache=])}."""
    for N in contexts:
        check_context(N, cfg)
    models = {a: build(c, device, dtype) for a, c in design_cfgs(cfg, gqa_kv_heads).items()}
    cuda = torch.device(device).type == "cuda"

    def timed(f):
        if cuda:
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        f()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t

    out = {}
    # one static graph per design and context, all from GPT.forward: past dynamo's default of 8 per
    # function, and without its automatic dynamic shapes (a recompile would otherwise trace every
    # design after the first with symbolic sizes, which a single model's decoding never sees)
    with torch._dynamo.config.patch(recompile_limit=8 + len(models) * len(contexts), automatic_dynamic_shapes=False):
        for N in contexts:
            idx = torch.randint(0, cfg.vocab_size, (batch, N), generator=torch.Generator().manual_seed(N)).to(device)
            caches = {a: m.new_caches(max_len=N) for a, m in models.items()}
            for a, m in models.items():
                m(idx[:, :N - 1], caches=caches[a])  # prefill N-1 tokens
            tok, pos = idx[:, N - 1:].contiguous(), torch.tensor([N - 1], device=device)

            def step(a, mode):
                # the token at position N - 1, written over the same slot at every step
                return timed(lambda: models[a].decoder(mode == "compiled")(tok, caches=caches[a], pos=pos))

            names = [(a, mode) for a in models for mode in modes]
            t_step, t_full = {k: [] for k in names}, {k: [] for k in names}
            for i in range(warmup + steps):
                for a, mode in names[i % len(names):] + names[:i % len(names)]:
                    dt = step(a, mode)
                    dt_full = timed(lambda: models[a](idx)) if no_cache else 0.0  # a token without a cache
                    if i >= warmup:
                        t_step[a, mode].append(dt)
                        t_full[a, mode].append(dt_full)
            for a, mode in names:
                ms = 1000 * statistics.median(t_step[a, mode])
                out[a, N, mode] = dict(ms=ms, tok_s=1000 * batch / ms,
                                       mflop=flops.decode_flops_per_token(models[a].cfg, N) / 1e6)
                if no_cache:
                    out[a, N, mode]["ms_no_cache"] = 1000 * statistics.median(t_full[a, mode])
            for a, mode in names:
                out[a, N, mode]["vs_mha"] = out[a, N, mode]["tok_s"] / out["mha", N, mode]["tok_s"]
    return out


# -----------------------------------------------------------------------------
# head diversity (paper §4.3, Eqs. 11-12, Table 3)

def head_qk(attn):
    """Each query head's effective query and key weights (H, d_qk, d) each, rows as outputs, so
    that head h scores x_i against x_j as x_iᵀ A_h x_j with A_h = W_Q,hᵀ W_K,h (d × d).
    An approximation of what attention uses: RoPE rotates q and k by position and QK-norm (MLA:
    the c_kv norm, and the c_q norm under query compression) rescales them per token, in between."""
    H = attn.H
    if hasattr(attn, "c_k"):  # mha / gqa / mqa: query head h reads K/V head h // (H / Hkv), as SDPA's enable_gqa
        Wq = attn.c_q.weight.view(H, attn.d_h, -1)
        Wk = attn.c_k.weight.view(attn.Hkv, attn.d_h, -1).repeat_interleave(H // attn.Hkv, dim=0)
        return Wq, Wk
    if hasattr(attn, "W_sk"):  # lrkv: W_K,h = W_s^K + U_h B_hᵀ (Eq. 2), here transposed: W_s^K + B_h U_h
        d_h, r = attn.d_h, attn.r
        Wk = attn.W_sk.weight + attn.B_k.view(H, d_h, r) @ attn.U_k.weight.view(H, r, -1)  # (H, d_h, d)
        return attn.c_q.weight.view(H, d_h, -1), Wk
    # mla: q_h = [q_nope_h, q_pe_h]; k_h = [W_uk,h W_dkv x, W_kr x], the RoPE key shared by all heads
    d_n, d_r, d_c = attn.d_n, attn.d_r, attn.d_c
    Wq = attn.W_uq.weight @ attn.W_dq.weight if hasattr(attn, "W_dq") else attn.c_q.weight
    W_uk = attn.W_uk.weight.view(H, d_n, d_c)  # (H, d_n, d_c)
    Wk = torch.cat([W_uk @ attn.W_dkv.weight, attn.W_kr.weight.expand(H, d_r, -1)], dim=1)  # (H, d_n + d_r, d)
    return Wq.view(H, d_n + d_r, -1), Wk


def head_gram(Wq, Wk):
    """G_ij = <A_i, A_j>_F / (‖A_i‖ ‖A_j‖) (Eq. 11) without forming any d × d matrix:
    <A_i, A_j>_F = tr(W_K,iᵀ W_Q,i W_Q,jᵀ W_K,j) = Σ_ab (W_Q,i W_Q,jᵀ)_ab (W_K,i W_K,jᵀ)_ab."""
    H, a, d = Wq.shape
    QQ = (Wq.reshape(H * a, d) @ Wq.reshape(H * a, d).T).view(H, a, H, a).transpose(1, 2)  # (H, H, a, a)
    KK = (Wk.reshape(H * a, d) @ Wk.reshape(H * a, d).T).view(H, a, H, a).transpose(1, 2)
    S = (QQ * KK).sum((-2, -1)).double()  # (H, H)
    n = S.diagonal().sqrt()
    return S / torch.outer(n, n)


def effective_rank(G):
    """exp(entropy of the normalised eigenvalues); 0 for a zero matrix (no spread at all)."""
    lam = torch.linalg.eigvalsh(G).clamp(min=0)
    if lam.sum() <= 1e-12 * len(lam):
        return 0.0
    p = lam / lam.sum()
    p = p[p > 0]
    return math.exp(-(p * p.log()).sum().item())


@torch.no_grad()
def head_diversity(model):
    """Per layer: the Gram matrix of the heads' bilinear forms, its effective rank uncentred and with
    kernel-PCA centring (Eq. 12), both as % of H, and the mean off-diagonal similarity."""
    rows = []
    for layer, block in enumerate(model.h):
        G = head_gram(*(w.float() for w in head_qk(block.attn)))
        H = len(G)
        Gc = G - G.mean(0, keepdim=True) - G.mean(1, keepdim=True) + G.mean()
        rows.append(dict(layer=layer, gram=G, uncentred=100 * effective_rank(G) / H,
                         centred=100 * effective_rank(Gc) / H,
                         mean_sim=((G.sum() - G.trace()) / (H * (H - 1))).item() if H > 1 else 1.0))
    return rows


# -----------------------------------------------------------------------------

def fail(msg):
    sys.exit(f"error: {msg}")  # one line, exit status 1


def main(argv=None):
    from tokenizer import get_tokenizer
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", nargs="?", help="a ckpt.pt written by train.py, or a ckpt_STEP/ folder (--fsdp)")
    p.add_argument("--preset", help=f"a shape instead of a checkpoint, for --kv and --decode-bench: "
                                    f"{', '.join(PRESETS)}")
    p.add_argument("--block_size", type=int, help="--kv, --decode-bench: override the shape's context")
    p.add_argument("--eval_tokens", type=int, default=None, help="default: the run's own")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sample", metavar="PROMPT", help="print a continuation of PROMPT ('' = from scratch)")
    p.add_argument("--max_new_tokens", type=int, default=None, help="default: 200, or what fits the context")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    p.add_argument("--top_k", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv", action="store_true", help="cache bytes allocated by a prefill, every design")
    p.add_argument("--context", type=int, default=None, help="--kv: tokens prefilled (default block_size)")
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto", help="auto: bfloat16 on "
                   "CUDA, float32 on the CPU; the weights of --kv and --decode-bench, autocast for the test loss "
                   "and --sample")
    p.add_argument("--decode-bench", action="store_true", help="decode speed of every design, random weights")
    p.add_argument("--contexts", default=None, help="--decode-bench: e.g. 64,256,1024 (default block_size/4,/2,/1)")
    p.add_argument("--steps", type=int, default=30, help="--decode-bench: timed steps per design and context")
    p.add_argument("--threads", type=int, default=None, help="--decode-bench: CPU threads (default torch's)")
    p.add_argument("--no-cache", action="store_true", help="--decode-bench: add the cost of a token without a cache")
    p.add_argument("--modes", default="eager,compiled", help="--decode-bench: eager and/or compiled decode "
                   "steps, side by side (compiling takes seconds per design and context)")
    p.add_argument("--heads", action="store_true", help="head diversity of the checkpoint's attention")
    args = p.parse_args(argv)
    shape_only = args.kv or args.decode_bench
    if (args.checkpoint is None) == (args.preset is None):
        fail("give a checkpoint path, or --preset=NAME (with --kv or --decode-bench), not both")
    if args.preset and (args.sample is not None or args.heads or not shape_only):
        fail("--preset gives only a shape, for --kv and --decode-bench; test loss, --sample and --heads "
             "need a checkpoint")
    # auto: what train.py computes in (bf16 on GPUs: fused attention kernels, the caches' real bytes)
    dtype_on = lambda device: getattr(torch, args.dtype if args.dtype != "auto" else
                                      "bfloat16" if device.startswith("cuda") else "float32")
    dtype = dtype_on(args.device)
    amp = torch.autocast(args.device.partition(":")[0], dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)
    if args.preset:
        try:  # as GQA, so its n_kv_head survives; design_cfgs resolves the other four
            cfg, gqa_kv_heads, name = preset(args.preset, attn="gqa"), None, f"preset {args.preset}"
        except ValueError as e:
            fail(e)
    else:
        model, ckpt = load_model(args.checkpoint, args.device)
        cfg, tc, name = model.cfg, ckpt.get("train_config", {}), args.checkpoint
        gqa_kv_heads = tc.get("n_kv_head") or PRESETS.get(tc.get("preset"), {}).get("n_kv_head")
    if shape_only and args.block_size:
        try:
            cfg = replace(cfg, block_size=args.block_size)
        except ValueError as e:
            fail(e)

    if args.sample is not None:
        tok = get_tokenizer(ckpt["train_config"]["tokenizer"])
        ids = tok.encode(args.sample) or [tok.eot]  # an empty prompt starts a new document
        n = args.max_new_tokens if args.max_new_tokens is not None else min(200, model.cfg.block_size - len(ids))
        g = torch.Generator(args.device).manual_seed(args.seed)
        try:
            with amp:
                out = model.generate(torch.tensor([ids]), n, args.temperature, args.top_k, generator=g)
        except ValueError as e:
            fail(e)
        print(tok.decode(out[0].tolist()))

    if args.kv:
        T = args.context or cfg.block_size
        try:
            rows = kv_table(cfg, T, dtype=dtype, device=args.device, gqa_kv_heads=gqa_kv_heads)
        except ValueError as e:
            fail(e)
        print(f"KV cache after a prefill of {T} tokens, batch 1, {str(dtype)[6:]}; {name}: {shape(cfg)}")
        print(f"{'design':6} {'setting':>8} {'allocated':>12} {'formula':>12} {'KiB/token':>10} {'% MHA':>6}")
        for r in rows:
            print(f"{r['design']:6} {r['setting']:>8} {r['allocated']:12,d} {r['formula']:12,d} "
                  f"{r['allocated'] / T / 1024:10.2f} {r['pct_mha']:6.1f}")

    if args.decode_bench:
        try:
            contexts = [int(c) for c in args.contexts.split(",")] if args.contexts else \
                [cfg.block_size // 4, cfg.block_size // 2, cfg.block_size]
            for N in contexts:
                check_context(N, cfg)
        except ValueError as e:
            fail(f"--contexts: {e}")
        modes = args.modes.split(",")
        if not modes or set(modes) - {"eager", "compiled"}:
            fail(f"--modes={args.modes}: use eager, compiled or eager,compiled")
        if args.threads:
            torch.set_num_threads(args.threads)
        print(f"decode, batch 1, {str(dtype)[6:]}; {name}: {shape(cfg)}; random weights (speed does not "
              f"depend on them); median of {args.steps} steps after warm-up, designs and modes interleaved")
        for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
            # other processes on the cores wreck CPU timings: show the load the run started under
            where = (f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f} at start"
                     if device == "cpu" else torch.cuda.get_device_name())
            dt = dtype_on(device)
            res = decode_bench(cfg, contexts, args.steps, device, dt, no_cache=args.no_cache,
                               gqa_kv_heads=gqa_kv_heads, modes=modes)
            print(f"{device} ({where}); cache bytes per token ({str(dt)[6:]}); per context: ms/token, tokens/s, "
                  "tokens/s vs MHA, forward MFLOP per token (flops.decode_flops_per_token)"
                  + (", ms/token without a cache (full forward)" if args.no_cache else ""))
            nc = args.no_cache
            head = f"{'ms':>7} {'tok/s':>6} {'vs MHA':>6} {'MFLOP':>6}" + (f" {'no-cache':>8}" if nc else "")
            cell = lambda r: (f"{r['ms']:7.3f} {r['tok_s']:6.0f} {r['vs_mha']:5.2f}x {r['mflop']:6.2f}"
                              + (f" {r['ms_no_cache']:8.3f}" if nc else ""))
            elem = torch.finfo(dt).bits // 8
            print(f"{'context':24}" + "".join(f"{N:>{len(head) + 2}d}" for N in contexts))
            print(f"{'design':7} {'B/tok':>7} {'mode':>8}" + f"  {head}" * len(contexts))
            for mode in modes:
                for a, c in design_cfgs(cfg, gqa_kv_heads).items():
                    print(f"{a:7} {flops.kv_cache_bytes_per_token(c, elem):7d} {mode:>8}"
                          + "".join(f"  {cell(res[a, N, mode])}" for N in contexts))

    if args.heads:
        rows = head_diversity(model)
        print(f"head diversity, {name} ({cfg.attn}, {cfg.n_layer} layers x {cfg.n_head} heads): effective "
              "rank of the Gram matrix of A_h = W_Q,h W_K,hᵀ, % of H (paper §4.3, Table 3).")
        print("approximate: RoPE and QK-norm act between the projections and the scores, so attention does "
              "not use exactly these bilinear forms")
        print(f"{'layer':>5} {'uncentred':>9} {'centred':>8} {'mean similarity':>15}")
        for r in rows:
            print(f"{r['layer']:5d} {r['uncentred']:8.1f}% {r['centred']:7.1f}% {r['mean_sim']:15.3f}")
        mean = lambda k: sum(r[k] for r in rows) / len(rows)
        print(f"{'mean':>5} {mean('uncentred'):8.1f}% {mean('centred'):7.1f}% {mean('mean_sim'):15.3f}")

    if args.sample is None and not shape_only and not args.heads:  # the default: test loss
        from prepare import load_split
        tok = get_tokenizer(tc["tokenizer"])
        try:
            val = load_split(os.path.join(tc.get("data_dir", "data"), f"{tc['dataset']}_{tc['tokenizer']}"), "val")
        except FileNotFoundError as e:
            fail(e)
        with amp:
            loss, bpb = evaluate(model, val, model.cfg.block_size, args.batch_size,
                                 args.eval_tokens or tc["eval_tokens"], tok.token_bytes(), args.device)
        print(f"{args.checkpoint}: step {ckpt['step']}, {model.cfg.attn}: test loss {loss:.4f}, {bpb:.4f} bits/byte")


if __name__ == "__main__":
    main()

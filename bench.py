"""
What each design costs at a shape, measured side by side in one run, with random weights (they
decide neither speed nor memory):

    python bench.py [train]     training steps/s of the five designs and a nanoGPT-style reference
    python bench.py decode      decode tokens/s per context, eager and compiled (generate.decoder)
    python bench.py kv          KV-cache bytes after a prefill, against flops.py's formula
    torchrun --standalone --nproc_per_node=2 bench.py muon   the optimisers' share of a DDP step,
                                Muon alone on every rank and shared (DistMuon), and from FLOPs on 8 GPUs

    python bench.py --preset=128m --batch_size=8 --compile
    python bench.py decode --preset=cpu --block_size=1024 --contexts=64,256,1024
    python bench.py kv --preset=512m-8k --context=8192

Machine noise falls on every design alike: each round times every model in turn, each round
starting with the next one, and the table gives medians and ratios measured in the same run.
"""
import argparse
import os
import statistics
import time
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import flops
from common import (DESIGNS, ArgumentParser, autocast, count, device_name, fail, native_bf16, resolve_device,
                    resolve_dtype, setting, torch_dtype)
from generate import decoder
from loss import LinearCrossEntropy
from model import GPT, PRESETS, preset
from muon import EMBED_LR, DistMuon, Muon, newton_schulz_dtype, ns_flops, optimizers


def design_cfgs(cfg, sharing=False):
    """{design: config} at cfg's shape, each keeping cfg's settings (GQA's K/V heads, r, d_c), and
    the factored LRKV as "lrkv-f". sharing: also each design that takes it with K=V ("mha=kv") and
    with K/V shared by pairs of layers ("mha/2"), and every other way E8 cuts MHA's cache to a half
    or a quarter (equal_cache_cfgs)."""
    out = {a: replace(cfg, attn=a, lrkv_factored=False) for a in DESIGNS}
    out["lrkv-f"] = replace(out["lrkv"], lrkv_factored=True)
    for a in DESIGNS if sharing else ():
        for name, kw in ((f"{a}=kv", dict(k_eq_v=True)), (f"{a}/2", dict(kv_share=2))):
            try:
                out[name] = replace(out[a], **kw)
            except ValueError:  # a design without K=V, or an odd layer count
                pass
    return {**out, **equal_cache_cfgs(out["mha"])} if sharing else out


def equal_cache_cfgs(mha):
    """E8's other rows (docs/plan.md) at mha's shape: MLA's d_c and LRKV's r, each the widest with
    at most a half (MLA: and a quarter) of MHA's cache per token ("mla112", "lrkv7"); that LRKV
    and MHA with K=V, each with kv_share 2 ("lrkv7/2", "mha=kv/2"); windows of a half and a
    quarter of the context ("mha w128"). A way the shape cannot take is left out."""
    share = lambda c: flops.kv_cache_bytes_per_token(c) / flops.kv_cache_bytes_per_token(mha)

    def widest(attn, knob, f):  # the widest setting of knob with at most f of MHA's cache
        fits = []
        for v in range(1, mha.n_embd):
            try:
                fits += [c] if share(c := replace(mha, attn=attn, **{knob: v})) <= f else []
            except ValueError:  # a width the design refuses
                pass
        return fits[-1] if fits else None
    ways, lrkv = {}, widest("lrkv", "lrkv_rank", 1 / 2)
    for c in (widest("mla", "mla_kv_rank", 1 / 2), widest("mla", "mla_kv_rank", 1 / 4), lrkv):
        if c:
            ways[f"{c.attn}{c.mla_kv_rank if c.attn == 'mla' else c.lrkv_rank}"] = c
    halves = [(f"lrkv{lrkv.lrkv_rank}/2", lrkv)] if lrkv else []
    for name, c in halves + [("mha=kv/2", replace(mha, k_eq_v=True))]:
        try:
            ways[name] = replace(c, kv_share=2)
        except ValueError:  # an odd layer count
            pass
    for f in (2, 4):
        ways[f"mha w{mha.block_size // f}"] = replace(mha, window=mha.block_size // f)
    return ways


def shape(cfg):
    return (f"{cfg.n_layer} layers, {cfg.n_head} heads, d_model {cfg.n_embd}, d_h {cfg.head_dim}, "
            f"vocab {cfg.vocab_size}")


def build(cfg, device="cpu", dtype=torch.float32):
    # made on its device: a GPU's model is never built on the CPU first, then copied over
    torch.manual_seed(0)
    with torch.device(device):
        return GPT(cfg).to(dtype=dtype).eval()


def check_context(T, cfg):
    if not 2 <= T <= cfg.block_size:
        raise ValueError(f"context {T} is outside 2..block_size={cfg.block_size}; pass a smaller one "
                         "or a larger --block_size")


def timer(device):
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def timed(f):
        sync()
        t = time.perf_counter()
        f()
        sync()
        return time.perf_counter() - t
    return timed


# -----------------------------------------------------------------------------
# training throughput

class RefBlock(nn.Module):  # nanoGPT's Block, bias=False
    def __init__(self, cfg):
        super().__init__()
        C, self.H = cfg.n_embd, cfg.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(C, bias=False), nn.LayerNorm(C, bias=False)
        self.c_attn = nn.Linear(C, 3 * C, bias=False)
        self.c_proj = nn.Linear(C, C, bias=False)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C, bias=False), nn.GELU(), nn.Linear(4 * C, C, bias=False))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).view(B, T, 3, self.H, C // self.H).transpose(1, 3).unbind(2)  # (B, H, T, d_h)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp(self.ln_2(x))


class Reference(nn.Module):
    """nanoGPT's GPT at our shape, with our loss head and optimisers, so the comparison is of the
    blocks: learned positions, LayerNorm, GELU, one fused q/k/v projection. It has no RoPE, QK-norm
    or ReLU², so it is what a careful implementation of the paper's base should at least match."""

    def __init__(self, cfg):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(RefBlock(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=False)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe.weight[:idx.size(1)]
        for block in self.h:
            x = block(x)
        return None, LinearCrossEntropy.apply(self.ln_f(x).flatten(0, 1), self.lm_head.weight, targets.reshape(-1))


def train_models(cfg, device, ns_dtype, compile):
    """{name: (config, model, what a step runs, optimisers)}: the designs and the reference at cfg's
    shape, each with train.py's optimisers."""
    models = {}
    for name in list(DESIGNS) + ["gpt2"]:
        c = replace(cfg, attn=name if name in DESIGNS else "mha")
        with torch.device(device):
            model = (Reference if name == "gpt2" else GPT)(c)
        opts = optimizers(model, ns_dtype, shared=False)  # Muon: h.*; AdamW: wte, lm_head, gains
        rest = [p for n, p in model.named_parameters()
                if not n.startswith("h.") and n not in ("wte.weight", "lm_head.weight")]
        if rest:  # the reference's positions and final LayerNorm: AdamW, no decay
            opts[1].add_param_group(dict(params=rest, lr=EMBED_LR, weight_decay=0.0))
        # dynamic=False: each model its own static graph, as a training run compiles it
        models[name] = (c, model, torch.compile(model, dynamic=False) if compile else model, opts)
    return models


def train_step(model, run, opts, x, amp, timed):
    """One training step on x, as train.py takes it -> (seconds of forward + backward, of clipping +
    optimiser steps)."""
    def fwd_bwd():
        with amp:
            _, loss = run(x, x)
        loss.backward()

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for o in opts:
            o.step()
        model.zero_grad(set_to_none=True)
    return timed(fwd_bwd), timed(update)


def step_memory_mb(step, model, x, amp, device):
    """The memory of a training step: on CUDA the peak of one (step() takes it); elsewhere the
    activations a forward saves for backward, each storage once."""
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        step()
        return torch.cuda.max_memory_allocated() / 2**20
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), amp:
        model(x, x)
    for p in model.parameters():  # parameters are not activations
        saved.pop(p.untyped_storage().data_ptr(), None)
    return sum(saved.values()) / 2**20


def bench_train(args, cfg, device, dtype):
    """Per model: one training step (forward + backward, then clipping and Muon + AdamW, as train.py)
    a round; the median over rounds, ratios to MHA and to the reference, the optimiser's share, and
    the memory of a step (step_memory_mb)."""
    from prepare import load_split, prepare, windows
    amp, ns_dtype = autocast(device, dtype), newton_schulz_dtype(args.muon_dtype, native_bf16(device))
    timed = timer(device)
    models = train_models(cfg, device, ns_dtype, args.compile)
    names = list(models)
    x = torch.randint(0, cfg.vocab_size, (args.batch_size, cfg.block_size), device=device)
    step = lambda name: train_step(*models[name][1:], x, amp, timed)  # noqa: E731
    memory = {n: step_memory_mb(lambda: step(n), models[n][1], x, amp, device) for n in names}
    data = load_split(prepare("shakespeare", "byte", args.data_dir), "train")
    times, t_data = {n: [] for n in names}, []
    for r in range(args.rounds + 2):  # two warm-up rounds (compiling, the allocator)
        for name in names[r % len(names):] + names[:r % len(names)]:
            t = step(name)
            if r >= 2:
                times[name].append(t)
        t_data.append(timed(lambda: windows(data, 0, r, args.batch_size, cfg.block_size).to(device)))

    print(f"preset {args.preset}, batch {args.batch_size}x{cfg.block_size}, {device_name(device)}, "
          f"{torch.get_num_threads()} threads, {'compiled' if args.compile else 'eager'}, {dtype}, "
          f"Newton-Schulz in {str(ns_dtype)[6:]}, median of {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f}")
    mem = "peak MB" if device.startswith("cuda") else "saved MB"
    print(f"{'design':6} {'tokens/s':>10} {'vs MHA':>7} {'vs GPT-2':>8} {'fwd+bwd ms':>10} {'optim ms':>9} "
          f"{'optim %':>8} {mem:>9} {'train MFLOP/tok':>15}")
    total = {n: statistics.median(f + o for f, o in ts) for n, ts in times.items()}
    for name, (c, *_) in models.items():
        fb, opt = (statistics.median(t[i] for t in times[name]) for i in (0, 1))
        mflop = "-" if name == "gpt2" else f"{flops.train_flops_per_token(c) / 1e6:.2f}"
        print(f"{name:6} {x.numel() / total[name]:10,.0f} {total['mha'] / total[name]:6.2f}x "
              f"{total['gpt2'] / total[name]:7.2f}x {1e3 * fb:10.1f} {1e3 * opt:9.1f} "
              f"{100 * opt / (fb + opt):7.1f}% {memory[name]:9.1f} {mflop:>15}")
    print(f"data loader (prepare.windows, as train.py): {1e3 * statistics.median(t_data):.2f} ms a step, "
          f"{100 * statistics.median(t_data) / total['mha']:.2f}% of MHA's step")


# -----------------------------------------------------------------------------
# decode speed and cache bytes

@torch.no_grad()
def kv_table(cfg, T, batch=1, dtype=torch.float32, device="cpu"):
    """Per design: the bytes its caches hold after a prefill of T tokens (allocated, summed over
    layers), next to flops.kv_cache_bytes_per_token × T at the same element size."""
    check_context(T, cfg)
    rows = []
    for attn, c in design_cfgs(cfg).items():
        model = build(c, device, dtype)
        caches = model.new_caches(max_len=T)
        model(torch.zeros(batch, T, dtype=torch.long, device=device), caches=caches)
        elem = torch.finfo(dtype).bits // 8
        rows.append(dict(design=attn, setting=setting(c), allocated=sum(k.nbytes() for k in caches),
                         formula=batch * T * flops.kv_cache_bytes_per_token(c, bytes_per_elem=elem)))
    for r in rows:
        r["pct_mha"] = 100 * r["allocated"] / rows[0]["allocated"]
    return rows


DECODERS = {"eager": False, "compiled": True, "graphs": "reduce-overhead"}  # mode -> generate.decoder's argument


@torch.no_grad()
def decode_bench(cfg, contexts, steps=30, device="cpu", dtype=torch.float32, batch=1, warmup=5,
                 no_cache=False, modes=("eager",), designs=None, sharing=False):
    """Decode speed of every design at cfg's shape. A step at context N feeds token N after a
    prefill of N-1, so it attends over N positions; every step writes that token into the same
    slot, so every timed step sees exactly N. Each repetition runs every design and mode once, in
    a rotating order; the median step is reported. modes: "eager", "compiled" and/or "graphs"
    (generate.decoder: compiled, and "reduce-overhead", a CUDA graph; the warm-up steps pay for compiling).
    Returns {(design, N, mode): dict(ms=per step, tok_s=batch tokens a second, vs_mha=tok/s over
    MHA's in that mode, mflop=forward FLOPs per token, bytes=what a step must read (cache and
    weights, flops.decode_bytes), gbs=those bytes over the step's time, first_s=the first step's
    seconds, its compile in a compiled mode[, ms_no_cache=])}.
    designs: some of them (default all); vs_mha only where MHA is among them."""
    for N in contexts:
        check_context(N, cfg)
    models = {a: build(c, device, dtype) for a, c in design_cfgs(cfg, sharing).items()
              if designs is None or a in designs}
    timed = timer(device)
    out = {}
    # one static graph per design, context and compiled mode (each mode is its own backend), all of
    # them entries of GPT.forward: past dynamo's limit (never lowered below what the process set),
    # and without its automatic dynamic shapes, which would trace later designs with symbolic sizes
    entries = len(models) * len(contexts) * sum(m != "eager" for m in modes)
    limit = max(torch._dynamo.config.recompile_limit, 8 + entries)
    with torch._dynamo.config.patch(recompile_limit=limit, automatic_dynamic_shapes=False):
        for N in contexts:
            idx = torch.randint(0, cfg.vocab_size, (batch, N), generator=torch.Generator().manual_seed(N)).to(device)
            caches = {a: m.new_caches(max_len=N) for a, m in models.items()}
            for a, m in models.items():
                m(idx[:, :N - 1], caches=caches[a], last=True)  # prefill N-1 tokens; logits of the last
                # alone: at batch 32 x 8K x 50K all of them would be 50 GB
            tok, pos = idx[:, N - 1:].contiguous(), torch.tensor([N - 1], device=device)
            names = [(a, mode) for a in models for mode in modes]
            t_step, t_full, first = {k: [] for k in names}, {k: [] for k in names}, {}
            for i in range(warmup + steps):
                for a, mode in names[i % len(names):] + names[:i % len(names)]:
                    step = decoder(models[a], DECODERS[mode])
                    dt = timed(lambda: step(tok, caches=caches[a], pos=pos))  # the same slot every step
                    dt_full = timed(lambda: models[a](idx)) if no_cache else 0.0  # a token without a cache
                    first.setdefault((a, mode), dt)
                    if i >= warmup:
                        t_step[a, mode].append(dt)
                        t_full[a, mode].append(dt_full)
            for a, mode in names:
                ms = 1000 * statistics.median(t_step[a, mode])
                nbytes = flops.decode_bytes(models[a].cfg, N, batch, dtype.itemsize)
                out[a, N, mode] = dict(ms=ms, tok_s=1000 * batch / ms, bytes=nbytes, gbs=nbytes / ms / 1e6,
                                       first_s=first[a, mode],
                                       mflop=flops.decode_flops_per_token(models[a].cfg, N) / 1e6)
                if no_cache:
                    out[a, N, mode]["ms_no_cache"] = 1000 * statistics.median(t_full[a, mode])
            for a, mode in names if "mha" in models else []:
                out[a, N, mode]["vs_mha"] = out[a, N, mode]["tok_s"] / out["mha", N, mode]["tok_s"]
    return out


def print_kv(args, cfg, device, dtype):
    T = args.context
    rows = kv_table(cfg, T, dtype=torch_dtype(dtype), device=device)
    print(f"KV cache after a prefill of {T} tokens, batch 1, {dtype}; preset {args.preset}: {shape(cfg)}")
    print(f"{'design':6} {'setting':>14} {'allocated':>12} {'formula':>12} {'KiB/token':>10} {'% MHA':>6}")
    for r in rows:
        print(f"{r['design']:6} {r['setting']:>14} {r['allocated']:12,d} {r['formula']:12,d} "
              f"{r['allocated'] / T / 1024:10.2f} {r['pct_mha']:6.1f}")


def machine_rates(device, dtype):
    """What this device does at best, measured now: bytes/s read (a sum over 512 MB; 2 GB on a
    GPU) and FLOP/s of a large matmul in dtype, each the best of 5 after a warm-up."""
    timed, gpu = timer(device), device.startswith("cuda")
    x = torch.ones((2 << 30 if gpu else 512 << 20) // 4, device=device)
    x.sum()
    read = x.numel() * 4 / min(timed(x.sum) for _ in range(5))
    del x
    n = 8192 if gpu else 2048
    a = torch.randn(n, n, device=device, dtype=dtype)
    a @ a
    return read, 2 * n ** 3 / min(timed(lambda: a @ a) for _ in range(5))


def print_decode(args, cfg, device, dtype):
    contexts, modes, nc, batch = args.contexts, args.modes.split(","), args.no_cache, args.batch_size or 1
    res = decode_bench(cfg, contexts, args.steps, device, torch_dtype(dtype), batch, no_cache=nc,
                       modes=modes, sharing=args.sharing)
    read, rate = machine_rates(device, torch_dtype(dtype))
    # other processes on the cores wreck CPU timings: show the load the run started under
    name = device_name(device)
    where = name + ("" if device.startswith("cuda") else f", {torch.get_num_threads()} "
                    f"threads, load average {os.getloadavg()[0]:.1f}")
    peak_bw = flops.peak_bandwidth(name) if device.startswith("cuda") else None
    print(f"decode, batch {batch}, {dtype}; preset {args.preset}: {shape(cfg)}; {where}; median of {args.steps} "
          f"steps after warm-up, designs and modes interleaved")
    print(f"this machine, measured now: reads {read / 1e9:.1f} GB/s, multiplies {rate / 1e9:,.0f} GFLOP/s ({dtype})"
          + (f"; the device's peak bandwidth {peak_bw / 1e12:.2f} TB/s" if peak_bw else ""))
    print("MB: what a step must read (every sequence's cache + the weights, flops.decode_bytes); GB/s: that over "
          "the step's time; % read: of the measured read rate; roofline: the time those bytes and the step's "
          "FLOPs (flops.decode_flops_per_token) take at the measured rates, the slower of the two"
          + ("; % peak: GB/s of the device's peak bandwidth" if peak_bw else "")
          + ("; no-cache: ms a token without a cache (full forward)" if nc else ""))
    print(f"{'design':9} {'mode':>8} {'context':>7} {'ms':>8} {'tok/s':>8} {'vs MHA':>6} {'KV %':>5} "
          f"{'MB':>8} {'GB/s':>7} "
          f"{'% read':>6} {'GFLOP':>7} {'roofline':>8} {'% roof':>6}" + (f" {'% peak':>6}" if peak_bw else "")
          + (f" {'no-cache':>8}" if nc else ""))
    cfgs = design_cfgs(cfg, args.sharing)
    for mode in modes:
        for a, c in cfgs.items():
            for N in contexts:
                r = res[a, N, mode]
                kv = flops.cache_bytes(c, N) / flops.cache_bytes(cfgs["mha"], N)  # a window's at N
                gflop = r["mflop"] * batch / 1e3
                roof = 1e3 * max(r["bytes"] / read, gflop * 1e9 / rate)  # ms
                print(f"{a:9} {mode:>8} {N:7d} {r['ms']:8.3f} {r['tok_s']:8.0f} {r['vs_mha']:5.2f}x {kv:5.0%} "
                      f"{r['bytes'] / 1e6:8.1f} {r['gbs']:7.1f} {r['gbs'] * 1e9 / read:6.0%} {gflop:7.3f} "
                      f"{roof:8.3f} {roof / r['ms']:6.0%}" + (f" {r['gbs'] * 1e9 / peak_bw:6.1%}" if peak_bw else "")
                      + (f" {r['ms_no_cache']:8.3f}" if nc else ""))


# -----------------------------------------------------------------------------
# the optimisers' share of a step

def muon_flops(cfg):
    """Newton-Schulz FLOPs of one unshared Muon step, from shapes alone (built on the meta device)."""
    with torch.device("meta"):
        model = GPT(cfg)
    muon = optimizers(model, torch.float32, shared=False)[0]
    return sum(ns_flops(*p.shape, g["heads"]) for g in muon.param_groups for p in g["params"])


def bench_muon(args, cfg):
    """Under torchrun (DDP over gloo): a training step with Muon alone on every rank and shared
    (DistMuon), medians of interleaved steps; then, from FLOPs, the share on 8 GPUs for each GPU preset."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    world = dist.get_world_size() if dist.is_initialized() else 1
    cfg = replace(cfg, attn="mha")
    torch.manual_seed(0)
    model = GPT(cfg)
    run = DDP(model) if world > 1 else model
    adamw = optimizers(model, torch.float32, shared=False)[1]
    matrices = [p for n, p in model.named_parameters() if n.startswith("h.") and p.ndim == 2]
    muons = {False: Muon(matrices, ns_dtype=torch.float32)}
    if world > 1:
        muons[True] = DistMuon(matrices, ns_dtype=torch.float32)
    x = torch.randint(0, cfg.vocab_size, (args.batch_size, cfg.block_size))
    times = {s: [] for s in muons}  # shared -> (forward + backward, optimiser) seconds
    for i in range(14):
        shared = list(muons)[i % len(muons)]
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        run(x, x)[1].backward()
        t1 = time.perf_counter()
        muons[shared].step()
        adamw.step()
        model.zero_grad(set_to_none=True)
        if i >= 4:  # two warm-up steps of each
            times[shared].append((t1 - t0, time.perf_counter() - t1))
    if world == 1 or dist.get_rank() == 0:
        print(f"preset {args.preset}, {world} rank(s), {torch.get_num_threads()} thread(s) each, "
              f"{args.batch_size}x{cfg.block_size} tokens a rank, Newton-Schulz in fp32; medians on rank 0")
        for shared, ts in times.items():
            fb, opt = (statistics.median(t[j] for t in ts) for j in (0, 1))
            print(f"  Muon {'shared' if shared else 'alone '}: forward+backward {1e3 * fb:7.1f} ms, optimisers "
                  f"{1e3 * opt:6.1f} ms, {100 * opt / (fb + opt):4.1f}% of the step")
        print("from FLOPs, 8 GPUs, 4,096 tokens each (Newton-Schulz at the training's FLOP rate):")
        for name in PRESETS:
            if name != "cpu":
                c = preset(name)
                train, ns = flops.train_flops_per_token(c) * 4096, muon_flops(c)
                print(f"  {name:8} forward+backward {train / 1e12:5.1f} TFLOP, Newton-Schulz {ns / 1e12:5.2f} TFLOP: "
                      f"{100 * ns / (train + ns):4.1f}% of the step alone, {100 * ns / 8 / (train + ns / 8):4.1f}% shared")
    if dist.is_initialized():
        dist.destroy_process_group()


def main(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", nargs="?", default="train", choices=["train", "decode", "kv", "muon"])
    p.add_argument("--preset", default="cpu", help=f"the shape: {', '.join(PRESETS)}")
    p.add_argument("--block_size", type=int, default=None, help="context; default the preset's")
    p.add_argument("--batch_size", type=count, default=None,
                   help="sequences a step: train, muon (default 16), decode (default 1)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help="train: autocast; decode, kv: the weights and caches. "
                   "auto: bf16 on CUDA, fp32 on the CPU")
    p.add_argument("--rounds", type=count, default=10, help="train: timed rounds")
    p.add_argument("--compile", action="store_true", help="train: every model through torch.compile")
    p.add_argument("--muon_dtype", default="auto", choices=["auto", "bf16", "fp32"],
                   help="train: Newton-Schulz's precision")
    p.add_argument("--data_dir", default="data", help="train: where the embedded corpus is (prepared if not)")
    p.add_argument("--contexts", default=None, help="decode: e.g. 64,256,1024 (default block_size/4,/2,/1)")
    p.add_argument("--steps", type=count, default=30, help="decode: timed steps per design and context")
    p.add_argument("--modes", default="eager,compiled",
                   help="decode: eager, compiled and/or graphs (CUDA graphs), side by side")
    p.add_argument("--no_cache", action="store_true", help="decode: add the cost of a token without a cache")
    p.add_argument("--sharing", action="store_true",
                   help="decode: also each design with K=V (name=kv) and with kv_share=2 (name/2), "
                   "and E8's other ways to a half and a quarter of MHA's cache (mla112, lrkv7/2, mha w128)")
    p.add_argument("--context", type=int, default=None, help="kv: tokens prefilled (default block_size)")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    try:
        cfg = preset(args.preset)
        cfg = replace(cfg, block_size=args.block_size or cfg.block_size)
        B = cfg.block_size
        args.contexts = [int(c) for c in args.contexts.split(",")] if args.contexts else [B // 4, B // 2, B]
        args.context = args.context or B
        for T in args.contexts + [args.context]:
            check_context(T, cfg)
    except ValueError as e:
        fail(f"{e}")
    if set(args.modes.split(",")) - set(DECODERS):
        fail(f"--modes={args.modes}: use some of {', '.join(DECODERS)}, comma-separated")
    if args.what in ("train", "muon"):
        args.batch_size = args.batch_size or 16
    if args.what == "train":
        bench_train(args, cfg, device, dtype)
    elif args.what == "decode":
        print_decode(args, cfg, device, dtype)
    elif args.what == "kv":
        print_kv(args, cfg, device, dtype)
    else:
        bench_muon(args, cfg)


if __name__ == "__main__":
    main()

"""
Training throughput of the five designs and of a plain GPT-2-style model, side by side in one run.

    python bench.py                      # CPU preset, fp32 (bf16 autocast on CUDA)
    python bench.py --compile            # every model through torch.compile
    python bench.py --muon_dtype=bf16    # Newton-Schulz as torch.optim.Muon runs it
    python bench.py --preset=128m --batch_size=8 --compile
    python bench.py --rounds=1 --profile=mha,gpt2   # and where the time of each goes, op by op
    python bench.py --bare               # and MHA without RoPE and QK-norm, what the reference lacks

Each round times one training step of every model in turn (each round starting with the next) —
forward + backward, then clipping and the real optimisers (Muon + AdamW, as train.py) — so machine
noise falls on all of them alike.
The table gives the median over rounds, the ratios to MHA and to the reference, the optimiser's
share of the step and the memory of a step: on CUDA its peak, elsewhere the activations saved for
backward in an eager step (what grows with batch and context). Weights are random: speed does not
depend on them.

The reference is nanoGPT's block at our shape and with our optimisers and loss head: learned
positions, LayerNorm, GELU, one fused q/k/v projection, no biases, untied head. It has no RoPE, QK-norm or
ReLU², so it is what a careful implementation of the paper's base should at least match. --bare
adds that comparison's other half: "bare", our MHA with RoPE and QK-norm made identities, the rest
of the paper's base (RMSNorm, ReLU², separate q/k/v) against the reference's.
"""
import argparse
import collections
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import attention
import flops
from model import GPT, LinearCrossEntropy, preset
from muon import newton_schulz_dtype, optimizers
from prepare import load_split, prepare, windows

p = argparse.ArgumentParser()
p.add_argument("--preset", default="cpu")
p.add_argument("--batch_size", type=int, default=16)
p.add_argument("--block_size", type=int, default=None, help="context; default the preset's")
p.add_argument("--rounds", type=int, default=10)
p.add_argument("--compile", action="store_true")
p.add_argument("--muon_dtype", choices=["auto", "bf16", "fp32"], default="auto")
p.add_argument("--data_dir", default="data", help="where the embedded corpus is (prepared there if not)")
p.add_argument("--bare", action="store_true", help="add 'bare': MHA without RoPE and QK-norm")
p.add_argument("--profile", default="", help="e.g. mha,gpt2: after the table, each op's time a step in "
               "those models side by side (torch.profiler), to see where the time goes")
args = p.parse_args()
names = flops.DESIGNS + ["gpt2"] + ["bare"] * args.bare
profiled = [a for a in args.profile.split(",") if a]
if set(profiled) - set(names):
    p.error(f"--profile={args.profile}: name models among {','.join(names)}, e.g. --profile=mha,gpt2")


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
        # our loss head (model.LinearCrossEntropy): the comparison is of the blocks
        return None, LinearCrossEntropy.apply(self.ln_f(x).flatten(0, 1), self.lm_head.weight, targets.reshape(-1))


def unrotated(x, cos, sin):
    return x


def unnormed(x):
    return x


def bare(model):
    # model called with RoPE and QK-norm as identities (attention.py looks both up at each call;
    # the same two functions each time, so a compiled model's guards on them hold)
    def call(*a):
        saved = attention.rope, attention.norm
        attention.rope, attention.norm = unrotated, unnormed
        try:
            return model(*a)
        finally:
            attention.rope, attention.norm = saved
    return call


device = "cuda" if torch.cuda.is_available() else "cpu"
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")
ns_dtype = newton_schulz_dtype(args.muon_dtype, device == "cuda")
overrides = {} if args.block_size is None else dict(block_size=args.block_size)
models = {}
for attn in names:
    cfg = preset(args.preset, attn=attn if attn in flops.DESIGNS else "mha", **overrides)
    model = (Reference if attn == "gpt2" else GPT)(cfg).to(device)
    opts = optimizers(model, 0.02, 0.2, 0.004, 0.1, (0.9, 0.95), ns_dtype)  # Muon: h.*; AdamW: wte, lm_head, gains
    rest = [p for n, p in model.named_parameters() if not n.startswith("h.") and n not in ("wte.weight", "lm_head.weight")]
    if rest:  # the reference's positions and final LayerNorm: AdamW, no decay
        opts[1].add_param_group(dict(params=rest, lr=0.2, weight_decay=0.0))
    # dynamic=False: each model its own static graph, as a training run compiles it. By default the
    # models after the first recompile GPT.forward with symbolic sizes, which no training run sees
    run = torch.compile(model, dynamic=False) if args.compile else model
    models[attn] = (cfg, model, bare(run) if attn == "bare" else run, opts)
x = torch.randint(0, cfg.vocab_size, (args.batch_size, cfg.block_size), device=device)


def step(model, run, opts):
    # -> (seconds of forward + backward, seconds of clipping + optimiser steps)
    sync()
    t0 = time.perf_counter()
    with autocast:
        _, loss = run(x, x)
    loss.backward()
    sync()
    t1 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    for o in opts:
        o.step()
    model.zero_grad(set_to_none=True)
    sync()
    return t1 - t0, time.perf_counter() - t1


def memory_mb(attn, model, run, opts):
    # CUDA: the peak of a whole step. Elsewhere: bytes of the tensors autograd saves for backward
    # in an eager forward (each storage once), the part of a step's memory the design decides
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        step(model, run, opts)
        return torch.cuda.max_memory_allocated() / 2**20
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        _, loss = (bare(model) if attn == "bare" else model)(x, x)
    for p_ in model.parameters():  # parameters are not activations
        saved.pop(p_.untyped_storage().data_ptr(), None)
    return sum(saved.values()) / 2**20


memory = {a: memory_mb(a, m, r, o) for a, (_, m, r, o) in models.items()}
data = load_split(prepare("shakespeare", "byte", args.data_dir), "train")  # the embedded corpus: what train.py reads by default


def load(step):
    # train.py's data loader for one step (the token values do not change its cost) -> seconds
    t0 = time.perf_counter()
    windows(data, 0, step, args.batch_size, cfg.block_size).to(device)
    return time.perf_counter() - t0

times, t_data = {a: [] for a in models}, []
for r in range(args.rounds + 2):  # two warm-up rounds (compile, allocator)
    for attn in names[r % len(names):] + names[:r % len(names)]:  # each round starts with another model
        t = step(*models[attn][1:])
        if r >= 2:
            times[attn].append(t)
    t_data.append(load(r))

tokens = x.numel()
print(f"preset {args.preset}, batch {args.batch_size}x{cfg.block_size}, {device}, {torch.get_num_threads()} threads, "
      f"{'compiled' if args.compile else 'eager'}, Newton-Schulz in {str(ns_dtype)[6:]}, median of {args.rounds} "
      f"rounds, load average {os.getloadavg()[0]:.1f}")
mem = "peak MB" if device == "cuda" else "saved MB"
print(f"{'design':6} {'tokens/s':>10} {'vs MHA':>7} {'vs GPT-2':>8} {'fwd+bwd ms':>10} {'optim ms':>9} {'optim %':>8} "
      f"{mem:>9} {'train MFLOP/tok':>15}")
total = {a: statistics.median(f + o for f, o in ts) for a, ts in times.items()}
for attn, (cfg, _, _, _) in models.items():
    fb, opt = (statistics.median(t[i] for t in times[attn]) for i in (0, 1))
    mflop = "-" if attn not in flops.DESIGNS else f"{flops.train_flops_per_token(cfg) / 1e6:.2f}"
    print(f"{attn:6} {tokens / total[attn]:10,.0f} {total['mha'] / total[attn]:6.2f}x {total['gpt2'] / total[attn]:7.2f}x "
          f"{1e3 * fb:10.1f} {1e3 * opt:9.1f} {100 * opt / (fb + opt):7.1f}% {memory[attn]:9.1f} {mflop:>15}")
print(f"data loader (prepare.windows, as train.py): {1e3 * statistics.median(t_data):.2f} ms a step, "
      f"{100 * statistics.median(t_data) / total['mha']:.2f}% of MHA's step")
if profiled:  # each op's own time a step, the named models side by side, their steps interleaved
    n = 8
    op_ms = {a: collections.Counter() for a in profiled}
    for r in range(n):
        for attn in profiled:
            with torch.profiler.profile() as prof:
                step(*models[attn][1:])
            for e in prof.key_averages():
                op_ms[attn][e.key] += e.self_cpu_time_total / 1e3 / n  # µs -> ms, mean over steps
    ops = sorted(set().union(*op_ms.values()), key=lambda k: -max(m[k] for m in op_ms.values()))
    print(f"\nms a step by op (own time under the profiler, mean of {n} steps each, interleaved)")
    print(f"{'op':60}" + "".join(f"{a:>9}" for a in profiled))
    for k in ops[:25] + ["total"]:
        print(f"{k[:60]:60}" + "".join(f"{sum(op_ms[a].values()) if k == 'total' else op_ms[a][k]:9.2f}" for a in profiled))

"""
Training throughput of the five designs, measured side by side in one run.

    python bench.py                      # CPU preset, fp32 (bf16 autocast and compile on CUDA)
    python bench.py --muon_dtype=bf16    # Newton-Schulz as torch.optim.Muon runs it
    python bench.py --preset=128m --batch_size=8 --compile

Each round times one training step of every design in turn — forward + backward, then clipping
and the real optimisers (Muon + AdamW, as train.py) — so machine noise falls on all of them alike.
The table gives the median over rounds, the ratio to MHA and the optimiser's share of the step.
Weights are random: speed does not depend on them.
"""
import argparse
import os
import statistics
import time

import torch

import flops
from model import GPT, preset
from muon import newton_schulz_dtype, optimizers

p = argparse.ArgumentParser()
p.add_argument("--preset", default="cpu")
p.add_argument("--batch_size", type=int, default=16)
p.add_argument("--rounds", type=int, default=10)
p.add_argument("--compile", action="store_true")
p.add_argument("--muon_dtype", choices=["auto", "bf16", "fp32"], default="auto")
args = p.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")
ns_dtype = newton_schulz_dtype(args.muon_dtype, device == "cuda")
models = {}
for attn in flops.DESIGNS:
    cfg = preset(args.preset, attn=attn)
    model = GPT(cfg).to(device)
    opts = optimizers(model, 0.02, 0.2, 0.004, 0.1, (0.9, 0.95), ns_dtype)
    models[attn] = (cfg, model, torch.compile(model) if args.compile else model, opts)
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


times = {a: [] for a in models}
for r in range(args.rounds + 2):  # two warm-up rounds (compile, allocator)
    for attn, (_, model, run, opts) in models.items():
        t = step(model, run, opts)
        if r >= 2:
            times[attn].append(t)

tokens = x.numel()
print(f"preset {args.preset}, batch {args.batch_size}x{cfg.block_size}, {device}, {torch.get_num_threads()} threads, "
      f"Newton-Schulz in {str(ns_dtype)[6:]}, median of {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
print(f"{'design':6} {'tokens/s':>10} {'vs MHA':>7} {'fwd+bwd ms':>10} {'optim ms':>9} {'optim %':>8} {'train MFLOP/tok':>15}")
total = {a: statistics.median(f + o for f, o in ts) for a, ts in times.items()}
for attn, (cfg, _, _, _) in models.items():
    fb, opt = (statistics.median(t[i] for t in times[attn]) for i in (0, 1))
    print(f"{attn:6} {tokens / total[attn]:10,.0f} {total['mha'] / total[attn]:6.2f}x {1e3 * fb:10.1f} {1e3 * opt:9.1f} "
          f"{100 * opt / (fb + opt):7.1f}% {flops.train_flops_per_token(cfg) / 1e6:15.2f}")

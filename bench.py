"""
Training throughput of the five designs, measured side by side in one run.

    python bench.py                      # CPU preset, fp32 (bf16 autocast and compile on CUDA)
    python bench.py --preset=128m --batch_size=8 --compile

Each round times one forward + backward + plain SGD update of every design in turn, so
machine noise falls on all of them alike; the table gives the median over rounds and the ratio
to MHA. Weights are random: speed does not depend on them.
"""
import argparse
import statistics
import time

import torch

import flops
from model import GPT, preset

p = argparse.ArgumentParser()
p.add_argument("--preset", default="cpu")
p.add_argument("--batch_size", type=int, default=16)
p.add_argument("--rounds", type=int, default=10)
p.add_argument("--compile", action="store_true")
args = p.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")
models, steps = {}, {}
for attn in flops.DESIGNS:
    cfg = preset(args.preset, attn=attn)
    model = GPT(cfg).to(device)
    models[attn] = (cfg, model, torch.compile(model) if args.compile else model)
x = torch.randint(0, cfg.vocab_size, (args.batch_size, cfg.block_size), device=device)


def step(model):
    with autocast:
        _, loss = model(x, x)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 1e-4 * p.grad
            p.grad = None


times = {a: [] for a in models}
for r in range(args.rounds + 2):  # two warm-up rounds (compile, allocator)
    for attn, (_, _, m) in models.items():
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(m)
        if device == "cuda":
            torch.cuda.synchronize()
        if r >= 2:
            times[attn].append(time.perf_counter() - t0)

tokens = x.numel()
print(f"preset {args.preset}, batch {args.batch_size}x{cfg.block_size}, {device}, "
      f"{torch.get_num_threads()} threads, median of {args.rounds} rounds")
print(f"{'design':6} {'tokens/s':>10} {'vs MHA':>7} {'train MFLOP/tok':>15}")
mha = tokens / statistics.median(times["mha"])
for attn, (cfg, _, _) in models.items():
    tps = tokens / statistics.median(times[attn])
    print(f"{attn:6} {tps:10,.0f} {tps / mha:6.2f}x {flops.train_flops_per_token(cfg) / 1e6:15.2f}")

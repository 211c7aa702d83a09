"""
One command that checks nanoKV on a GPU and prints a Markdown table for the README.

    python gpu_check.py          # the 128M preset, bf16, compiled, on cuda (aimed at < 8 minutes on an H100/H200)
    python gpu_check.py --dry    # the same steps on the CPU at tiny shapes, to check the script (< ~1 minute)

Per design: training tokens/s and MFU (compiled, Muon + AdamW as train.py), peak memory against
flops.memory_per_gpu's estimate, which SDPA kernel ran in training and in decoding (from the
profiler's op names), the loss of the compiled model against eager, each cache's dtype and bytes per
token after a prefill against flops.py's formula, and decode tokens/s at 2K and 8K context
(bench.decode_bench: eager, each step written over the same slot, so it sees exactly that context). Then a tiny
train.py run on this GPU is killed after a checkpoint and resumed; its losses must equal an
uninterrupted run's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

import flops
from bench import decode_bench
from common import DESIGNS, autocast as amp, device_name, native_bf16
from model import GPT, preset
from muon import newton_schulz_dtype, optimizers

ROOT = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
p.add_argument("--dry", action="store_true", help="on the CPU at tiny shapes: checks the script, measures nothing")
args = p.parse_args()
if not args.dry and not torch.cuda.is_available():
    sys.exit("error: this torch sees no CUDA GPU; run `python gpu_check.py --dry` to check the script on the CPU")
dry = args.dry
device = "cpu" if dry else "cuda"
if dry:  # tiny shapes; compile traces with dynamo only (inductor's C++ build would take minutes)
    shape = dict(n_layer=2, n_head=2, n_embd=64, block_size=128, vocab_size=320, n_kv_head=1, mla_kv_rank=16,
                 mla_rope_dim=8, lrkv_rank=6)
    name, batch, steps, contexts, backend = "cpu", 2, 2, (64, 128), "eager"
else:
    shape, name, batch, steps, contexts, backend = {}, "128m", 8, 10, (2048, 8192), "inductor"
    torch.backends.cuda.matmul.allow_tf32 = True
autocast = amp(device, "fp32" if dry else "bf16")
ns_dtype = newton_schulz_dtype("auto", gpu=not dry and native_bf16("cuda"))
hardware = device_name(device)
peak = None if dry else flops.peak_flops(hardware)
torch._dynamo.config.cache_size_limit = 64  # a model per design: each compiles once


def sync():
    if not dry:
        torch.cuda.synchronize()


def sdpa_kernels(f):
    """The SDPA implementations the profiler saw while f ran: flash, efficient, cudnn or math."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        f()
        sync()
    ops = {e.key for e in prof.key_averages() if "scaled_dot_product" in e.key}
    found = [k for k in ("flash", "efficient", "cudnn", "math") if any(k in op for op in ops)]
    return "+".join(found) or "none (matmuls)"


def check(attn):
    cfg = preset(name, attn=attn, **shape)
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    T = cfg.block_size
    x = torch.randint(0, cfg.vocab_size, (batch, T), device=device)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad(), autocast:
        eager_loss, compiled_loss = model(x, x)[1].item(), compiled(x, x)[1].item()
    opts = optimizers(model, ns_dtype)

    def train_step(m):
        with autocast:
            _, loss = m(x, x)
        loss.backward()
        for o in opts:
            o.step()
        model.zero_grad(set_to_none=True)

    kernel_train = sdpa_kernels(lambda: train_step(model))  # eager: inductor calls the same SDPA op
    train_step(compiled)  # warm-up (compiles the backward)
    sync()
    if not dry:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        train_step(compiled)
    sync()
    tps = batch * T * steps / (time.perf_counter() - t0)
    row = dict(design=attn, tok_s=tps, mfu=flops.train_flops_per_token(cfg) * tps / peak if peak else None,
               peak_gib=None if dry else torch.cuda.max_memory_allocated() / 2**30,
               est_gib=flops.memory_per_gpu(cfg, batch, 1, False) / 2**30, kernel_train=kernel_train,
               loss_diff=abs(eager_loss - compiled_loss))
    del opts, compiled
    # caches after a prefill of half the context, then one decode step
    caches = model.new_caches(T)
    with torch.no_grad(), autocast:
        model(x[:, :T // 2], caches=caches)
        row["kernel_decode"] = sdpa_kernels(lambda: model(x[:, T // 2:T // 2 + 1], caches=caches))
    bufs = caches[0].buf
    row["cache"] = ", ".join(f"{k} {str(v.dtype)[6:]}" for k, v in bufs.items())
    row["cache_bytes"] = sum(c.nbytes() for c in caches) / (batch * T)  # allocated for all T slots
    row["cache_formula"] = flops.kv_cache_bytes_per_token(cfg, bufs and next(iter(bufs.values())).element_size())
    return row


def kill_and_resume():
    """A tiny train.py run on this device killed after its step-3 checkpoint, then resumed."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([sys.executable, "prepare.py", "text", f"--input={ROOT}/*.py", "--name=check",
                        f"--data_dir={data}"], cwd=ROOT, check=True, capture_output=True)
        cmd = [sys.executable, "train.py", "--dataset=check", f"--data_dir={data}", f"--out_dir={tmp}",
               f"--device={device}", "--attn=lrkv", "--n_layer=2", "--n_head=2", "--n_embd=64", "--block_size=64",
               "--batch_size=4", "--total_batch_tokens=256", "--max_iters=8", "--eval_interval=4",
               "--ckpt_interval=3", "--eval_tokens=1024", "--log_interval=1", "--warmup_iters=2"]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        # the cut run is killed half-way through writing step 5's log line, as the tests kill runs
        runs = [(["--run_name=full"], {}), (["--run_name=cut"], {"NANOKV_FAULT": "log:5"}),
                (["--run_name=cut", "--resume"], {})]
        for extra, fault in runs:
            launch = [sys.executable] + (["tests/fault.py"] if fault else [])
            p = subprocess.run(launch + cmd[1:] + extra, cwd=ROOT, env={**env, **fault}, capture_output=True, text=True)
            if p.returncode != 0 and not fault:
                return f"train.py failed: {p.stderr.strip().splitlines()[-1]}"
        losses = [{r["step"]: r.get("train_loss") for r in map(json.loads, open(f"{tmp}/{run}/log.jsonl"))
                   if r["type"] == "step"} for run in ("full", "cut")]
        diff = max(abs((losses[0][s] or 0) - (losses[1].get(s) or 0)) for s in losses[0])
        ok = losses[0].keys() == losses[1].keys() and diff < 1e-4  # CUDA's atomics may reorder sums
        return f"{'ok' if ok else 'FAILED'}: killed at step 5, resumed from step 3; max train-loss difference {diff:.1e}"


t_start = time.time()
rows = []
for attn in DESIGNS:
    rows.append(check(attn))
    print(f"# {attn} done at {time.time() - t_start:.0f} s", file=sys.stderr)
dec_cfg = preset(name, **{**shape, "attn": "gqa", "block_size": max(contexts)})  # gqa: keeps its K/V heads
speed = decode_bench(dec_cfg, contexts, steps=5 if dry else 20, device=device,
                     dtype=torch.float32 if dry else torch.bfloat16, batch=1 if dry else 4, warmup=2)  # 4 x 8K fp32 logits: 6.6 GB
resume = kill_and_resume()

fmt = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731
print(f"\n{name} preset on {hardware}, batch {batch} x {preset(name, **shape).block_size}, "
      f"{'dry run: nothing here is a measurement' if dry else 'bf16 autocast, torch.compile'}, torch {torch.__version__}\n")
print(f"| design | train tok/s | MFU | peak GiB (estimate) | SDPA train | SDPA decode | eager - compiled loss "
      f"| cache after prefill | cache B/token (formula) | " + " | ".join(f"decode tok/s @{n}" for n in contexts) + " |")
print("|" + "---|" * (9 + len(contexts)))
for r in rows:
    a = r["design"]
    print(f"| {a} | {r['tok_s']:,.0f} | {fmt(r['mfu'], '.1%')} | {fmt(r['peak_gib'], '.1f')} ({r['est_gib']:.1f}) "
          f"| {r['kernel_train']} | {r['kernel_decode']} | {r['loss_diff']:.1e} | {r['cache']} "
          f"| {r['cache_bytes']:,.0f} ({r['cache_formula']:,}) | "
          + " | ".join(f"{speed[a, n, 'eager']['tok_s']:,.0f}" for n in contexts) + " |")
print(f"\nkill and resume of a tiny train.py run on {device}: {resume}")
print(f"({time.time() - t_start:.0f} s)")

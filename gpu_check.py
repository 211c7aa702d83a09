"""
One command that checks nanoKV on a GPU and writes a Markdown table for docs/.

    python gpu_check.py          # the 128M preset, bf16, compiled, on cuda: at most --budget=540 s
    python gpu_check.py --dry    # the same steps on the CPU at tiny shapes, to check the script (< ~1 minute)

It writes out/gpu_check/results.md line by line as it measures (and each design's row to
results.jsonl), so a check cut off part-way keeps what it had. Each phase has its own time limit
within --budget; one that runs out is stopped and said so, and the next starts.
First the GPU, torch, CUDA and cuDNN versions and SDPA's kernel order. Then per design: training
tokens/s and MFU (compiled, Muon + AdamW as train.py; MFU counts attention with no causal
discount, flops.py's convention), peak memory against flops.memory_per_gpu's estimate, which SDPA
kernel ran in training and in decoding (from the profiler's op names), the loss of the compiled
model against eager, the compile time, each cache's dtype and bytes per token after a prefill
against flops.py's formula. Then decode tokens/s at 2K and 8K context, eager, compiled and
compiled as a CUDA graph (bench.decode_bench: each step over exactly that context); whether CUDA-
graph decoding generates eager's tokens; and a tiny train.py run on this GPU killed after a
checkpoint and resumed, whose losses must equal an uninterrupted run's.
"""
import argparse
import json
import os
import signal
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
p.add_argument("--out", default="out/gpu_check", help="folder for results.md (written line by line) and results.jsonl")
p.add_argument("--budget", type=float, default=540, help="seconds for the whole check: each phase has a limit within it")
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


def check(attn, **variant):
    cfg = preset(name, attn=attn, **shape, **variant)
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    T = cfg.block_size
    x = torch.randint(0, cfg.vocab_size, (batch, T), device=device)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad(), autocast:
        eager_loss = model(x, x)[1].item()
        t0 = time.perf_counter()
        compiled_loss = compiled(x, x)[1].item()  # the first call compiles
        compile_s = time.perf_counter() - t0
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
    split = []  # one step in two halves, three times: forward + backward, then the optimisers
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        with autocast:
            compiled(x, x)[1].backward()
        sync()
        t1 = time.perf_counter()
        for o in opts:
            o.step()
        model.zero_grad(set_to_none=True)
        sync()
        split.append((time.perf_counter() - t1) / (time.perf_counter() - t0))
    fpt = flops.train_flops_per_token(cfg)
    causal = fpt - 3 * cfg.n_layer * T * cfg.n_head * (flops.d_qk(cfg) + cfg.head_dim)  # half the attention core
    row = dict(design=attn, tok_s=tps, mfu=fpt * tps / peak if peak else None,
               mfu_causal=causal * tps / peak if peak else None, opt_share=sorted(split)[1],
               peak_gib=None if dry else torch.cuda.max_memory_allocated() / 2**30,
               est_gib=flops.memory_per_gpu(cfg, batch, 1, False) / 2**30, kernel_train=kernel_train,
               loss_diff=abs(eager_loss - compiled_loss), compile_s=compile_s)
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


def versions():
    # what ran: the GPU, torch, CUDA and cuDNN, and the order SDPA tries its kernels in
    from torch.nn.attention import SDPBackend
    order = getattr(torch._C, "_get_sdp_priority_order", lambda: [])()
    known = {b.value: n.lower() for n, b in SDPBackend.__members__.items()}
    names = [known.get(i, str(i)) for i in order]
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return (f"{hardware}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}; "
            f"SDPA priority {' > '.join(names) or 'n/a'}; {time.strftime('%Y-%m-%d %H:%M')}")


class Stop(Exception):
    pass


def phase(what, limit, f):
    """f() with at most limit seconds (and what is left of --budget): its result, or a line saying
    why there is none. A phase stopped by its alarm leaves the phases after it their time."""
    limit = min(limit, args.budget - (time.time() - t_start))
    if limit < 5:
        return f"{what}: skipped, the {args.budget:.0f} s budget is spent"
    def stop(*_):
        raise Stop
    signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return f()
    except Stop:
        return f"{what}: stopped at its {limit:.0f} s limit"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def say(line=""):
    # to the screen and the results file at once, so a check cut off part-way keeps what it had
    print(line, flush=True)
    with open(os.path.join(args.out, "results.md"), "a") as f:
        f.write(line + "\n")


fmt = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731
t_start = time.time()
os.makedirs(args.out, exist_ok=True)
open(os.path.join(args.out, "results.md"), "w").close()
say(f"# gpu_check.py{' --dry' if dry else ''}: {name} preset, batch {batch} x {preset(name, **shape).block_size}, "
    f"{'dry run: nothing here is a measurement' if dry else 'bf16 autocast, torch.compile'}")
say(f"\n{versions()}\n")
say("MFU counts attention with no causal discount (flops.py's convention); MFU (causal) counts half of it.\n")
say(f"| design | train tok/s | MFU | MFU (causal) | optimiser % | peak GiB (estimate) | SDPA train | SDPA decode "
    f"| eager - compiled loss | cache after prefill | cache B/token (formula) | compile s |")
say("|" + "---|" * 12)
VARIANTS = [(a, a, {}) for a in DESIGNS] + [("mla-ds", "mla", dict(mla_deepseek=True)),
                                          ("lrkv-f", "lrkv", dict(lrkv_factored=True))]
for label, attn, variant in VARIANTS:  # a design at a time, each row written as it is measured
    r = phase(label, 150, lambda: check(attn, **variant))
    if isinstance(r, str):
        say(f"| {label} | {r} |")
        continue
    r["design"] = label
    with open(os.path.join(args.out, "results.jsonl"), "a") as f:
        f.write(json.dumps(r) + "\n")
    say(f"| {label} | {r['tok_s']:,.0f} | {fmt(r['mfu'], '.1%')} | {fmt(r['mfu_causal'], '.1%')} "
        f"| {r['opt_share']:.0%} | {fmt(r['peak_gib'], '.1f')} ({r['est_gib']:.1f}) "
        f"| {r['kernel_train']} | {r['kernel_decode']} | {r['loss_diff']:.1e} | {r['cache']} "
        f"| {r['cache_bytes']:,.0f} ({r['cache_formula']:,}) | {r['compile_s']:.0f} |")


def decode():
    # every design at each context: eager, compiled, and compiled as a CUDA graph, side by side
    cfg = preset(name, **{**shape, "attn": "gqa", "block_size": max(contexts)})  # gqa: keeps its K/V heads
    modes = ("eager",) if dry else ("eager", "compiled", "graphs")  # dry: inductor's C++ build would take minutes
    speed = decode_bench(cfg, contexts, steps=5 if dry else 20, device=device, modes=modes,
                         dtype=torch.float32 if dry else torch.bfloat16, batch=1 if dry else 4, warmup=2)
    say(f"\ndecode tokens/s, batch {1 if dry else 4} (bench.decode_bench: each step over exactly that context)\n")
    say("| design | " + " | ".join(f"{m} @{n}" for n in contexts for m in modes) + " |")
    say("|" + "---|" * (1 + len(contexts) * len(modes)))
    for a in dict.fromkeys(k[0] for k in speed):  # the designs, in bench's order
        say(f"| {a} | " + " | ".join(f"{speed[a, n, m]['tok_s']:,.0f}" for n in contexts for m in modes) + " |")


def graphs_same_tokens():
    # the decode step as a CUDA graph (mode="reduce-overhead") must generate what eager does
    cfg = preset(name, **{**shape, "attn": "lrkv"})
    torch.manual_seed(0)
    model = GPT(cfg).to(device).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 16), device=device)
    with autocast:
        eager = model.generate(idx, 32, temperature=0, compile=False)
        graphed = model.generate(idx, 32, temperature=0, compile="reduce-overhead")
    return f"{'ok' if torch.equal(eager, graphed) else 'DIFFERENT'}: 32 greedy tokens, CUDA-graph decode against eager"


out = phase("decode", 240, decode)
if out:
    say(f"\n{out}")
if not dry:
    say(f"\nCUDA-graph decode: {phase('CUDA-graph decode', 90, graphs_same_tokens)}")
say(f"\nkill and resume of a tiny train.py run on {device}: {phase('kill and resume', 120, kill_and_resume)}")
say(f"\n({time.time() - t_start:.0f} s; written to {os.path.join(args.out, 'results.md')})")

"""
One command that checks nanoKV on a GPU and writes a Markdown table for docs/.

    python gpu_check.py                      # the 128M preset, bf16, compiled, on cuda: at most --budget=480 s
    python gpu_check.py --only=decode,512m-8k    # some parts again, e.g. those a cut-off check missed
    python gpu_check.py --dry                # the same steps on the CPU at tiny shapes, to check the script

It writes out/gpu_check/results.md line by line as it measures (and each design's row to
results.jsonl), so a check cut off part-way keeps what it had. Each phase runs in a process of its
own (this script with --part) under a time limit within --budget: one that runs out, or fails, is
killed (with anything it started) and said so in one line, and the next starts. No signal is
raised into torch: an alarm inside torch.compile arrived wrapped in dynamo's own errors, or broke
its imports for the rest of the process.

The plan, in seconds (each phase also pays for starting Python and torch, and for its compile):
    designs   5 phases x 45   225   128m at 4 layers (the per-layer work of the full 12)
    runs                      60    tiny train.py runs
    tokens                    30    2-layer LRKV, 32 tokens three ways
    decode    3 phases        100   128m at 2 layers, 8K: eager and as a CUDA graph at batch 1 (20,
                                    40), compiled at batch 32 (40), where the cache dominates; a
                                    design at a time, each cell kept as it is done
    512m-8k   2 phases x 30   60    MHA and LRKV at the figure's 8K shape, 2 of its 24 layers
The limits come from measured costs (docs/training.md, The GPU check): the CPU side of a cold compile, dynamo and
AOTAutograd alone, is 5.5-9 s for a design's 4-layer training step and 1.0-1.8 s for a decode
step (docs/bench/compile_cost.py, 2-core Intel Xeon), and inductor with Triton's builds takes 3-4x
the aot_eager time on HF models in PyTorch's own compile benchmarks (pytorch/pytorch#93517). A
decode phase compiles six designs, and a CUDA graph's cudagraphs setting is part of inductor's
cache key, so the compiled batch-1 phase (the graph phase's kernels without the graph) was dropped
to give the other two 40 s.
    total                     475   of --budget=480; variants (MLA at DeepSeek's widths, the
                                    factored LRKV) only when asked, --only=variants
A --budget other than 480 scales every limit with it. The parts, in order:
- the GPU, torch, CUDA and cuDNN versions and SDPA's kernel order;
- designs: per design, training tokens/s and MFU (compiled, Muon + AdamW as train.py; MFU by
  flops.py's convention, no causal discount, and with causal attention), the optimiser's share of a
  step, peak memory against flops.memory_per_gpu, the SDPA kernel in training and in decoding (the
  profiler's op names), the training loss and gradient norm compiled against eager, the compile
  time, each cache's dtype and bytes per token after a prefill against flops.py's formula;
- runs: tiny train.py runs killed and resumed, as 1-rank DDP and FSDP2 under torchrun, and in fp16;
- tokens: generate()'s default decode (a CUDA graph) against the compiled and the eager step;
- decode: tokens/s and the GB/s of what a step reads at 8K, batch 1 eager, compiled and as a CUDA
  graph, and batch 32 compiled (bench.decode_bench);
- variants: MLA at DeepSeek's widths and the factored LRKV, as the designs' rows;
- 512m-8k: MHA and LRKV at the figure's 8K-context shape;
- memory, only when asked (--only=memory): each design's whole 512m-8k model, peak memory of two
  eager training steps against flops.memory_per_gpu.
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
from bench import decode_bench, design_cfgs
from common import ArgumentParser, DESIGNS, autocast as amp, device_name, fail, native_bf16
from model import GPT, preset
from muon import newton_schulz_dtype, optimizers

ROOT = os.path.dirname(os.path.abspath(__file__))
PHASE_CMD = [sys.executable, os.path.abspath(__file__)]  # how phase() starts a phase's process
PARTS = ["designs", "runs", "tokens", "decode", "variants", "512m-8k", "memory"]  # in the order they run
DEFAULT = [x for x in PARTS if x not in ("variants", "memory")]  # what fits the budget


def arguments(argv=None):
    p = ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--dry", action="store_true", help="on the CPU at tiny shapes: checks the script, measures nothing")
    p.add_argument("--out", default="out/gpu_check", help="folder for results.md (written line by line) and results.jsonl")
    p.add_argument("--budget", type=float, default=480, help="seconds for the whole check: each phase has a limit within it")
    p.add_argument("--only", default=",".join(DEFAULT), help="some of the parts, to rerun what a cut-off check missed")
    p.add_argument("--backend", default=None, help="--dry: torch.compile's backend (default dynamo's eager)")
    p.add_argument("--part", help=argparse.SUPPRESS)  # one phase, in a process of its own: [function, args]
    a = p.parse_args(argv)
    a.only = a.only.split(",")
    if set(a.only) - set(PARTS):
        fail(f"--only={','.join(a.only)}: the parts are {','.join(PARTS)}")
    if not a.dry and not torch.cuda.is_available():
        fail("this torch sees no CUDA GPU; run `python gpu_check.py --dry` to check the script on the CPU")
    return a


def setup(a):
    """The check's settings from its arguments, as the module globals the phases read (a phase runs
    in a process of its own, which sets them again from the same flags)."""
    global args, dry, device, shape, name, batch, steps, context, backend, batches, layers, autocast, ns_dtype
    global hardware, peak, peak_bw
    args, dry = a, a.dry
    device = "cpu" if dry else "cuda"
    if dry:  # tiny shapes; compile traces with dynamo only (inductor's C++ build would take minutes)
        shape = dict(n_layer=2, n_head=2, n_embd=64, block_size=128, vocab_size=320, n_kv_head=1, mla_kv_rank=16,
                     mla_rope_dim=8, lrkv_rank=6)
        name, batch, steps, context, backend, batches = "cpu", 2, 2, 128, args.backend or "eager", (1, 4)
        layers = {}
    else:
        shape, name, batch, steps, context, backend, batches = {}, "128m", 8, 10, 8192, "inductor", (1, 32)
        layers = dict(designs=4, decode=2, big=2)  # fewer layers where the question is per layer
        torch.backends.cuda.matmul.allow_tf32 = True
    autocast = amp(device, "fp32" if dry else "bf16")
    ns_dtype = newton_schulz_dtype("auto", gpu=not dry and native_bf16("cuda"))
    hardware = device_name(device)
    peak = None if dry else flops.peak_flops(hardware)
    peak_bw = None if dry else flops.peak_bandwidth(hardware)


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


def memory(attn):
    """The figure's whole model, 512m-8k's 24 layers at batch 1 x 8192 (the paper's per-GPU batch
    on 4 GPUs), two eager training steps under bf16 autocast with train.py's optimisers: the peak
    memory allocated against flops.memory_per_gpu's estimate, in GiB."""
    cfg = preset("cpu" if dry else "512m-8k", attn=attn, **shape)
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    opts = optimizers(model, ns_dtype)
    x = torch.randint(0, cfg.vocab_size, (1, cfg.block_size), device=device)
    if not dry:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(2):
        with autocast:
            model(x, x)[1].backward()
        for o in opts:
            o.step()
        model.zero_grad(set_to_none=True)
    peak = None if dry else torch.cuda.max_memory_allocated() / 2**30
    return f"| {attn} | {fmt(peak, '.1f')} | {flops.memory_per_gpu(cfg, 1, 1, False) / 2**30:.1f} |"


def check(attn, size=None, **variant):
    """A design's row of the table: its training (train_measures), then its caches (cache_measures).
    size: (preset, batch) for a shape other than the check's own, e.g. the figure's 512m-8k."""
    shape_name, B = size if size and not dry else (name, batch)
    n = layers.get("big" if size else "designs")
    cfg = preset(shape_name, attn=attn, **shape, **variant, **({"n_layer": n} if n else {}))
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    x = torch.randint(0, cfg.vocab_size, (B, cfg.block_size), device=device)
    # the optimisers and the compiled model are gone (train_measures' own) before the caches are measured
    return dict(design=attn, **train_measures(model, x), **cache_measures(model, x))


def train_measures(model, x):
    """Training on x: a micro-step eager against compiled at the same weights (loss, gradient norm,
    compile time), SDPA's kernel, tokens/s and MFU of compiled steps with train.py's optimisers,
    their share of a step, and the peak memory against flops.memory_per_gpu."""
    cfg, (B, T) = model.cfg, x.shape
    compiled = torch.compile(model, backend=backend)
    opts = optimizers(model, ns_dtype)

    def fwd_bwd(m):  # the training loss and gradient norm of one micro-step, gradients cleared after
        with autocast:
            loss = m(x, x)[1]
        loss.backward()
        norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        model.zero_grad(set_to_none=True)
        return loss.item(), norm.item()

    def train_step(m):
        with autocast:
            m(x, x)[1].backward()
        for o in opts:
            o.step()
        model.zero_grad(set_to_none=True)

    # eager against compiled at the same weights; the first compiled call compiles forward and backward
    eager = fwd_bwd(model)
    t0 = time.perf_counter()
    comp = fwd_bwd(compiled)
    compile_s = time.perf_counter() - t0
    kernel_train = sdpa_kernels(lambda: train_step(model))  # eager: inductor calls the same SDPA op
    train_step(compiled)  # warm-up: the optimisers' first step
    sync()
    if not dry:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        train_step(compiled)
    sync()
    tps = B * T * steps / (time.perf_counter() - t0)
    fpt = flops.train_flops_per_token(cfg)
    causal = fpt - 3 * cfg.n_layer * T * cfg.n_head * (flops.d_qk(cfg) + cfg.head_dim)  # half the core
    return dict(tok_s=tps, mfu=fpt * tps / peak if peak else None,
                mfu_causal=causal * tps / peak if peak else None,
                opt_share=optimiser_share(compiled, model, opts, x),  # before the peak: its steps count
                peak_gib=None if dry else torch.cuda.max_memory_allocated() / 2**30,
                est_gib=flops.memory_per_gpu(cfg, B, 1, False) / 2**30, kernel_train=kernel_train,
                loss_diff=abs(eager[0] - comp[0]), norm_diff=abs(eager[1] - comp[1]) / eager[1],
                compile_s=compile_s)


def optimiser_share(run, model, opts, x):
    """The optimisers' share of a training step: the median of three, each timed in two halves,
    forward + backward, then the optimisers."""
    split = []
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        with autocast:
            run(x, x)[1].backward()
        sync()
        t1 = time.perf_counter()
        for o in opts:
            o.step()
        model.zero_grad(set_to_none=True)
        sync()
        split.append((time.perf_counter() - t1) / (time.perf_counter() - t0))
    return sorted(split)[1]


def cache_measures(model, x):
    """The caches after a prefill of half the context, then one decode step: SDPA's kernel in the
    step, each cache's dtype, and the bytes per token allocated (all T slots) against flops.py's."""
    B, T = x.shape
    caches = model.new_caches(T)
    with torch.no_grad(), autocast:
        model(x[:, :T // 2], caches=caches)
        kernel_decode = sdpa_kernels(lambda: model(x[:, T // 2:T // 2 + 1], caches=caches))
    bufs = caches[0].buf
    elem = bufs and next(iter(bufs.values())).element_size()
    cache = ", ".join(f"{k} {str(v.dtype)[6:]}" for k, v in bufs.items())
    return dict(kernel_decode=kernel_decode, cache=cache, cache_bytes=sum(c.nbytes() for c in caches) / (B * T),
                cache_formula=flops.kv_cache_bytes_per_token(model.cfg, elem))


def tiny_runs():
    """Tiny train.py runs on this device, each set against another by its logged train losses: a
    run killed after its step-3 checkpoint and resumed against an uninterrupted one; one rank of
    DDP under torchrun against one process; one rank of FSDP2 against DDP; fp16 with its loss
    scaler against the default precision. -> one line each."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([sys.executable, "prepare.py", "text", f"--input={ROOT}/*.py", "--name=check",
                        f"--data_dir={data}"], cwd=ROOT, check=True, capture_output=True)
        cmd = ["train.py", "--dataset=check", f"--data_dir={data}", f"--out_dir={tmp}", f"--device={device}",
               "--attn=lrkv", "--n_layer=2", "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=4",
               "--total_batch_tokens=256", "--max_iters=8", "--eval_interval=4", "--ckpt_interval=3",
               "--eval_tokens=1024", "--log_interval=1", "--warmup_iters=2", "--compile=False"]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"]

        procs = []

        def start(name, *extra, launch=(sys.executable,), fault=None):
            # the cut run is killed half-way through writing step 5's log line, as the tests kill runs
            launch = [*launch, "tests/fault.py"] if fault else list(launch)
            with open(f"{tmp}/{name}.err", "w") as err:
                procs.append(subprocess.Popen(launch + cmd + [f"--run_name={name}", *extra], cwd=ROOT, stderr=err,
                                              env={**env, **({"NANOKV_FAULT": fault} if fault else {})},
                                              stdout=subprocess.DEVNULL))
            return name, procs[-1]

        def losses(name, p):  # -> {step: train loss}, or the run's last error line
            if p.wait() != 0:
                return f"{name}: train.py failed: {(open(f'{tmp}/{name}.err').read().strip().splitlines() or ['?'])[-1]}"
            return {r["step"]: r["train_loss"] for r in map(json.loads, open(f"{tmp}/{name}/log.jsonl"))
                    if r["type"] == "step" and "train_loss" in r}

        def against(what, a, b, tol):
            if isinstance(a, str) or isinstance(b, str):
                return f"{what}: {a if isinstance(a, str) else b}"
            diff = max(abs(a[s] - b.get(s, float("inf"))) for s in a) if a.keys() == b.keys() else float("inf")
            return f"{what}: {'ok' if diff <= tol else 'FAILED'}, max train-loss difference {diff:.1e} (at most {tol:g})"

        try:  # the runs at once (they are small), then the cut one's resume
            runs = [start("full"), start("ddp", launch=torchrun), start("fsdp", "--fsdp", launch=torchrun),
                    start("fp16", "--dtype=fp16"), start("cut", fault="log:5")]
            runs[-1][1].wait()
            full, ddp, fsdp, fp16 = (losses(*r) for r in runs[:4])
            cut = losses(*start("cut", "--resume"))
        finally:  # a phase stopped at its limit leaves no run behind: SIGTERM lets torchrun stop its ranks
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        return [against("killed at step 5, resumed from step 3, against uninterrupted", cut, full, 1e-4),
                against("1-rank DDP (torchrun) against one process", ddp, full, 1e-4),  # CUDA's atomics may reorder sums
                # FSDP2 computes in bf16 with fp32 masters, as DDP's autocast does (equal to the bit on the CPU)
                against("1-rank FSDP2 against 1-rank DDP", fsdp, ddp, 1e-3),
                # fp16 with a GradScaler against bf16 (fp32 on the CPU): other roundings, so a loose bound
                against("fp16 with its loss scaler against the default precision", fp16, full, 5e-2)]


def versions():
    # what ran: the GPU, torch, CUDA and cuDNN, and the order SDPA tries its kernels in, read after
    # a first SDPA call (torch 2.11's CUDA 13 build puts cuDNN first lazily, on that call)
    from torch.nn.attention import SDPBackend
    q = torch.zeros(1, 2, 16, 64, device=device, dtype=torch.float32 if dry else torch.bfloat16)
    torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    order = getattr(torch._C, "_get_sdp_priority_order", lambda: [])()
    known = {b.value: n.lower() for n, b in SDPBackend.__members__.items()}
    names = [known.get(i, str(i)) for i in order]
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return (f"{hardware}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}; "
            f"SDPA priority {' > '.join(names) or 'n/a'}; {time.strftime('%Y-%m-%d %H:%M')}")


class Stopped(str):
    """A phase's line saying why it has no result, and what it finished before (partial: the
    pieces it printed with partial())."""
    partial = ()


def partial(piece):
    # a phase's finished piece (a design's cell, say), printed at once: a phase stopped later keeps it
    print("PARTIAL " + json.dumps(piece), flush=True)


def phase(what, limit, f, *a, **kw):
    """f(*a, **kw), a function of this script, in a process of its own (this script with --part)
    with at most limit seconds (scaled by --budget/480, and no more than is left of it): its result,
    or a Stopped line saying why there is none, with the pieces it finished. A phase killed at its
    limit, or failing, leaves the phases after it their time; nothing it started outlives it."""
    left = args.budget - (time.time() - t_start)
    if left < 5:
        return Stopped(f"{what}: skipped, the {args.budget:.0f} s budget is spent")
    limit = min(max(5.0, limit * args.budget / 480), left)
    flags = ["--dry"] * dry + [f"--out={args.out}", f"--budget={args.budget}"] + [f"--backend={args.backend}"] * bool(
        args.backend)
    cmd = [*PHASE_CMD, *flags, "--part", json.dumps([f.__name__, a, kw])]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own process group: killed whole
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        # SIGTERM first: the phase's own clean-up runs (torchrun stops ranks that sit in process
        # groups of their own), then SIGKILL for whatever is left of its group
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)  # what it printed before, too
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return stopped(f"{what}: stopped at its {limit:.0f} s limit", out)
    result = [line[7:] for line in out.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not result:
        why = (err.strip().splitlines() or ['exit status %d' % proc.returncode])[-1]
        return stopped(f"{what}: failed: {why}", out)
    return json.loads(result[-1])


def stopped(line, out):
    s = Stopped(line)
    s.partial = [json.loads(x[8:]) for x in (out or "").splitlines() if x.startswith("PARTIAL ")]
    return s


def say(line=""):
    # to the screen and the results file at once, so a check cut off part-way keeps what it had
    print(line, flush=True)
    with open(os.path.join(args.out, "results.md"), "a") as f:
        f.write(line + "\n")


fmt = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731


def design_rows(variants, size=None):
    # a design at a time, each row written as it is measured
    say("| design | train tok/s | MFU | MFU (causal) | optimiser % | peak GiB (estimate) | SDPA train | SDPA decode "
        "| eager - compiled loss | grad norm, relative | cache after prefill | cache B/token (formula) | compile s |")
    say("|" + "---|" * 13)
    for label, attn, variant in variants:
        r = phase(label, 30 if size else 45, check, attn, size, **variant)
        if isinstance(r, str):
            say(f"| {label} | {r} |")
            continue
        r["design"], r["size"] = label, size
        with open(os.path.join(args.out, "results.jsonl"), "a") as f:
            f.write(json.dumps(r) + "\n")
        say(f"| {label} | {r['tok_s']:,.0f} | {fmt(r['mfu'], '.1%')} | {fmt(r['mfu_causal'], '.1%')} "
            f"| {r['opt_share']:.0%} | {fmt(r['peak_gib'], '.1f')} ({r['est_gib']:.1f}) "
            f"| {r['kernel_train']} | {r['kernel_decode']} | {r['loss_diff']:.1e} | {r['norm_diff']:.1e} | {r['cache']} "
            f"| {r['cache_bytes']:,.0f} ({r['cache_formula']:,}) | {r['compile_s']:.0f} |")


def decode_cfg():
    n = layers.get("decode")
    return preset(name, **{**shape, "block_size": context, **({"n_layer": n} if n else {})})


def decode(mode, B):
    # every design at the context in one mode and batch, a design at a time (each cell printed as it
    # is done) -> {design: cell}: tok/s, and the GB/s of what a step must read (every sequence's cache
    # and the weights, flops.decode_bytes) with its share of the peak
    cfg, cells = decode_cfg(), {}
    dtype = torch.float32 if dry else torch.bfloat16
    for a in design_cfgs(cfg):
        r = decode_bench(cfg, (context,), steps=5 if dry else 20, device=device, modes=(mode,), dtype=dtype,
                         batch=B, warmup=2, designs=(a,))[a, context, mode]
        share = f", {r['gbs'] * 1e9 / peak_bw:.0%}" if peak_bw else ""
        cells[a] = f"{r['tok_s']:,.0f} ({r['gbs']:,.1f}{share})"
        partial({a: cells[a]})
    return cells


def decode_row(what, r):
    # the table's row of a decode phase: its cells, or those it finished and why the rest are missing
    cells = r if isinstance(r, dict) else {k: v for p in r.partial for k, v in p.items()}
    row = " | ".join(cells.get(a, "-") for a in design_cfgs(decode_cfg()))
    return f"| {what} | {row} |" + ("" if isinstance(r, dict) else f" {r}")


def graphs_same_tokens():
    """The compiled decode step recorded and replayed as a CUDA graph ("reduce-overhead", what
    generate() runs on CUDA from GRAPH_MIN_TOKENS new tokens) against the compiled step without one
    (the same kernels: tokens must be equal) and eager (fp32: equal, or a rounding)."""
    cfg = preset(name, **{**shape, "attn": "lrkv", "n_layer": 2})
    torch.manual_seed(0)
    model = GPT(cfg).to(device).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 16), device=device)
    out = {c: model.generate(idx, 32, temperature=0, compile=c) for c in (False, True, "reduce-overhead")}
    same = (out["reduce-overhead"] == out[True]).all().item()
    agree = (out["reduce-overhead"] == out[False])[:, 16:].float().mean().item()
    return (f"{'ok' if same else 'DIFFERENT'}: 32 greedy tokens decoded as a CUDA graph against the compiled "
            f"step's; {agree:.0%} of them eager's (fp32)")


def main(argv=None):
    global t_start
    setup(arguments(argv))
    try:  # the results files, emptied: written line by line as the check measures
        os.makedirs(args.out, exist_ok=True)
        for f in ("results.md", "results.jsonl") if not args.part else ():
            open(os.path.join(args.out, f), "w").close()
    except OSError as e:
        fail(f"--out={args.out}: {e}")
    if args.part:  # one phase, run by phase() in the process it started: its result on one line
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped at its limit: finally blocks run
        fname, fargs, fkw = json.loads(args.part)
        print("RESULT " + json.dumps(globals()[fname](*fargs, **fkw)), flush=True)
        sys.exit(0)

    t_start = time.time()
    say(f"# gpu_check.py{' --dry' if dry else ''}: {name} preset, batch {batch} x {preset(name, **shape).block_size}, "
        f"{'dry run: nothing here is a measurement' if dry else 'bf16 autocast, torch.compile'}")
    say(f"\n{versions()}\n")
    if "designs" in args.only:
        say("MFU counts attention with no causal discount (flops.py's convention); MFU (causal) counts half of it. "
            "Eager against compiled: one training micro-step at the same weights.\n")
        design_rows([(a, a, {}) for a in DESIGNS])
    if "runs" in args.only:
        say(f"\ntiny train.py runs on {device}:")
        r = phase("tiny runs", 60, tiny_runs)
        for line in [r] if isinstance(r, str) else r:
            say(f"- {line}")
    if "tokens" in args.only and not dry:  # dry: inductor's C++ build would take minutes
        say(f"\nCUDA-graph decode: {phase('CUDA-graph decode', 30, graphs_same_tokens)}")
    if "decode" in args.only:
        say(f"\ndecode tokens/s (GB/s of the cache and weights a step reads, flops.decode_bytes, and its share of the "
            f"peak bandwidth), {decode_cfg().n_layer} layers (bench.decode_bench: each step over exactly that context)\n")
        columns = list(design_cfgs(decode_cfg()))  # decode()'s, in its order
        say("| mode @context x batch | " + " | ".join(columns) + " |")
        say("|" + "---|" * (1 + len(columns)))
        # batch 1 eager and as a CUDA graph; then compiled where the cache dominates. dry: eager
        # only (inductor's C++ build would take minutes)
        plan = ([("eager", batches[0], 20), ("eager", batches[1], 20)] if dry else
                [("eager", batches[0], 20), ("graphs", batches[0], 40), ("compiled", batches[1], 40)])
        for mode, B, limit in plan:
            what = f"{mode} @{context} x{B}"
            say(decode_row(what, phase(f"decode {what}", limit, decode, mode, B)))
    if "variants" in args.only:
        say("\nMLA at DeepSeek's widths and the factored LRKV:\n")
        design_rows([("mla-ds", "mla", dict(mla_deepseek=True)), ("lrkv-f", "lrkv", dict(lrkv_factored=True))])
    if "512m-8k" in args.only:
        say(f"\nthe figure's shape, 512m-8k, batch 1 x 8192{', 2 of its 24 layers' if not dry else ' (dry: the tiny shape)'}:\n")
        design_rows([(f"{a} 512m-8k", a, {}) for a in ("mha", "lrkv")], size=("512m-8k", 1))
    if "memory" in args.only:  # asked for: its five phases do not fit the default budget
        say(f"\nmemory, the whole 512m-8k model{' (dry: the tiny shape)' if dry else ''}, batch 1 x 8192, "
            "two eager bf16 steps with train.py's optimisers:\n")
        say("| design | peak GiB | estimate GiB (flops.memory_per_gpu) |")
        say("|---|---|---|")
        for a in DESIGNS:
            r = phase(f"memory {a}", 40, memory, a)
            say(r if not isinstance(r, Stopped) else f"| {a} | {r} |")
    say(f"\n({time.time() - t_start:.0f} s; written to {os.path.join(args.out, 'results.md')})")


if __name__ == "__main__":
    main()

"""
One command that checks nanoKV on a GPU and writes a Markdown table for docs/.

    python gpu_check.py                      # the 128M preset, bf16, compiled, on cuda: at most --budget=480 s
    python gpu_check.py --deep               # the deeper checks (gpu_deep.py): a second call, as long
    python gpu_check.py --only=decode,512m-8k    # some parts again, e.g. those a cut-off check missed
    python gpu_check.py --dry [--deep]       # the same steps on the CPU at tiny shapes, to check the script

It writes out/gpu_check/results.md line by line as it measures (each design's row, and each
phase's record, to results.jsonl too), so a check cut off part-way keeps what it had. Each phase
runs in a process of its own (this script with --part) under a time limit within --budget
(gpu_phases.py: the budget flows, a phase stopped at its limit runs again at the end, measuring
only the designs it missed, a result printed counts); one that runs out, or fails, is killed with
anything it started and said so in one line. SIGTERM or ^C ends the check the same way: no
process of it is left, and what it finished is on disk. The last table gives each phase's limit,
seconds, outcome and compile time. Each table's header says how many of its preset's layers it
measured. The parts:
- the GPU, torch, CUDA and cuDNN versions and SDPA's kernel order;
- designs: per design, training tokens/s and MFU (compiled, Muon + AdamW as train.py; MFU by
  flops.py's convention, no causal discount, and with causal attention), the optimiser's share of a
  step, peak memory against flops.memory_per_gpu, the SDPA kernel in training and in decoding (the
  profiler's op names), the training loss compiled against eager and the gradient of the parameter
  they differ most in, the compile time, each cache's dtype and bytes per token after a prefill
  against flops.py's formula;
- runs: tiny train.py runs killed and resumed, as 1-rank DDP and FSDP2 under torchrun, and in fp16;
- tokens: generate()'s CUDA-graph decode against the compiled and the eager step, and the graphs
  it recorded, replayed and skipped, twice in one bucket of kept caches;
- decode: tokens/s and the GB/s of what a step reads at 8K, batch 1 eager and as a CUDA graph, and
  batch 32 compiled (bench.decode_bench), a design at a time: one design's failure is its cell's;
- variants, only when asked: MLA at DeepSeek's widths and the factored LRKV, as the designs' rows;
- 512m-8k: MHA and LRKV at the figure's 8K-context shape, 2 of its 24 layers;
- memory, only when asked: each design's whole 512m-8k model, peak memory of two eager training
  steps against flops.memory_per_gpu.
--deep's parts are gpu_deep.py's.
"""
import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import time

import torch

import flops
import gpu_deep
from bench import build, decode_bench, design_cfgs
from common import ArgumentParser, DESIGNS, autocast as amp, device_name, fail, native_bf16
from gpu_phases import Cut, Phase, Stopped, catch_cuts, run_part, run_plan
from model import preset
from muon import newton_schulz_dtype, optimizers

ROOT = os.path.dirname(os.path.abspath(__file__))
PHASE_CMD = [sys.executable, os.path.abspath(__file__)]  # how gpu_phases starts a phase's process
PARTS = ["designs", "runs", "tokens", "decode", "variants", "512m-8k", "memory"]  # in the order they run
DEFAULT = [x for x in PARTS if x not in ("variants", "memory")]  # what fits the budget
DEEP = [x[0] for x in gpu_deep.PHASES]


def arguments(argv=None):
    p = ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--dry", action="store_true", help="on the CPU at tiny shapes: checks the script, measures nothing")
    p.add_argument("--deep", action="store_true", help="the deeper checks (gpu_deep.py), in a budget of their own")
    p.add_argument("--out", default="out/gpu_check", help="folder for results.md (written line by line) and results.jsonl")
    p.add_argument("--budget", type=float, default=480, help="seconds for the whole check: each phase has a limit within it")
    p.add_argument("--only", help="some of the parts, to rerun what a cut-off check missed (default: "
                   f"{','.join(DEFAULT)}; with --deep {','.join(DEEP)})")
    p.add_argument("--backend", default=None, help="--dry: torch.compile's backend (default dynamo's eager)")
    p.add_argument("--part", help=argparse.SUPPRESS)  # one phase, in a process of its own: [function, args, kwargs]
    a = p.parse_args(argv)
    parts = DEEP if a.deep else PARTS
    a.only = a.only.split(",") if a.only else DEEP if a.deep else DEFAULT
    if set(a.only) - set(parts):
        fail(f"--only={','.join(a.only)}: the parts{' of --deep' * a.deep} are {','.join(parts)}")
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


# -----------------------------------------------------------------------------
# the phases: each a function run in a process of its own

def memory(attn):
    """The figure's whole model, 512m-8k's 24 layers at batch 1 x 8192 (the paper's per-GPU batch
    on 4 GPUs), two eager training steps under bf16 autocast with train.py's optimisers: the peak
    memory allocated against flops.memory_per_gpu's estimate, in GiB."""
    cfg = preset("cpu" if dry else "512m-8k", attn=attn, **shape)
    model = build(cfg, device)
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
    model = build(preset(shape_name, attn=attn, **shape, **variant, **({"n_layer": n} if n else {})), device)
    x = torch.randint(0, model.cfg.vocab_size, (B, model.cfg.block_size), device=device)
    # the optimisers and the compiled model are gone (train_measures' own) before the caches are measured
    return dict(design=attn, **train_measures(model, x), **cache_measures(model, x))


def train_measures(model, x):
    """Training on x: a micro-step eager against compiled at the same weights (the loss, the
    gradient of the parameter they differ most in, compile time), SDPA's kernel, tokens/s and MFU
    of compiled steps with train.py's optimisers, their share of a step, and the peak memory
    against flops.memory_per_gpu."""
    cfg, (B, T) = model.cfg, x.shape
    compiled = torch.compile(model, backend=backend)
    opts = optimizers(model, ns_dtype)

    def fwd_bwd(m):  # the training loss and every gradient of one micro-step, gradients cleared after
        with autocast:
            loss = m(x, x)[1]
        loss.backward()
        grads = {n: p.grad.float() for n, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        return loss.item(), grads

    def train_step(m):
        with autocast:
            m(x, x)[1].backward()
        for o in opts:
            o.step()
        model.zero_grad(set_to_none=True)

    # eager against compiled at the same weights, a step past their start: there every residual
    # branch's output projection is 0, so the gradients before it are 0 too, and compare nothing.
    # The first compiled call compiles forward and backward
    train_step(model)
    eager = fwd_bwd(model)
    t0 = time.perf_counter()
    comp = fwd_bwd(compiled)
    compile_s = time.perf_counter() - t0
    # per parameter: a total norm missed a few zeroed ones (torch 2.11's compiled RMSNorm zeroed all)
    rel = {n: ((comp[1][n] - g).norm() / g.norm().clamp_min(1e-30)).item() for n, g in eager[1].items()}
    worst = max(rel, key=rel.get)
    zeroed = sum(comp[1][n].count_nonzero().item() == 0 < g.count_nonzero().item() for n, g in eager[1].items())
    loss_diff = abs(eager[0] - comp[0])
    del eager, comp
    kernel_train = sdpa_kernels(lambda: train_step(model))  # eager: inductor calls the same SDPA op
    train_step(compiled)  # warm-up
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
                loss_diff=loss_diff, grad_diff=rel[worst], grad_worst=worst,
                grads_zeroed=zeroed, compile_s=compile_s)
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


def versions():
    # what ran: the GPU, torch, CUDA and cuDNN, and the order SDPA tries its kernels in, read after
    # a first SDPA call (torch 2.11's CUDA 13 build puts cuDNN first lazily, on that call). A call
    # that raises (cuDNN first, and broken) costs the order, "n/a", not the check: no phase has run
    from torch.nn.attention import SDPBackend
    q = torch.zeros(1, 2, 16, 64, device=device, dtype=torch.float32 if dry else torch.bfloat16)
    try:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        order = getattr(torch._C, "_get_sdp_priority_order", lambda: [])()
        why = ""
    except Exception as e:
        said = (str(e).splitlines() or [""])[0][:80]
        order, why = [], f" (its first call: {type(e).__name__}: {said})"
    known = {b.value: n.lower() for n, b in SDPBackend.__members__.items()}
    names = [known.get(i, str(i)) for i in order]
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return (f"{hardware}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}; "
            f"SDPA priority {' > '.join(names) or 'n/a'}{why}; {time.strftime('%Y-%m-%d %H:%M')}")


def decode_cfg():
    n = layers.get("decode")
    return preset(name, **{**shape, "block_size": context, **({"n_layer": n} if n else {})})


def decode(mode, B, skip=()):
    # every design at the context in one mode and batch, a design at a time, each cell yielded as it
    # is done: tok/s, and the GB/s of what a step must read (every sequence's cache and the
    # weights, flops.decode_bytes) with its share of the peak; as a CUDA graph, the graphs
    # recorded/replayed/skipped too. skip: the designs a first try finished (a retry measures the
    # rest). -> the seconds of the first steps, where the compiled modes compile
    first = 0.0
    for a in design_cfgs(decode_cfg()):
        if a in skip:
            continue
        try:
            counting = gpu_deep.graph_counts() if mode == "graphs" else contextlib.nullcontext()
            with counting as graphs:
                r = decode_bench(decode_cfg(), (context,), steps=5 if dry else 20, device=device,
                                 modes=(mode,), dtype=torch.float32 if dry else torch.bfloat16,
                                 batch=B, warmup=2, designs=(a,))
        except Exception as e:  # an OOM, a compile error: its cell says so, the next design runs
            yield {a: f"failed: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:60]}".replace("|", "/")}
            continue
        r = r[a, context, mode]
        first += r["first_s"]
        share = f", {r['gbs'] * 1e9 / peak_bw:.0%}" if peak_bw else ""
        counts = "" if graphs is None else "; {recorded}/{replayed}/{skipped}".format_map(graphs)
        yield {a: f"{r['tok_s']:,.0f} ({r['gbs']:,.1f}{share}){counts}"}
    return dict(compile_s=None if mode == "eager" else first)


def say(line=""):
    # to the screen and the results file at once, so a check cut off part-way keeps what it had
    print(line, flush=True)
    with open(os.path.join(args.out, "results.md"), "a") as f:
        f.write(line + "\n")


def jsonl(record):
    with open(os.path.join(args.out, "results.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")


fmt = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731


# -----------------------------------------------------------------------------
# the plan: the parts asked for, each a phase or a few, with their tables


def depth(part, size=None):
    # "4 of 128m's 12 layers": what a table's rows measured, out of its preset's whole model (its
    # tokens/s, MFU and memory are those layers', not the whole model's)
    size = size[0] if size and not dry else name
    whole = preset(size, **shape).n_layer
    return f"{layers.get(part, whole)} of {size}'s {whole} layers"


def design_phases(intro, variants, size=None):
    head = (f"{intro}\n| design, {depth('big' if size else 'designs', size)} | train tok/s | MFU "
            "| MFU (causal) | optimiser % | peak GiB (estimate) | SDPA train | SDPA decode "
            "| eager - compiled loss | grad, worst parameter (relative) | cache after prefill "
            "| cache B/token (formula) | compile s |\n|" + "---|" * 13)

    def write(label, r):
        if isinstance(r, Stopped):
            return say(f"| {label} | {r} |")
        jsonl({**r, "design": label, "size": size})
        zeroed = f", {r['grads_zeroed']} zeroed" if r["grads_zeroed"] else ""
        say(f"| {label} | {r['tok_s']:,.0f} | {fmt(r['mfu'], '.1%')} | {fmt(r['mfu_causal'], '.1%')} "
            f"| {r['opt_share']:.0%} | {fmt(r['peak_gib'], '.1f')} ({r['est_gib']:.1f}) | {r['kernel_train']} "
            f"| {r['kernel_decode']} | {r['loss_diff']:.1e} | {r['grad_diff']:.1e} ({r['grad_worst']}{zeroed}) "
            f"| {r['cache']} | {r['cache_bytes']:,.0f} ({r['cache_formula']:,}) | {r['compile_s']:.0f} |")
    return [Phase(label, 30 if size else 45, check, (attn, size), functools.partial(write, label), head, kw=variant)
            for label, attn, variant in variants]


def decode_phases():
    columns = list(design_cfgs(decode_cfg()))  # decode()'s, in its order
    head = (f"\ndecode tokens/s (GB/s of the cache and weights a step reads, flops.decode_bytes, and its share of "
            "the peak bandwidth; as a CUDA graph, then the graphs recorded/replayed/skipped), "
            f"{depth('decode')} "
            f"(bench.decode_bench: each step over exactly that context)\n\n"
            f"| mode @context x batch | {' | '.join(columns)} |\n|" + "---|" * (1 + len(columns)))
    out = []
    # batch 1 eager and as a CUDA graph; then compiled where the cache dominates
    for mode, B, share in [("eager", batches[0], 20), ("graphs", batches[0], 40), ("compiled", batches[1], 40)]:
        # cells: kept from a first try that was stopped
        what, cells, kw = f"{mode} @{context} x{B}", {}, {}

        def write(r, what=what, cells=cells, kw=kw):
            row = " | ".join(cells.get(a, "-") for a in columns)
            say(f"| {what} | {row} |" + (f" {r}" if isinstance(r, Stopped) else ""))
            kw["skip"] = list(cells)  # its retry measures the designs missing; its row shows all
        out.append(Phase(f"decode {what}", share, decode, (mode, B), write, head, cells.update, kw))
    return out


def lines_phase(what, share, f, a, head, kw):
    # a phase whose lines are written as they come (gpu_deep's): a stopped one's line last
    return Phase(what, share, f, a, lambda r: isinstance(r, Stopped) and say(f"- {r}"), head, say, kw)


def plan():
    """The phases of the parts asked for, in order, each with its share of a 480-s budget. From
    measured costs (docs/training.md, The GPU check): a design's phase needs 30-40 s of its 45, a
    decode phase of six designs 25-35 s plus start-up; --deep's shares are guesses until a GPU runs
    them."""
    only, p = args.only, []
    deep = dict(device=device, backend=backend, name=name, shape=shape, context=context,
                layers=decode_cfg().n_layer, dtype="float32" if dry else "bfloat16")  # what gpu_deep's take
    if "designs" in only:
        p += design_phases("MFU counts attention with no causal discount (flops.py's convention); MFU (causal) "
                           "counts half of it. Eager against compiled: one training micro-step at the same weights, "
                           "one step past their start.\n", [(a, a, {}) for a in DESIGNS])
    if "runs" in only:
        p.append(lines_phase("tiny runs", 60, gpu_deep.train_runs, ("runs",), f"\ntiny train.py runs on {device}:",
                             deep))
    if "tokens" in only:
        p.append(lines_phase("CUDA-graph decode", 30, gpu_deep.graph_decode, (),
                             "\nCUDA-graph decode, generate(compile=\"reduce-overhead\"):", {**deep, "news": [32, 32]}))
    if "decode" in only:
        p += decode_phases()
    if "variants" in only:
        p += design_phases("\nMLA at DeepSeek's widths and the factored LRKV:\n",
                           [("mla-ds", "mla", dict(mla_deepseek=True)), ("lrkv-f", "lrkv", dict(lrkv_factored=True))])
    if "512m-8k" in only:
        p += design_phases("\nthe figure's shape, 512m-8k, batch 1 x 8192"
                           f"{' (dry: the tiny shape)' if dry else ''}:\n",
                           [(f"{a} 512m-8k", a, {}) for a in ("mha", "lrkv")], size=("512m-8k", 1))
    if "memory" in only:  # asked for: its five phases do not fit the default budget
        head = (f"\nmemory, the whole 512m-8k model{' (dry: the tiny shape)' if dry else ''}, batch 1 x 8192, two "
                "eager bf16 steps with train.py's optimisers:\n\n| design | peak GiB | estimate GiB "
                "(flops.memory_per_gpu) |\n|---|---|---|")
        p += [Phase(f"memory {a}", 40, memory, (a,), lambda r, a=a: say(r if not isinstance(r, Stopped) else
                                                                        f"| {a} | {r} |"), head) for a in DESIGNS]
    p += [lines_phase(what, share, f, a, head.format(**deep), deep)
          for part, what, share, f, a, head in gpu_deep.PHASES if part in only]
    return p


def main(argv=None):
    global t_start
    setup(arguments(argv))
    try:  # the results files, emptied: written line by line as the check measures
        os.makedirs(args.out, exist_ok=True)
        for f in ("results.md", "results.jsonl") if not args.part else ():
            open(os.path.join(args.out, f), "w").close()
    except OSError as e:
        fail(f"--out={args.out}: {e}")
    if args.part:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped at its limit: finally blocks run
        if dry:  # every compile with --backend, generate()'s and bench's too (inductor's C++ build takes minutes)
            torch.compile = functools.partial(torch.compile, backend=backend)
        run_part({**vars(gpu_deep), **globals()}, *json.loads(args.part))
        sys.exit(0)

    t_start = time.time()
    catch_cuts()  # SIGTERM, ^C: the phase running and all it started stopped, then the check ends
    try:
        what = "dry run: nothing here is a measurement" if dry else "bf16 autocast, torch.compile"
        say(f"# gpu_check.py{' --deep' * args.deep}{' --dry' * dry}: {name} preset, batch {batch} x "
            f"{preset(name, **shape).block_size}, {what}")
        say(f"\n{versions()}\n")
        flags = ["--dry"] * dry + ["--deep"] * args.deep
        flags += [f"--out={args.out}", f"--budget={args.budget}"]
        flags += [f"--backend={args.backend}"] * bool(args.backend)
        run_plan(plan(), PHASE_CMD + flags, args.budget, t_start, say, jsonl)
    except Cut as c:
        say(f"\n(cut by {c} after {time.time() - t_start:.0f} s: what it finished is above; "
            "it left no process)")
        sys.exit(128 + c.signum)
    say(f"\n({time.time() - t_start:.0f} s; written to {os.path.join(args.out, 'results.md')})")

if __name__ == "__main__":
    main()

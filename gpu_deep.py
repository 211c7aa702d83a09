"""
The GPU check's deeper checks, `python gpu_check.py --deep`: each a phase of gpu_check.py, in a
process of its own under the same budget rules, and each guarding a bug that a CPU cannot show
(PHASES, at the end, lists them; each function says what it checks). `--deep --dry` runs them on
the CPU at tiny shapes (gloo for DDP and FSDP2, CPU autocast for fp16) to check the script. Also
here, as the default check uses them too: tiny train.py runs set against each other (the "runs"
part) and the CUDA graphs that generate() records and replays (the "tokens" part). The compiled
against eager gradients per parameter are in the default check's design rows.
"""
import collections
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

import flops
from bench import DECODERS, build
from common import DESIGNS
from generate import decoder
from model import preset

ROOT = os.path.dirname(os.path.abspath(__file__))
TRAIN = "train.py"  # what the runs run (tests swap in a stand-in that writes a log at once)
# train.py with torch.compile's backend set first (--dry: dynamo's eager, as inductor's C++ build
# would take minutes; train.py has no flag for it), then the script that follows: fault.py or train.py
WITH_BACKEND = ["-c", "import functools, runpy, sys, torch; torch.compile = functools.partial(torch.compile, "
                "backend=sys.argv.pop(1)); sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')"]

# -----------------------------------------------------------------------------
# tiny train.py runs, each against another


def same_losses(tol):
    # -> a test of two runs' folders: their logged train losses, step by step, at most tol apart
    def test(a, b):
        a, b = losses(a), losses(b)
        diff = max(abs(a[s] - b.get(s, float("inf"))) for s in a) if a.keys() == b.keys() else float("inf")
        return f"{'ok' if diff <= tol else 'FAILED'}, max train-loss difference {diff:.1e} (at most {tol:g})"
    return test


def losses(run):
    return {r["step"]: r["train_loss"] for r in map(json.loads, open(f"{run}/log.jsonl"))
            if r["type"] == "step" and "train_loss" in r}


def skipped(a, b):
    # a: 5 steps, the gradients of step 5 made inf (inf_grad:4); b: 4 steps. Skipped, a's weights
    # are b's: within 1e-4, as CUDA's atomics (embedding backward, inductor's scatters) may reorder
    # sums from one process to the next, where a step taken moves them by about the learning rate
    ka, kb = (torch.load(f"{run}/ckpt.pt", map_location="cpu", weights_only=False) for run in (a, b))
    diff = max(((ka["model"][k].float() - v.float()).norm() / v.float().norm().clamp_min(1e-30)).item()
               for k, v in kb["model"].items())
    scale = ka["scaler"]["scale"], kb["scaler"]["scale"]
    return (f"{'ok' if diff <= 1e-4 and scale[0] == scale[1] / 2 else 'FAILED'}: weights after the step against a "
            f"run stopped before it, max relative difference {diff:.1e} (at most 1e-4); loss scale {scale[1]:g} -> "
            f"{scale[0]:g}")


COMPILED = ("--compile=True",)
FP16 = ("--compile=True", "--dtype=fp16", "--warmup_iters=10")  # in warm-up: the rate is the same at 4 and 5 steps
RUNS = {  # a phase's runs {name: (under torchrun, flags, fault)}, and [(what, run, against run, test)]
    "runs": (dict(full=(False, (), None), ddp=(True, (), None), fsdp=(True, ("--fsdp",), None),
                  fp16=(False, ("--dtype=fp16",), None), cut=(False, (), "log:5")),
             [("killed at step 5, resumed from step 3, against uninterrupted", "cut", "full", same_losses(1e-4)),
              # CUDA's atomics may reorder sums
              ("1-rank DDP (torchrun) against one process", "ddp", "full", same_losses(1e-4)),
              # FSDP2 computes in bf16 with fp32 masters, as DDP's autocast does (equal to the bit on the CPU)
              ("1-rank FSDP2 against 1-rank DDP", "fsdp", "ddp", same_losses(1e-3)),
              # fp16 with a GradScaler against bf16 (fp32 on the CPU): other roundings, so a loose bound
              ("fp16 with its loss scaler against the default precision", "fp16", "full", same_losses(5e-2))]),
    "compiled": (dict(eager=(False, (), None), compiled=(False, COMPILED, None), ddp=(True, COMPILED, None)),
                 # bf16: inductor fuses and rounds otherwise than eager; the DDPOptimizer splits the graph
                 # at bucket boundaries, so its fusions differ too. Bounds set before any GPU run
                 [("compiled against eager", "compiled", "eager", same_losses(2e-2)),
                  ("1-rank DDP under compile against one compiled process", "ddp", "compiled", same_losses(2e-2))]),
    "fsdp": (dict(fsdp=(True, ("--fsdp", *COMPILED), None), cut=(True, ("--fsdp", *COMPILED), "log:5")),
             [("1-rank FSDP2, compiled, killed at step 5, resumed through DCP, against uninterrupted", "cut", "fsdp",
               same_losses(1e-4))]),
    "fp16": (dict(four=(False, (*FP16, "--max_iters=4"), None), inf=(False, (*FP16, "--max_iters=5"), "inf_grad:4")),
             [("fp16, compiled, the gradients of step 5 made inf", "inf", "four", skipped)]),
}


def train_runs(which, device, backend, **_):
    """RUNS[which]: tiny train.py runs on device, all at once (a run a fault kills, resumed), each
    line yielded as soon as the two runs it sets against each other are done. -> the first step's
    seconds of the slowest compiled run: its compile"""
    runs, lines = RUNS[which]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "prepare.py", "text", f"--input={ROOT}/*.py", "--name=check",
                        f"--data_dir={tmp}/data"], cwd=ROOT, check=True, capture_output=True)
        cmd = [TRAIN, "--dataset=check", f"--data_dir={tmp}/data", f"--out_dir={tmp}", f"--device={device}",
               "--attn=lrkv", "--n_layer=2", "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=4",
               "--total_batch_tokens=256", "--max_iters=8", "--eval_interval=4", "--ckpt_interval=3",
               "--eval_tokens=1024", "--log_interval=1", "--warmup_iters=2", "--compile=False"]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "--no-python", sys.executable]
        procs, started = {}, []

        def start(name, *extra):  # extra: --resume, without the fault
            under_torchrun, flags, fault = runs[name]
            fault = None if extra else fault
            backend_first = [*WITH_BACKEND, backend] if "--compile=True" in flags else []
            with open(f"{tmp}/{name}.err", "w") as err:
                started.append(subprocess.Popen(
                    [sys.executable, *torchrun * under_torchrun, *backend_first, *["tests/fault.py"] * bool(fault),
                     *cmd, f"--run_name={name}", *flags, *extra], cwd=ROOT, stderr=err, stdout=subprocess.DEVNULL,
                    env={**env, **({"NANOKV_FAULT": fault} if fault else {})}))
            procs[name] = started[-1], bool(extra)

        def finished(name):  # a run killed by its fault (exit status not 0) is resumed, once
            p, resumed = procs[name]
            if p.poll() is not None and runs[name][2] and p.returncode and not resumed:
                start(name, "--resume")
            return procs[name][0].poll() is not None

        def line(what, a, b, test):
            failed = [n for n in (a, b) if procs[n][0].returncode]
            if failed:
                err = (open(f"{tmp}/{failed[0]}.err").read().strip().splitlines() or ["?"])[-1]
                return f"{what}: {failed[0]}: train.py failed: {err}"
            return f"{what}: {test(f'{tmp}/{a}', f'{tmp}/{b}')}"

        try:
            for name in runs:
                start(name)
            todo = list(lines)
            while todo:
                done = {n for n in runs if finished(n)}
                for x in [x for x in todo if {x[1], x[2]} <= done]:
                    todo.remove(x)
                    yield f"- {line(*x)}"
                time.sleep(0.2)
            logs = [f"{tmp}/{n}/log.jsonl" for n in runs if "--compile=True" in runs[n][1]]
            firsts = [next((r["dt"] for r in map(json.loads, open(f)) if "dt" in r), None) for f in logs
                      if os.path.exists(f)]
            return dict(compile_s=max([t for t in firsts if t is not None], default=None))
        finally:  # a phase stopped at its limit leaves no run behind
            stop(started)


def stop(procs):
    # SIGTERM first, which lets torchrun stop its ranks; SIGKILL what has not ended in 10 s
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# -----------------------------------------------------------------------------
# CUDA graphs: recorded, replayed, skipped


@contextlib.contextmanager
def graph_counts():
    """-> a Counter of the CUDA graphs that cudagraph trees (torch.compile's "reduce-overhead")
    record and replay while the block runs, and of the calls it runs without one (inductor's
    cudagraph_skips counter)."""
    from torch._dynamo.utils import counters
    from torch._inductor.cudagraph_trees import CUDAGraphTreeManager as trees
    n, skips = collections.Counter(), counters["inductor"]["cudagraph_skips"]
    kept = {"recorded": trees.record_function, "replayed": trees.execute_node}
    for key, name in (("recorded", "record_function"), ("replayed", "execute_node")):
        setattr(trees, name, lambda self, *a, key=key: n.update([key]) or kept[key](self, *a))
    try:
        yield n
    finally:
        trees.record_function, trees.execute_node = kept["recorded"], kept["replayed"]
        n["skipped"] = counters["inductor"]["cudagraph_skips"] - skips


def graph_decode(device, name, shape, news, **_):
    """generate()'s CUDA-graph decode ("reduce-overhead") of a 2-layer LRKV, greedy, once for each
    count of new tokens in news: the tokens against the compiled step without a graph (the same
    kernels: they must be equal) and eager; the graphs each call recorded, replayed and skipped. A
    call in a new bucket of kept caches must record one graph, a call in a bucket an earlier call
    made none. -> a line, and the seconds of the compiled calls"""
    cfg = preset(name, **{**shape, "attn": "lrkv", "n_layer": 2})
    model = build(cfg, device)
    idx = torch.randint(0, cfg.vocab_size, (2, 16), device=model.lm_head.weight.device)
    t0, calls = time.perf_counter(), []
    for n in news:  # first, so that a call's bucket is new if it adds one to generate's kept caches
        buckets = len(model.__dict__.get("_kept", {}))
        with graph_counts() as c:
            out = model.generate(idx, n, temperature=0, compile="reduce-overhead")
        calls.append((out, c, len(model._kept) == buckets))
    compiled = model.generate(idx, news[0], temperature=0, compile=True)
    compile_s = time.perf_counter() - t0  # the compiled calls, their steps included
    eager = model.generate(idx, news[0], temperature=0, compile=False)
    # every call's tokens, as far as it and the compiled call both go: a graph replayed over caches
    # other than those it was recorded with would decode from the wrong state
    same = all(torch.equal(out[:, :16 + min(n, news[0])], compiled[:, :16 + min(n, news[0])])
               for (out, _, _), n in zip(calls, news))
    agree = (calls[0][0] == eager)[:, 16:].float().mean().item()
    # one recording per bucket: a step compiled dynamic recorded the first bucket again on its return
    graphs = all(c["skipped"] == 0 and c["recorded"] == (0 if again else 1) and c["replayed"]
                 for _, c, again in calls)
    counts = ", ".join(f"{c['recorded']}/{c['replayed']}/{c['skipped']} "
                       f"({'its bucket again' if again else 'new bucket'})" for _, c, again in calls)
    where = "fp32 weights, TF32 matmuls" if device == "cuda" else "fp32; no CUDA graphs on the CPU"
    ok = same and (graphs or device != "cuda")
    yield (f"- {'ok' if ok else 'FAILED'}: {news[0]} greedy tokens decoded as a CUDA graph "
           f"{'equal' if same else 'NOT equal'} to the compiled step's, {agree:.0%} of them eager's ({where}); graphs "
           f"recorded/replayed/skipped for {' then '.join(map(str, news))} new tokens: {counts}")
    return dict(compile_s=compile_s)


def kept_caches(device, name, shape, **_):
    # 16 + 32 - 1 slots: a bucket of 64; 115: a second, of 128; 55: the first again, at another
    # length, so what the first call recorded must replay
    return graph_decode(device, name, shape, (32, 100, 40))


# -----------------------------------------------------------------------------
# SDPA's kernels, and the copies of a decode step


def sdpa_backends(device, name, shape, dtype, **_):
    """Which SDPA kernels take each design's training call, forward and backward, each forced
    alone: a table, a row as each design is done, at the check's preset and at 512m-8k's d_h of 128
    (where DeepSeek-MLA's queries and keys are 192 wide, its values 128). The call's shapes and
    arguments are captured from a forward of one layer, so they are the design's own."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kinds = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
    yield "| design | preset | q, k, v | " + " | ".join(k.split("_")[0].lower() for k in kinds) + " |"
    yield "|" + "---|" * (3 + len(kinds))
    for size in [name] if device == "cpu" else [name, "512m-8k"]:
        T = min(2048, preset(size, **shape).block_size)  # the widths choose the kernel, not the length
        variants = [(a, dict(attn=a)) for a in DESIGNS] + [("mla-ds", dict(attn="mla", mla_deepseek=True)),
                                                           ("mha w", dict(attn="mha", window=T // 2))]
        for label, variant in variants:
            model = build(preset(size, **{**shape, **variant, "n_layer": 1, "block_size": T}), device)
            calls, sdpa = [], F.scaled_dot_product_attention
            F.scaled_dot_product_attention = lambda *a, **k: calls.append((a, k)) or sdpa(*a, **k)
            try:
                with torch.no_grad():
                    model(torch.zeros(1, T, dtype=torch.long, device=device), last=True)
            finally:
                F.scaled_dot_product_attention = sdpa
            (q, k, v, *mask), kw = calls[0]
            cells = []
            for kind in kinds:
                with warnings.catch_warnings(record=True) as why, sdpa_kernel(getattr(SDPBackend, kind)):
                    warnings.simplefilter("always")
                    try:
                        x = [t.detach().to(getattr(torch, dtype)).requires_grad_() for t in (q, k, v)]
                        sdpa(*x, *mask, **kw).sum().backward()
                        cells.append("yes")
                    except Exception:  # its warnings say why the kernel refused; none: not built here
                        said = [str(w.message).split(" (Triggered")[0] for w in why]
                        said = [w for w in said if not w.endswith("not used because:")] or ["none on this device"]
                        cells.append("no: " + said[0][:90].replace("|", "/"))
            shapes = ", ".join("x".join(map(str, t.shape)) for t in (q, k, v)) + (", mask" if mask else "")
            yield f"| {label} | {size} | {shapes} | " + " | ".join(cells) + " |"


ITEMSIZE = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2, "double": 8, "long int": 8, "int": 4, "bool": 1}


@torch.no_grad()
def copies(device, name, shape, context, layers, dtype, **_):
    """The bytes one decode step at the context copies, per design class and mode, against one
    layer's cache: what aten::copy_ writes (and _foreach_copy_, what cudagraph trees copy a
    graph's inputs with), and in the compiled modes what inductor's own kernels copy from a
    cache (kernel_copies), which no profiler op shows. A step whose aten copies reach one layer's
    cache has copied a cache whole; a kernel that copies one has too. A table, a row a design."""
    dtype, cuda = getattr(torch, dtype), device == "cuda"
    modes = ("eager", "compiled") + ("graphs",) * cuda
    yield "| design | " + " | ".join(f"{m} B" for m in modes) + " | one layer's cache B | one token's B |"
    yield "|" + "---|" * (3 + len(modes))
    one = {}  # a design per class: the others run its code
    for a in DESIGNS:
        one.setdefault(DESIGNS[a].cls, a)
    for a in one.values():
        cfg = preset(name, **{**shape, "attn": a, "block_size": context, "n_layer": layers})
        model, N = build(cfg, device, dtype), context
        idx = torch.randint(0, cfg.vocab_size, (1, N), device=device)
        caches = model.new_caches(N)
        model(idx[:, :-1], caches=caches, last=True)
        layer = caches[0].nbytes()
        cells = []
        for mode in modes:
            step = decoder(model, DECODERS[mode])

            def call():
                return step(idx[:, -1:], caches=caches, pos=torch.tensor([N - 1], device=device))
            with kernel_copies([b for c in caches for b in c.buf.values()]) as kernels:
                for _ in range(3):  # compile; cudagraph trees' warm-up, then its recording
                    call()
            n = written(call, cuda)
            if mode == "eager":
                cells.append(f"{n:,}" + (" FAILED" if n >= layer else ""))
                continue
            k = f"{max(kernels):,}" if kernels else "n/a (no inductor compile)"
            bad = n >= layer or kernels and max(kernels) > 0
            cells.append(f"{n:,}, kernels {k}" + (" FAILED" if bad else ""))
        token = flops.kv_cache_bytes_per_token(cfg, dtype.itemsize)
        yield f"| {a} | " + " | ".join(cells) + f" | {layer:,} | {token:,} |"


@contextlib.contextmanager
def kernel_copies(bufs):
    """-> a list, per graph inductor compiles in the block, of the bytes its kernels write as
    copies of a cache: a kernel that reads an input of a cache buffer's shape and writes, into
    one buffer, at least as many bytes as the largest cache buffer holds (a cast, a permuted
    .contiguous(), the copy back of a cache that was not updated in place). A decode step's
    other writes are far smaller: one token's slots, a row of scores, the logits. Read from
    inductor's scheduler, which sizes each kernel's writes from its loop ranges, and an extern
    kernel's from its whole output (an extern kernel writing into a cache counts as a copy: a
    false alarm, never a miss). A copy of a buffer smaller than the largest (LRKV's per-head
    parts) is not seen. Compiled afresh: a graph from inductor's caches runs no scheduler."""
    from torch._inductor import config, scheduler
    from torch._inductor.virtualized import V
    shapes, big = {tuple(b.shape) for b in bufs}, max(b.nbytes for b in bufs)
    out, codegen = [], scheduler.Scheduler.codegen

    def counted(self):
        inputs, n = V.graph.graph_inputs, 0
        for node in self.nodes:
            for sub in node.get_nodes():  # a fused kernel's parts: their loop ranges are exact
                size = lambda name: tuple(int(d) for d in inputs[name].get_size())  # noqa: E731
                if any(r.name in inputs and size(r.name) in shapes for r in sub.read_writes.reads):
                    wrote = sub.get_read_write_buffer_accesses(False, True).values()
                    n += sum(b for b in wrote if b >= big)
        out.append(n)
        return codegen(self)
    scheduler.Scheduler.codegen = counted
    try:
        with config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            yield out
    finally:
        scheduler.Scheduler.codegen = codegen


def written(f, cuda):
    # the bytes f's copies write: aten::copy_ as the profiler saw it (not those inside another
    # copy), and _foreach_copy_, whose tensor lists the profiler does not record, counted here
    n, foreach = [0], torch._foreach_copy_

    def counted(dst, src, *a, **k):
        n[0] += sum(t.numel() * t.element_size() for t in dst)
        return foreach(dst, src, *a, **k)
    torch._foreach_copy_ = counted
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            f()
            if cuda:
                torch.cuda.synchronize()
    finally:
        torch._foreach_copy_ = foreach
    inner = ("aten::copy_", "aten::_foreach_copy_")
    return n[0] + sum(math.prod(e.input_shapes[0]) * ITEMSIZE.get(e.input_dtypes[0], 4) for e in prof.events()
                      if e.name == "aten::copy_" and not (e.cpu_parent and e.cpu_parent.name in inner))


# --deep's parts: (part, name, share of a 480-s budget, function, its arguments, the lines before
# it). The shares are guesses until a GPU runs them: the flowing budget and the retry absorb them
PHASES = [
    ("compiled", "compiled train.py", 110, train_runs, ("compiled",), "\ntrain.py compiled, on {device}:"),
    ("fsdp", "FSDP2 resumed", 100, train_runs, ("fsdp",), "\ntrain.py compiled, on {device}:"),
    ("fp16", "fp16 inf step", 70, train_runs, ("fp16",), "\ntrain.py compiled, on {device}:"),
    ("graphs", "kept caches", 60, kept_caches, (), "\nCUDA graphs when generate() returns to a bucket of kept caches:"),
    ("sdpa", "SDPA backends", 40, sdpa_backends, (), "\nSDPA kernels that take each design's training call "
     "(batch 1, one layer), forced one at a time, forward and backward, {dtype}:\n"),
    ("copies", "copies", 90, copies, (), "\nbytes that aten::copy_ (and cudagraph trees' "
     "_foreach_copy_) write in one decode step at {context}, batch 1, {layers} layers, and "
     "compiled, the bytes inductor's kernels copy from a cache: a step whose copies reach one "
     "layer's cache has copied it whole, a kernel that copies any has\n"),
]

"""
Train a GPT with the attention chosen by --attn, log test loss against tokens and FLOPs.

    python train.py                                   # CPU preset on Shakespeare, a few minutes
    python train.py --attn=lrkv --max_iters=500       # any field as --key=value (full names)
    torchrun --standalone --nproc_per_node=4 train.py config/512m_8k.py --attn=lrkv   # the figure run

Config files are Python files that assign the fields below; --key=value overrides them;
`python train.py --help` lists them. Every run writes out_dir/run/log.jsonl (a header, then a line
per log step) and ckpt.pt (with --fsdp: ckpt_STEP/, a shard per rank). A run killed at any moment
is finished by the same command with --resume.
"""
import ast
import contextlib
import datetime
import functools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, fields

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

import flops
from eval import evaluate
from model import GPT, GPTConfig, preset as model_preset
from muon import newton_schulz_dtype, optimizers
from prepare import load_split, prepare, windows
from tokenizer import get_tokenizer

# -----------------------------------------------------------------------------
# defaults: the CPU preset on the embedded corpus
out_dir = "out"  # runs go to out_dir/run_name/
run_name = ""  # default: {preset}_{attn}_s{seed}; not --run, which torchrun takes for its --run_path
resume = False  # continue the run in out_dir/run_name from its checkpoint (or from step 0 if it has none)
preset = "cpu"  # model shape from model.PRESETS; the model fields below override it
attn = "mha"  # the KV design: mha, gqa, mqa, mla or lrkv
n_layer = n_head = n_embd = block_size = vocab_size = None  # None = the preset's (vocab: the data's, padded)
n_kv_head = lrkv_rank = mla_kv_rank = mla_rope_dim = mla_q_rank = None  # None = the preset's, or model.py's default
mla_deepseek = None  # MLA with DeepSeek's widths (d_n = d_h) and a learnable kv_norm weight
lrkv_factored = None  # LRKV with RoPE on the shared key only, K_h = RoPE(K_s) + R B_hᵀ: exact absorbed decode
attn_scale = None  # multiplier of the QK-normed designs' softmax scale 1/√d_h (cpu preset 2.0, paper presets 1.0)
data_dir = "data"  # prepared datasets live in data_dir/<dataset>_<tokenizer>/
dataset = "shakespeare"  # shakespeare (embedded, prepared on first use), fineweb, or your own (prepare.py text)
tokenizer = "byte"  # byte for CPU runs, gpt2 for real ones
batch_size = 16  # sequences per rank per micro-step
total_batch_tokens = 16 * 256  # global tokens per optimiser step, fixed whatever the world size
max_iters = 600  # optimiser steps
warmup_iters = 30  # steps of linear learning-rate warm-up
min_lr_frac = 0.0  # cosine decays to this fraction of each learning rate
optimizer = "muon"  # muon (the paper's) or adamw (a plain baseline)
muon_dtype = "auto"  # Newton-Schulz precision: auto = bf16 on GPUs (the paper's), fp32 on CPUs; or bf16, fp32
matrix_lr = 0.02  # Muon, every hidden weight matrix
embed_lr = 0.2  # AdamW, token embedding
head_lr = 0.004  # AdamW, output head
adamw_lr = 3e-3  # --optimizer=adamw: every parameter
betas = (0.9, 0.95)  # AdamW
weight_decay = 0.1  # decoupled, on every matrix but the embedding
grad_clip = 1.0  # global gradient-norm clip (0: off)
eval_interval = 50  # steps between test-loss evaluations (and the last step)
eval_tokens = 65536  # the same held-out tokens for every design
log_interval = 10  # steps between log lines (and eval steps)
ckpt_interval = None  # steps between checkpoints (None: eval_interval; 0: off); one is always written at the end
ckpt_minutes = 0.0  # also a checkpoint when this many minutes passed since the last one (0: off)
seed = 0  # initialisation and batch order
device = "auto"  # auto: cuda:LOCAL_RANK if available, else cpu; or cpu, cuda, cuda:N, mps
compile = "auto"  # auto: on for cuda
dtype = "auto"  # autocast precision: auto = bf16 on CUDA if supported, else fp16 (with a GradScaler); fp32 on CPU
fsdp = False  # shard weights, gradients and optimiser state across ranks (FSDP2) instead of DDP's full copies
activation_checkpointing = False  # recompute each block's activations in backward: far less memory, ~1/3 more compute
memory_limit_gb = 0.0  # refuse a run whose estimated memory per rank exceeds this (0: the GPU's memory; on CPU no check)
# -----------------------------------------------------------------------------
MODEL_FIELDS = [f.name for f in fields(GPTConfig) if f.name != "rope_base"]
config_keys = [k for k, v in globals().items() if not k.startswith("_") and isinstance(v, (int, float, str, bool, tuple, type(None)))]


def fail(msg):
    # one line, no traceback: bad input is the user's to fix, and this says how
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def usage():
    """--help: every field, its default and the comment beside it, read from the block above."""
    src = open(__file__, encoding="utf-8").read().splitlines()
    a, b = [i for i, line in enumerate(src) if line.startswith("# ----")][:2]
    meaning = {}
    for line in src[a + 1:b]:
        code, _, comment = line.partition("  # ")
        for name in re.findall(r"(\w+)\s*=(?!=)", code):  # a = b = 0 names a and b
            meaning[name] = comment.strip()
    print(__doc__.strip() + "\n\nfields (--key=value; default; meaning):")
    for k in config_keys:
        print(f"  --{k}={globals()[k]!r}" + (f"  {meaning[k]}" if meaning.get(k) else ""))
    sys.exit(0)


def configure(argv):
    """nanoGPT-style: files assign globals, then --key=value overrides, type-checked."""
    g = globals()
    if "-h" in argv or "--help" in argv:
        usage()
    for arg in argv:
        if not arg.startswith("--"):
            if not os.path.isfile(arg):
                fail(f"config file {arg} not found; see config/ for the presets")
            exec(open(arg).read(), g)
            continue
        key, eq, val = arg[2:].partition("=")
        if key not in config_keys:
            fail(f"unknown flag --{key}; flags are: " + " ".join(f"--{k}" for k in config_keys))
        if not eq:
            val = "True"
        try:
            val = ast.literal_eval(val)
        except (ValueError, SyntaxError):
            pass  # a bare string such as --attn=lrkv
        default = g[key]
        if key == "compile" or isinstance(default, bool):
            ok = isinstance(val, bool) or (key == "compile" and val == "auto")
        elif default is None:  # "the preset's" or "automatic": checked where it is used
            ok = val is None or isinstance(val, (int, float, str, bool))
        elif isinstance(default, float):
            ok = isinstance(val, (int, float)) and not isinstance(val, bool)
        else:
            ok = type(val) is type(default)
        if not ok:
            want = "True, False or auto" if key == "compile" else f"{type(default).__name__} like the default {default!r}"
            fail(f"--{key}={val!r}: expected {want}")
        g[key] = float(val) if isinstance(default, float) and val is not None else val


configure(sys.argv[1:])
if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
    fail(f"--device={device!r} is unknown; use auto, cpu, cuda, cuda:N (a GPU index) or mps")
if dtype not in ("auto", "fp32", "bf16", "fp16"):
    fail(f"--dtype={dtype!r} is unknown; use auto, fp32, bf16 or fp16")
cfg_dict = {k: globals()[k] for k in config_keys}
run = run_name or f"{preset}_{attn}_s{seed}"
run_dir = os.path.join(out_dir, run)

# distributed: torchrun sets RANK; NCCL on GPUs, gloo on CPU
ddp = "RANK" in os.environ
rank, local_rank, world = (int(os.environ.get(k, d)) for k, d in (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1)))
if device == "auto":
    device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
cuda = device.startswith("cuda")
if cuda and not torch.cuda.is_available():
    fail(f"--device={device} but this torch sees no CUDA GPU; use --device=cpu")
if ddp:
    if cuda:
        torch.cuda.set_device(device)
    # rank 0 writes checkpoints while the others wait at a barrier: allow an hour, not NCCL's 10 minutes
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(hours=1))
master = rank == 0
log = print if master else (lambda *a, **k: None)
if fsdp and not ddp:
    fail("--fsdp shards the model across ranks: launch with torchrun --nproc_per_node=N (N >= 2), or drop --fsdp")


def warn(msg):
    if master:
        print(f"warning: {msg}", file=sys.stderr)


compile = cuda if compile == "auto" else compile
if cuda:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
if dtype == "auto":  # V100s and T4s have no bf16: fp16, whose small range needs a loss scaler
    dtype = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if cuda else "fp32"
if fsdp and dtype == "fp16":
    fail("--fsdp trains in bf16 or fp32 (fp16's loss scaler is not sharded here); pass --dtype=bf16 or --dtype=fp32")
device_type = device.partition(":")[0]
autocast = (torch.autocast(device_type, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[dtype])
            if dtype != "fp32" else contextlib.nullcontext())
scaler = torch.amp.GradScaler(device_type, enabled=dtype == "fp16")  # a no-op unless fp16

# data: the embedded corpus prepares itself on first use; anything else must be prepared first
dataset_dir = os.path.join(data_dir, f"{dataset}_{tokenizer}")
if dataset == "shakespeare" and master:
    prepare(dataset, tokenizer, data_dir)
if ddp:
    dist.barrier()
try:
    train_data, val_data = load_split(dataset_dir, "train"), load_split(dataset_dir, "val")
except FileNotFoundError as e:
    fail(str(e))
tok = get_tokenizer(tokenizer)
n_train = sum(map(len, train_data)) if isinstance(train_data, list) else len(train_data)
if max_iters * total_batch_tokens > n_train:
    warn(f"{max_iters} steps x {total_batch_tokens} tokens is {max_iters * total_batch_tokens / n_train:.1f} times "
         f"the {n_train:,} training tokens in {dataset_dir}: the run will see its data more than once")
if warmup_iters >= max_iters:
    warn(f"warmup_iters={warmup_iters} >= max_iters={max_iters}: the run never leaves warm-up")

# model
try:
    overrides = {k: globals()[k] for k in MODEL_FIELDS if globals()[k] is not None}
    overrides.setdefault("vocab_size", math.ceil(tok.vocab_size / 64) * 64)  # pad for fast matmuls
    mcfg = model_preset(preset, **overrides)
except ValueError as e:
    fail(str(e))
if mcfg.vocab_size < tok.vocab_size:
    fail(f"vocab_size={mcfg.vocab_size} is smaller than the {tokenizer} tokenizer's {tok.vocab_size}")
T = mcfg.block_size
for name, split in (("training", train_data), ("held-out", val_data)):
    if min(map(len, split if isinstance(split, list) else [split])) <= T:
        fail(f"{dataset_dir} has a {name} file shorter than one window of block_size+1 = {T + 1} tokens; "
             f"give it more text (or a larger --val_frac), or a smaller --block_size")
if total_batch_tokens % (batch_size * T * world):
    fail(f"total_batch_tokens={total_batch_tokens} must be a multiple of batch_size·block_size·ranks "
         f"= {batch_size}·{T}·{world}; change --batch_size or --total_batch_tokens")
grad_accum = total_batch_tokens // (batch_size * T * world)
limit = memory_limit_gb * 2**30 or (torch.cuda.get_device_properties(device).total_memory if cuda else 0)
need = flops.memory_per_gpu(mcfg, batch_size, world, fsdp, activation_checkpointing)
if limit and need > limit:  # refused now rather than out of memory after minutes of compiling
    options = {"--fsdp": (batch_size, True, activation_checkpointing) if world > 1 and not fsdp else None,
               "--activation_checkpointing": (batch_size, fsdp, True) if not activation_checkpointing else None,
               "--batch_size=1": (1, fsdp, activation_checkpointing) if batch_size > 1 else None}
    fits = [k for k, o in options.items() if o and flops.memory_per_gpu(mcfg, o[0], world, o[1], o[2]) <= limit]
    fail(f"this run needs about {need / 2**30:.3g} GiB per rank (flops.memory_per_gpu) and {limit / 2**30:.3g} GiB are "
         f"there; what fits: {' or '.join(fits) if fits else 'none of --fsdp, --activation_checkpointing, --batch_size=1 alone: combine them, or use more or larger GPUs'}")
torch.manual_seed(seed)
with torch.device(device):  # built where it runs: no full copy in host RAM per rank first (25 GB at 6.3B)
    model = GPT(mcfg)
flops_per_token = flops.train_flops_per_token(mcfg)
if activation_checkpointing:  # each block keeps only its input; backward recomputes the rest
    for block in model.h:
        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)
if fsdp:  # each block, then the rest, as DTensors sharded on dim 0; gathered whole for each block's compute
    heads = {n: p.heads for n, p in model.named_parameters() if hasattr(p, "heads")}
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if dtype == "bf16" else MixedPrecisionPolicy()
    for block in model.h:
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    for n, p in model.named_parameters():  # fully_shard made new Parameters: Muon's per-head blocks again
        if n in heads:
            p.heads = heads[n]

# optimisers: Muon + AdamW as the paper (muon.optimizers), or AdamW for everything
try:
    ns_dtype = newton_schulz_dtype(muon_dtype, cuda)
except ValueError as e:
    fail(str(e))
if optimizer == "muon":
    optims = optimizers(model, matrix_lr, embed_lr, head_lr, weight_decay, betas, ns_dtype)
elif optimizer == "adamw":
    decay = [p for n, p in model.named_parameters() if p.ndim == 2 and n != "wte.weight"]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or n == "wte.weight"]
    optims = [torch.optim.AdamW([dict(params=decay), dict(params=no_decay, weight_decay=0.0)],
                                lr=adamw_lr, betas=betas, weight_decay=weight_decay)]
else:
    fail(f"--optimizer={optimizer!r} is unknown; use muon or adamw")
for opt in optims:
    for group in opt.param_groups:
        group["base_lr"] = group["lr"]


def lr_frac(step):
    # linear warm-up, then cosine to min_lr_frac
    if step < warmup_iters:
        return (step + 1) / warmup_iters
    progress = (step - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr_frac + (1 - min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def get_batch(step):
    """This rank's grad_accum micro-batches of the step's global batch (prepare.windows)."""
    mine = slice(rank * batch_size * grad_accum, (rank + 1) * batch_size * grad_accum)
    xy = windows(train_data, seed, step, batch_size * grad_accum * world, T, mine).view(grad_accum, batch_size, T + 1)
    xy = xy.pin_memory().to(device, non_blocking=True) if cuda else xy  # the copy overlaps the GPU's work
    return [(xy[i, :, :-1], xy[i, :, 1:]) for i in range(grad_accum)]


# test hook (tests/test_train.py): NANOKV_FAULT=what:N. log, eval or ckpt kill this process, as a
# power cut would, half-way through writing step N's log line, during its evaluation or during its
# checkpoint write; inf_grad makes the gradients of the step from N to N+1 inf, as an fp16 overflow would
FAULT = os.environ.get("NANOKV_FAULT", "")


def maybe_die(where, step):
    if FAULT == f"{where}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)


def dcp_checkpoints():
    """--fsdp checkpoints, ckpt_STEP/ folders of shards (torch.distributed.checkpoint) and meta.pt,
    which is written last: a folder without it is a write that was cut. Oldest first."""
    done = [d for d in os.listdir(run_dir) if re.fullmatch(r"ckpt_\d+", d)
            and os.path.exists(os.path.join(run_dir, d, "meta.pt"))] if os.path.isdir(run_dir) else []
    return [os.path.join(run_dir, d) for d in sorted(done, key=lambda d: int(d[5:]))]


def sharded_state():
    # --fsdp: each rank's shards of the weights and of each optimiser's state (one at a time: DCP
    # refuses several optimisers at once when one has an empty group, as AdamW's gains without MLA)
    return dict(model=get_model_state_dict(model), **{f"optim{i}": get_optimizer_state_dict(model, o)
                                                       for i, o in enumerate(optims)})


def save_checkpoint(step):
    """Every rank calls this. DDP: rank 0 writes ckpt.pt. FSDP2: every rank writes its shards."""
    meta = dict(step=step, scaler=scaler.state_dict(), model_config=asdict(mcfg), train_config=cfg_dict,
                rng=dict(torch=torch.get_rng_state(), cuda=torch.cuda.get_rng_state(device) if cuda else None))
    if fsdp:
        folder = os.path.join(run_dir, f"ckpt_{step}")
        if master and os.path.exists(folder):
            shutil.rmtree(folder)  # a cut write of this step
        dist.barrier()
        dcp.save(sharded_state(), checkpoint_id=folder)  # returns once every rank's shards are written
        if master:
            torch.save(meta, os.path.join(folder, "meta.pt.tmp"))
            maybe_die("ckpt", step)
            os.replace(os.path.join(folder, "meta.pt.tmp"), os.path.join(folder, "meta.pt"))  # now it counts
            for d in os.listdir(run_dir):  # older ones, and any cut write
                if re.fullmatch(r"ckpt_\d+", d) and d != f"ckpt_{step}":
                    shutil.rmtree(os.path.join(run_dir, d))
        return
    if not master:
        return
    ckpt = dict(meta, model=model.state_dict(), optims=[o.state_dict() for o in optims])
    tmp = os.path.join(run_dir, "ckpt.pt.tmp")
    torch.save(ckpt, tmp)
    maybe_die("ckpt", step)
    os.replace(tmp, os.path.join(run_dir, "ckpt.pt"))  # atomic: a kill leaves the old one whole


def read_log(path):
    """The records of a log's whole lines; a line cut by a kill is dropped (from the file too,
    atomically), so that the next line appended starts on a line of its own."""
    with open(path, encoding="utf-8") as f:
        whole, _, cut = f.read().rpartition("\n")
    if cut:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(whole + "\n" if whole else "")
        os.replace(path + ".tmp", path)
    records = []
    for line in whole.split("\n") if whole else []:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # spoilt by an older version, which appended after a cut line; plot.py skips it too
    return records


def same_model(saved, what):
    # a resume must build the model the run was trained with
    diff = [k for k, v in asdict(mcfg).items() if saved.get(k) != v]
    if diff:
        fail(f"{what} with another model config ({', '.join(diff)} differ); pass the same flags or "
             f"start a new --run_name")


log_path, ckpt_path = os.path.join(run_dir, "log.jsonl"), os.path.join(run_dir, "ckpt.pt")
if resume and fsdp and os.path.exists(ckpt_path):
    fail(f"{ckpt_path} is a DDP checkpoint; resume this run without --fsdp (or start a new --run_name)")
if resume and not fsdp and dcp_checkpoints():
    fail(f"{dcp_checkpoints()[-1]} is a sharded --fsdp checkpoint; resume this run with --fsdp")
if fsdp:
    ckpt_path = (dcp_checkpoints() or [os.path.join(run_dir, "ckpt_0")])[-1]
start, last_logged, changed = 0, -1, []
if resume and os.path.exists(ckpt_path):
    try:  # to the CPU: set_rng_state needs a CPU tensor, and the optimisers move their state to the params
        ckpt = torch.load(os.path.join(ckpt_path, "meta.pt") if fsdp else ckpt_path, map_location="cpu", weights_only=False)
    except Exception as e:
        fail(f"checkpoint {ckpt_path} is unreadable ({type(e).__name__}): it is truncated or not a "
             f"checkpoint; restore it or start a new --run_name")
    same_model(ckpt["model_config"], f"{ckpt_path} was trained")
    base = [[g["base_lr"] for g in o.param_groups] for o in optims]
    if fsdp:  # each rank reads its shards, resharded if the number of ranks changed
        state = sharded_state()
        dcp.load(state, checkpoint_id=ckpt_path)
        set_model_state_dict(model, state["model"])
        for i, o in enumerate(optims):
            set_optimizer_state_dict(model, o, state[f"optim{i}"])
    else:
        model.load_state_dict(ckpt["model"])
        for o, s in zip(optims, ckpt["optims"]):
            o.load_state_dict(s)
    for o, lrs in zip(optims, base):  # this run's learning rates, not the saved ones
        for g, lr in zip(o.param_groups, lrs):
            g["base_lr"] = lr
    if ckpt.get("scaler"):
        scaler.load_state_dict(ckpt["scaler"])
    start = ckpt["step"]
    torch.set_rng_state(ckpt["rng"]["torch"])
    if cuda and ckpt["rng"].get("cuda") is not None:
        state = ckpt["rng"]["cuda"]  # older checkpoints hold a list, one state per visible GPU
        torch.cuda.set_rng_state(state[torch.device(device).index or 0] if isinstance(state, list) else state, device)
    old = ckpt["train_config"]
    del ckpt  # no second copy of the weights for the rest of the run
    if start > max_iters:
        fail(f"{ckpt_path} is at step {start}, past --max_iters={max_iters}; pass a larger --max_iters "
             f"to train on, or start a new --run_name")
    if start == max_iters:
        log(f"{run}: already trained to step {start} = max_iters; nothing to do (a larger --max_iters trains on)")
        sys.exit(0)
    changed = [k for k in ("max_iters", "warmup_iters", "min_lr_frac") if old.get(k) != globals()[k]]
    changed += [k for k in config_keys if k.endswith("_lr") and old.get(k) != globals()[k]]
    if changed:
        warn(f"resuming with another schedule ({', '.join(f'{k} {old.get(k)} -> {globals()[k]}' for k in changed)}): "
             f"steps after {start} follow the new one")
elif resume and not os.path.isdir(run_dir):
    fail(f"no run in {run_dir} to resume; drop --resume to start it")
elif not resume and master and os.path.exists(log_path):
    fail(f"{run_dir} already holds a run; pass --resume to continue it or choose another --run_name")
# a resumed run (from its checkpoint, or from step 0 when killed before the first one) redoes the
# steps the killed run logged after that point exactly, so their lines are kept and not written again;
# under another schedule they would differ, so they are dropped
if resume and master and os.path.exists(log_path):
    records = read_log(log_path)
    head = next((r for r in records if r.get("type") == "header"), None)
    if head:
        same_model(head["config"], f"{log_path} was written")
    if changed:
        records = [r for r in records if r.get("step", -1) <= start]
        with open(log_path + ".tmp", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        os.replace(log_path + ".tmp", log_path)
    last_logged = max([r["step"] for r in records if r.get("type") == "step"], default=-1)
if ddp:  # every rank must agree on which steps evaluate
    t = torch.tensor([last_logged], device=device)
    dist.broadcast(t, 0)
    last_logged = int(t)

train_model = torch.compile(model) if compile else model
if ddp and not fsdp:  # gradients live in DDP's buckets (no second copy); buffers synced once, not every forward (RoPE tables are fixed)
    train_model = DDP(train_model, device_ids=[local_rank] if cuda else None, gradient_as_bucket_view=True,
                      forward_sync_buffers=False)

device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
peak = flops.peak_flops(device_name)


def write_log(record):
    if master:
        line = json.dumps(record) + "\n"
        with open(log_path, "a") as f:  # appended, one whole line per write
            if FAULT == f"log:{record.get('step')}":
                f.write(line[:len(line) // 2])
                f.flush()
                maybe_die("log", record["step"])
            f.write(line)


def minutes_due():
    # rank 0's clock decides, so that every rank takes the same branch
    due = torch.tensor(float(time.time() - t_ckpt >= 60 * ckpt_minutes), device=device)
    if ddp:
        dist.broadcast(due, 0)
    return bool(due)


if master:
    os.makedirs(run_dir, exist_ok=True)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    mha = GPTConfig(**{**asdict(mcfg), "attn": "mha"})
    write_log(dict(type="header", run=run, attn=mcfg.attn, resumed=resume, start_step=start,
                   config={**cfg_dict, **asdict(mcfg), "run": run}, params=flops.params(mcfg),
                   kv_params=flops.kv_params(mcfg), flops_per_token=flops_per_token,
                   paper_flops_per_token=flops.paper_flops_per_token(mcfg),
                   kv_bytes_per_token=flops.kv_cache_bytes_per_token(mcfg),
                   mha_kv_bytes_per_token=flops.kv_cache_bytes_per_token(mha),
                   tokens_per_step=total_batch_tokens, world_size=world, git=commit,
                   device=f"{world}x {device_name}", dtype=dtype, time=time.strftime("%Y-%m-%d %H:%M:%S")))
log(f"{run}: {mcfg.attn}, {flops.params(mcfg) / 1e6:.2f}M params, {flops_per_token / 1e6:.2f} MFLOP/token, "
    f"{total_batch_tokens} tokens/step ({world} rank(s) x {grad_accum} micro-steps x {batch_size}x{T}), "
    f"{max_iters} steps on {device_name}")

token_bytes = tok.token_bytes()  # for bits per byte; GPT-2's takes 50k decodes, so once
ckpt_every = eval_interval if ckpt_interval is None else ckpt_interval
t_start = t_ckpt = time.time()
step, train_loss, dt = start, None, None
t_train = t_host = 0.0  # seconds of training steps, and of them (or between them) in data loading and log writing
loss_sum, first_bad = torch.zeros((), device=device), torch.tensor(-1, device=device)  # first step with a NaN/inf loss


def check_finite():
    # the losses are averaged over ranks, so every rank takes the same branch
    bad = int(first_bad)
    if bad >= 0:
        if master:
            last = dcp_checkpoints()[-1] if fsdp and dcp_checkpoints() else ckpt_path
            print(f"error: train loss is NaN or inf at step {bad}; stopped. The last good checkpoint is {last}: "
                  f"lower the learning rates and run again with --resume", file=sys.stderr)
        sys.exit(1)


while True:  # `step` optimiser steps are done
    # the host waits for the device only here, on log and checkpoint steps: dt is the mean since the last wait
    syncing = step > start and (step % log_interval == 0 or step % eval_interval == 0 or step == max_iters)
    saving = step > start and (step == max_iters or (ckpt_every and step % ckpt_every == 0)
                               or (ckpt_minutes and minutes_due()))
    if syncing or saving:
        train_loss, dt = loss_sum.item(), (time.time() - t_window) / (step - window_start)
        t_train += dt * (step - window_start)
        check_finite()  # never log a NaN as a loss, nor checkpoint spoilt weights
    record = dict(type="step", step=step, tokens=step * total_batch_tokens,
                  flops=step * total_batch_tokens * flops_per_token)
    if syncing:  # the steps taken since the last log
        tps = total_batch_tokens / dt
        record.update(train_loss=train_loss, lr=optims[0].param_groups[0]["lr"], dt=dt, tokens_per_s=tps,
                      mfu=flops_per_token * tps / (peak * world) if peak else None)
    # a resumed run redoes the steps logged after its checkpoint exactly: their lines are there already
    evaluating = (step % eval_interval == 0 or step == max_iters) and step > last_logged
    if evaluating:
        with autocast:
            record["test_loss"], record["test_bpb"] = evaluate(model, val_data, T, batch_size, eval_tokens, token_bytes,
                                                               device, rank, world)
        maybe_die("eval", step)
        log(f"step {step}: test loss {record['test_loss']:.4f}, {record['test_bpb']:.4f} bits/byte")
    if (evaluating or step % log_interval == 0) and step > last_logged:
        t0 = time.time()
        write_log(record)
        t_host += time.time() - t0
    if saving:
        save_checkpoint(step)
        if ddp:
            dist.barrier()
        t_ckpt = time.time()
    if step > start and step % log_interval == 0:
        eta = (time.time() - t_start) / (step - start) * (max_iters - step)
        log(f"step {step}/{max_iters} | loss {train_loss:.4f} | {total_batch_tokens / dt:,.0f} tok/s | "
            f"lr x{lr_frac(step - 1):.3f} | ETA {eta / 60:.1f} min")
    if step == max_iters:
        if t_train:
            log(f"data loading and log writing: {100 * t_host / t_train:.2f}% of the training steps' time")
        break

    if step == start or syncing or saving:
        t_window, window_start = time.time(), step
    for opt in optims:
        for group in opt.param_groups:
            group["lr"] = group["base_lr"] * lr_frac(step)
    loss_sum = torch.zeros((), device=device)
    t0 = time.time()
    batches = get_batch(step)
    t_host += time.time() - t0
    for i, (x, y) in enumerate(batches):  # gradients reduced once per step, in the last micro-step
        if fsdp:
            model.set_requires_gradient_sync(i == grad_accum - 1)
        elif ddp:
            train_model.require_backward_grad_sync = i == grad_accum - 1
        with autocast:
            _, loss = train_model(x, y)
        scaler.scale(loss / grad_accum).backward()  # fp16: scaled up so that small gradients survive
        loss_sum += loss.detach() / grad_accum
    if FAULT == f"inf_grad:{step}":
        for p in model.parameters():
            p.grad.fill_(math.inf)
    if ddp:
        dist.all_reduce(loss_sum, op=dist.ReduceOp.AVG)
    first_bad = torch.where((first_bad < 0) & ~loss_sum.isfinite(), step + 1, first_bad)  # no wait for the device
    if grad_clip:
        for opt in optims:
            scaler.unscale_(opt)  # clip the true gradients
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    for opt in optims:
        scaler.step(opt)  # fp16: skipped, and the scale lowered, if a gradient is inf or NaN
    scaler.update()
    model.zero_grad(set_to_none=True)
    step += 1

if ddp:
    dist.destroy_process_group()

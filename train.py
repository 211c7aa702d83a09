"""
Train a GPT whose attention is chosen by --attn; log test loss against tokens and FLOPs.

    python train.py                              # the CPU preset, embedded Shakespeare, minutes
    python train.py --attn=lrkv --max_iters=300  # any field below as --key=value
    torchrun --standalone --nproc_per_node=4 train.py config/512m_8k.py --attn=lrkv  # the figure

Config files (config/*.py) assign the fields below and --key=value overrides them (configurator.py);
`python train.py --help` lists them. A run writes out_dir/run_name/log.jsonl and a checkpoint
(checkpoint.py); killed at any moment, it is finished by the same command with --resume.
"""
import datetime
import functools
import math
import os
import sys
import time
from dataclasses import asdict

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

import checkpoint as ckpt
import configurator
import flops
import muon
import track
from common import (autocast, device_memory, device_name, fail, git_commit, native_bf16,
                    resolve_device, resolve_dtype)
from model import GPT, PRESETS, GPTConfig, preset as model_preset
from recall import MQAR
from text import Text
from tokenizer import get_tokenizer

# -----------------------------------------------------------------------------
# run
out_dir = "out"  # runs go to out_dir/run_name/
run_name = ""  # default: {preset}_{attn}_s{seed}; not --run, torchrun's for its --run_path
resume = False  # continue out_dir/run_name from its checkpoint (or from step 0 if it has none)
seed = 0  # initialisation and batch order
check = False  # check the flags, shape and memory, then exit, writing nothing (reproduce.sh does)
# model: a preset's shape (model.PRESETS), any field overridden
preset = "cpu"  # the shape, from model.PRESETS; the fields below override it
attn = "mha"  # the KV design: mha, gqa, mqa, mla or lrkv
n_layer = n_head = n_embd = block_size = vocab_size = None  # None: the preset's (vocab: data's)
n_kv_head = lrkv_rank = mla_kv_rank = mla_rope_dim = mla_q_rank = None  # None: preset's, model's
mla_deepseek = None  # MLA with DeepSeek's widths (d_n = d_h) and a learnable kv_norm weight
lrkv_factored = None  # LRKV's keys RoPE(K_s) + R B_hᵀ, not RoPE(K_s + R B_hᵀ): exact, absorbed B_h
window = None  # attend to the last `window` tokens only (sliding window, any design); None/0 = all
attn_scale = None  # times the QK-normed designs' softmax scale 1/√d_h (cpu preset 2, paper's 1)
mlp_hidden = None  # the MLP's width; None = 4·n_embd
k_eq_v = None  # keys equal to values: one projection and one cached tensor (MHA, GQA, MQA)
kv_share = None  # layers that share one K/V (cross-layer attention): each group's first makes it
match_params = False  # size the MLP to standard MHA's parameter count (flops.match_params)
# data
data_dir = "data"  # prepared datasets live in data_dir/<dataset>_<tokenizer>/
dataset = "shakespeare"  # shakespeare (embedded), fineweb, your own (prepare.py), mqar (recall.py)
mqar_pairs = [16]  # mqar: pairs a sequence (block_size long); several: equal shares, scored apart
mqar_alpha = 0.01  # mqar: how far queries sit from the pairs, a power law (small: near)
mqar_examples = 1024  # mqar: the fixed val and test sets; the learning curve reads a quarter
tokenizer = "byte"  # byte for CPU runs, gpt2 for real ones
eval_tokens = 65536  # the learning curve's test tokens; the last step scores all of val and test
# batch and length
batch_size = 16  # sequences per rank per micro-step
total_batch_tokens = 16 * 256  # global tokens per optimiser step, fixed whatever the world size
train_tokens = 600 * 16 * 256  # the run's length
max_iters = 0  # optimiser steps; 0: train_tokens / total_batch_tokens, rounded up
warmup_iters = 30  # steps of linear learning-rate warm-up
schedule = "cosine"  # after warm-up: cosine (to min_lr_frac at max_iters) or constant
min_lr_frac = 0.0  # cosine decays to this fraction of each learning rate
stop_acc = 0.0  # stop when the curve's held-out accuracy reaches this (task.solved); 0: off
# optimiser: the paper's Muon for hidden matrices and AdamW for the rest (muon.py), or AdamW alone
optimizer = "muon"  # muon or adamw
muon_dtype = "auto"  # Newton-Schulz: auto = bf16 on GPUs (the paper's), fp32 on CPUs; bf16, fp32
matrix_lr = muon.MATRIX_LR  # Muon, every hidden weight matrix
embed_lr = muon.EMBED_LR  # AdamW, token embedding
head_lr = muon.HEAD_LR  # AdamW, output head
adamw_lr = 3e-3  # --optimizer=adamw: every parameter
betas = muon.BETAS  # AdamW
weight_decay = muon.WEIGHT_DECAY  # decoupled, on every matrix but the embedding
grad_clip = 1.0  # global gradient-norm clip (0: off)
# logging and checkpoints
eval_interval = 50  # steps between test-loss evaluations (and the last step)
log_interval = 10  # steps between log lines (and eval steps)
ckpt_interval = None  # steps between checkpoints (None: eval_interval; 0: off), and one at the end
ckpt_minutes = 0.0  # also a checkpoint when this many minutes passed since the last one (0: off)
tracker = "none"  # none, trackio or wandb: also send the config and every log line there (track.py)
tracker_project = "nanokv"  # the tracker's project; the tracked run is named run_name
# system
device = "auto"  # auto: cuda:LOCAL_RANK if available, else cpu; or cpu, cuda, cuda:N, mps
compile = "auto"  # auto: on for cuda
dtype = "auto"  # autocast: auto = bf16 on CUDA if native, else fp16 (GradScaler); CPU fp32
fsdp = False  # shard weights, gradients and optimiser state across ranks (FSDP2), not DDP's copies
activation_checkpointing = False  # recompute each block in backward: less memory, ~1/3 more compute
memory_limit_gb = 0.0  # refuse a run whose memory per rank would exceed this (0: the GPU's or RAM)
# -----------------------------------------------------------------------------
config_keys = configurator.configure(__file__, globals(), sys.argv[1:], __doc__)
# counts the run divides by or counts to (below: a crash or a run that never ends), and names
configurator.check(globals(), least=dict(batch_size=1, total_batch_tokens=1, train_tokens=1,
                                         max_iters=0, eval_interval=1, log_interval=1),
                   choices=dict(schedule=("cosine", "constant"), optimizer=("muon", "adamw")))
max_iters = max_iters or -(-train_tokens // total_batch_tokens)
run_name = run_name or f"{preset}_{attn}_s{seed}"
run_dir = os.path.join(out_dir, run_name)
track.check(tracker)  # a missing package is said now, before anything is written
# the run's configuration, as the checkpoint and the log's header save it
train_config = {k: globals()[k] for k in config_keys}

# distributed (torchrun sets RANK): NCCL on GPUs, gloo on the CPU
ddp = "RANK" in os.environ
rank, local_rank, world = (int(os.environ.get(k, d))
                           for k, d in (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1)))
master = rank == 0
device = resolve_device(device, local_rank, world)
cuda = device.startswith("cuda")
if ddp:
    if cuda:
        torch.cuda.set_device(device)
    # rank 0 writes checkpoints while the others wait at a barrier: an hour, not NCCL's 10 minutes
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(hours=1))
if fsdp and not ddp:
    fail("--fsdp shards the model across ranks: launch with torchrun --nproc_per_node=N (N >= 2), "
         "or drop it")
log = print if master else (lambda *a, **k: None)
warn = lambda msg: log(f"warning: {msg}", file=sys.stderr)  # noqa: E731

# precision: autocast to bf16 or fp16 (fp16 with a loss scaler, whose range it needs); TF32 on GPUs
dtype = resolve_dtype(dtype, device)
if fsdp and dtype == "fp16":
    fail("--fsdp trains in bf16 or fp32 (fp16's loss scaler is not sharded here); "
         "pass --dtype=bf16 or --dtype=fp32")
compile = cuda if compile == "auto" else compile
if cuda:
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
amp = autocast(device, dtype)
scaler = torch.amp.GradScaler(device.partition(":")[0], enabled=dtype == "fp16")  # fp16 only

# the task, chosen here and nowhere else: recall examples made from seeds (recall.py), or a
# prepared text (text.py), each saying what it needs through the same face; the model's shape
Task = MQAR if dataset == "mqar" else Text
try:
    tok = get_tokenizer(tokenizer)
    overrides = {k: globals()[k] for k in asdict(GPTConfig())
                 if k in config_keys and globals()[k] is not None}
    # a text's vocabulary: its tokenizer's, padded for fast matmuls; a task's own: the preset's
    if Task.tokenized or "vocab_size" not in PRESETS.get(preset, {}):
        overrides.setdefault("vocab_size", math.ceil(tok.vocab_size / 64) * 64)
    model_config = model_preset(preset, **overrides)  # TypeError: a model field of another type
    flops.accounting(model_config)  # a design flops.py has no formulas for is refused now
except (ValueError, TypeError) as e:
    fail(str(e))
try:
    if match_params and mlp_hidden is not None:
        fail("--match_params chooses mlp_hidden itself: pass one of the two")
    model_config = flops.match_params(model_config) if match_params else model_config
    Task.check(train_config, model_config, tok)
    ns_dtype = muon.newton_schulz_dtype(muon_dtype, native_bf16(device))
except ValueError as e:
    fail(str(e))
if stop_acc and not hasattr(Task, "solved"):
    fail(f"--stop_acc: {dataset} has no solve rule to stop at; drop it")
T = model_config.block_size
if total_batch_tokens % (batch_size * T * world):
    fail(f"total_batch_tokens={total_batch_tokens} must be a multiple of batch_size·block_size·"
         f"ranks = {batch_size}·{T}·{world}; change --batch_size or --total_batch_tokens")
grad_accum = total_batch_tokens // (batch_size * T * world)
refusal = flops.memory_refusal(model_config, batch_size, world, fsdp, activation_checkpointing,
                               memory_limit_gb * 2**30 or device_memory(device))
if refusal:  # now, rather than out of memory after minutes of building and compiling
    fail(refusal)
if check:
    sys.exit(0)

# the task's data: rank 0 prepares what must be prepared while the others wait
if master:
    Task.prepare(train_config)
if ddp:
    dist.barrier()
try:
    task = Task.from_config(train_config, model_config, tok, device, rank, world)
except (FileNotFoundError, ValueError) as e:
    fail(str(e))
seen = max_iters * total_batch_tokens / task.n_train
if seen > 1:
    warn(f"{max_iters} steps x {total_batch_tokens} tokens is {seen:.1f} times the "
         f"{task.n_train:,} training tokens of {dataset}: the run will see its data more than once")
if warmup_iters >= max_iters:
    warn(f"warmup_iters={warmup_iters} >= max_iters={max_iters}: the run never leaves warm-up")


def get_batch(step):
    # this rank's grad_accum micro-batches of the step's global batch: a function of (seed, step)
    mine = slice(rank * batch_size * grad_accum, (rank + 1) * batch_size * grad_accum)
    xy = torch.stack(task.batch(step, seed, batch_size * grad_accum * world, mine))  # (2, A·B, T)
    xy = xy.view(2, grad_accum, batch_size, T)  # A = grad_accum micro-batches of B
    xy = xy.pin_memory().to(device, non_blocking=True) if cuda else xy  # overlaps the GPU's work
    return list(zip(xy[0], xy[1]))


# model init: built on its device, so no rank makes a full copy in host RAM first
torch.manual_seed(seed)
with torch.device(device):
    model = GPT(model_config)
if activation_checkpointing:  # each block keeps only its input; backward recomputes the rest
    for block in model.h:
        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)
if fsdp:  # FSDP2 (imported here: DTensor's import slows every start): each block, then the rest,
    # as DTensors sharded on dim 0, gathered to compute; bf16 as DDP's autocast: a block's weights
    # gathered in bf16, its fp32 input left alone; embedding, head, residual stream, reductions fp32
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    block_mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if dtype == "bf16" else None,
                                    reduce_dtype=torch.float32, cast_forward_inputs=False)
    for block in model.h:
        fully_shard(block, mp_policy=block_mp)
    fully_shard(model, mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.float32))

# optimizer: the paper's Muon + AdamW, or AdamW for everything
optims = (muon.optimizers(model, ns_dtype, matrix_lr, embed_lr, head_lr, weight_decay, betas)
          if optimizer == "muon" else muon.adamw_only(model, adamw_lr, weight_decay, betas))
base_lrs = [[g["lr"] for g in o.param_groups] for o in optims]  # this run's, not a checkpoint's


def lr_frac(step):
    # linear warm-up, then cosine to min_lr_frac, or constant: a run that stops when it has solved
    # (stop_acc) learns at the same rate whenever that comes, none decayed to zero before the cap
    if step < warmup_iters:
        return (step + 1) / warmup_iters
    if schedule == "constant":
        return 1.0
    progress = (step - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr_frac + (1 - min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


# resume: the last checkpoint's weights, optimiser, scaler and RNG states, and its step; the steps
# a killed run logged after it are redone, not logged again (last_logged); one that stopped early
# (stop_acc) stops there again, even where the kill came after its score line and before its save
log_path = os.path.join(run_dir, "log.jsonl")
start, last_logged, stopped_at = 0, -1, -1
if resume:
    start, last_logged, stopped_at = ckpt.resume(run_dir, fsdp, model, optims, scaler,
                                                 asdict(model_config), device, train_config, master)
elif master and os.path.exists(log_path):
    fail(f"{run_dir} already holds a run; pass --resume to continue it, or another --run_name")
if ddp:  # every rank must agree on which steps evaluate, and where the run ends
    t = torch.tensor([last_logged, stopped_at], device=device)
    dist.broadcast(t, 0)
    last_logged, stopped_at = map(int, t)
if start in (max_iters, stopped_at):
    log(f"{run_name}: at step {start}, " + (f"solved (stop_acc={stop_acc})" if start == stopped_at
        else "max_iters (a larger --max_iters trains on)") + "; nothing to do")
    sys.exit(0)

# compile the model, and wrap it in DDP (gradients averaged in backward) unless FSDP2 shards it
train_model = torch.compile(model) if compile else model
# the gradients live in DDP's buckets; buffers are never synced (the RoPE tables are fixed)
if ddp and not fsdp:
    train_model = DDP(train_model, device_ids=[local_rank] if cuda else None,
                      gradient_as_bucket_view=True, broadcast_buffers=False)

# the log's header: the run's whole configuration, its accounting and where it ran
hardware = device_name(device)
run_config = {**train_config, **asdict(model_config)}  # everything that says what this run is
flops_per_token = flops.train_flops_per_token(model_config)
peak = flops.peak_flops(hardware) if cuda else None
if master:
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as e:
        fail(f"--out_dir={out_dir}: {e}")
    ckpt.append_log(log_path, dict(
        type="header", run=run_name, attn=model_config.attn, resumed=resume, start_step=start,
        config={**run_config, "run": run_name}, **flops.accounting(model_config),
        tokens_per_step=total_batch_tokens, world_size=world, git=git_commit(),
        device=f"{world}x {hardware}", threads=torch.get_num_threads(), torch=torch.__version__,
        dtype=dtype, held_out=task.held_out, time=time.strftime("%Y-%m-%d %H:%M:%S")))
tracked = (track.start(tracker, tracker_project, run_name, run_dir, run_config, resume)
           if master else None)
log(f"{run_name}: {model_config.attn}, {flops.params(model_config) / 1e6:.2f}M params, "
    f"{flops_per_token / 1e6:.2f} MFLOP/token, {total_batch_tokens} tokens/step ({world} rank(s) x "
    f"{grad_accum} micro-steps x {batch_size}x{T}), {max_iters} steps on {hardware}")


# -----------------------------------------------------------------------------
# training loop
ckpt_every = eval_interval if ckpt_interval is None else ckpt_interval
t_start = t_ckpt = time.time()
step = start
# first_bad: the first step whose loss is NaN/inf
loss_sum, first_bad = torch.zeros((), device=device), torch.tensor(-1, device=device)
while True:  # `step` optimiser steps are done
    # once in a while: wait for the device (only here), log, evaluate, checkpoint
    last = step in (max_iters, stopped_at)
    logging = step > start and (step % log_interval == 0 or step % eval_interval == 0 or last)
    saving = step > start and (last or bool(ckpt_every and step % ckpt_every == 0))
    if ckpt_minutes and step > start:  # rank 0's clock decides, so every rank takes the same branch
        due = torch.tensor(float(time.time() - t_ckpt >= 60 * ckpt_minutes), device=device)
        if ddp:
            dist.broadcast(due, 0)
        saving = saving or bool(due)
    record = dict(type="step", step=step, tokens=step * total_batch_tokens,
                  flops=step * total_batch_tokens * flops_per_token)
    if logging or saving:  # dt: the mean since the last wait
        train_loss, dt = loss_sum.item(), (time.time() - t_window) / (step - window_start)
        if int(first_bad) >= 0:  # the loss is averaged over ranks, so every rank stops here
            log(f"error: train loss is NaN or inf at step {int(first_bad)}; stopped. The last "
                f"good checkpoint is {ckpt.latest(run_dir, fsdp)}: lower the learning rates and "
                "run again with --resume", file=sys.stderr)
            sys.exit(1)
    if logging:  # train_loss and lr are this step's
        tps = total_batch_tokens / dt
        record.update(train_loss=train_loss, lr=optims[0].param_groups[0]["lr"], dt=dt,
                      tokens_per_s=tps,
                      mfu=flops_per_token * tps / (peak * world) if peak else None)
    evaluating = (step % eval_interval == 0 or last) and step > last_logged  # not redone on resume
    if evaluating:
        with amp:
            curve = task.score(model, "test", task.curve_part, batch_size)
        record.update({f"test_{k}": v for k, v in curve.items()})
        log(f"step {step}: test loss {record['test_loss']:.4f}, "
            f"{task.metric} {record[f'test_{task.metric}']:.4f}")
        # solved: this step is the run's last, scored, checkpointed and marked in the log
        if stop_acc and not last and task.solved(curve, stop_acc):
            last = saving = True
            stopped_at = step
    score = None
    if evaluating and last:  # the run's result: every example of both held-out splits
        score = dict(type="score", step=step, **({"stopped": True} if step == stopped_at else {}))
        with amp:
            whole = {s: task.score(model, s, None, batch_size) for s in ("val", "test")}
        score.update({f"{s}_{k}": v for s in whole for k, v in whole[s].items()})
        log(f"step {step}: every held-out {task.unit}: " + "; ".join(
            f"{s} loss {score[f'{s}_loss']:.4f}, {task.metric} {score[f'{s}_{task.metric}']:.4f}"
            for s in ("val", "test")))
    if master and (evaluating or step % log_interval == 0) and step > last_logged:
        if score:  # first: a kill before the step line redoes the step, and its score with it
            ckpt.append_log(log_path, score)
        ckpt.append_log(log_path, record)
        track.log(tracked, record, score)  # one tracker line a step, the score's numbers in it
    if saving:
        rng = dict(torch=torch.get_rng_state(),
                   cuda=torch.cuda.get_rng_state(device) if cuda else None)
        ckpt.save(run_dir, step, model, optims, dict(scaler=scaler.state_dict(), rng=rng,
                  model_config=asdict(model_config), train_config=train_config), fsdp, master)
        if ddp:
            dist.barrier()
        t_ckpt = time.time()
    if step > start and step % log_interval == 0:
        eta = (time.time() - t_start) / (step - start) * (max_iters - step)
        log(f"step {step}/{max_iters} | loss {train_loss:.4f} | {tps:,.0f} tok/s | "
            f"lr x{lr_frac(step - 1):.3f} | ETA {eta / 60:.1f} min")
    if last:
        break

    # one optimiser step: grad_accum micro-steps on this rank; DDP reduces the gradients in the last
    # one, FSDP2 reduce-scatters every micro-step's (as torchtitan), so no rank holds them whole
    if step == start or logging or saving:
        t_window, window_start = time.time(), step
    for opt, lrs in zip(optims, base_lrs):
        for group, lr in zip(opt.param_groups, lrs):
            group["lr"] = lr * lr_frac(step)
    loss_sum = torch.zeros((), device=device)
    for i, (x, y) in enumerate(get_batch(step)):
        if ddp and not fsdp:
            train_model.require_backward_grad_sync = i == grad_accum - 1
        with amp:
            _, loss = train_model(x, y)
        scaler.scale(loss / grad_accum).backward()  # fp16: scaled up so small gradients survive
        loss_sum += loss.detach() / grad_accum
    if ddp:
        dist.all_reduce(loss_sum, op=dist.ReduceOp.AVG)
    # on the device: no wait here
    first_bad = torch.where((first_bad < 0) & ~loss_sum.isfinite(), step + 1, first_bad)
    if grad_clip:
        for opt in optims:
            scaler.unscale_(opt)  # clip the true gradients
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    for opt in optims:
        scaler.step(opt)  # fp16: skipped, and the scale lowered, if a gradient is inf or NaN
    scaler.update()
    model.zero_grad(set_to_none=True)
    step += 1

if tracked is not None:
    tracked.finish()
# free DDP's reducer, which holds the process group, while the interpreter is whole; then the group
if ddp:
    del train_model
    dist.destroy_process_group()

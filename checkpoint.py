"""
Checkpoints and the run log: train.py saves and resumes with them, eval.py loads a model.

A run folder out_dir/RUN/ holds log.jsonl (a header line, then a line per log step) and one
checkpoint, of either format:
    ckpt.pt       one process or DDP: rank 0 writes everything in one file
    ckpt_STEP/    --fsdp: each rank writes its shards (torch.distributed.checkpoint), then rank 0
                  writes meta.pt, last: a folder without it is a write that was cut
Both hold the same fields: step, model_config, train_config, scaler, rng, model, optims (under
--fsdp the last two are the shards). Every write goes to a temporary name and is renamed, so a kill
at any moment leaves the previous checkpoint whole.
"""
import json
import os
import re
import shutil
import sys
from dataclasses import asdict

import torch
import torch.distributed as dist

from common import DESIGNS, fail
from model import GPT, GPTConfig


def sharded(run_dir):
    """The run's complete ckpt_STEP/ folders, oldest first."""
    done = [d for d in os.listdir(run_dir) if re.fullmatch(r"ckpt_\d+", d)
            and os.path.exists(os.path.join(run_dir, d, "meta.pt"))] if os.path.isdir(run_dir) else []
    return [os.path.join(run_dir, d) for d in sorted(done, key=lambda d: int(d[5:]))]


def latest(run_dir, fsdp):
    """The checkpoint a resume reads, or None; refuses one of the other format."""
    file, folders = os.path.join(run_dir, "ckpt.pt"), sharded(run_dir)
    if fsdp and os.path.exists(file):
        fail(f"{file} is a DDP checkpoint; resume this run without --fsdp (or start a new --run_name)")
    if not fsdp and folders:
        fail(f"{folders[-1]} is a sharded --fsdp checkpoint; resume this run with --fsdp")
    return (folders[-1] if folders else None) if fsdp else (file if os.path.exists(file) else None)


def sharded_state(model, optims):
    # each rank's shards of the weights and of each optimiser's state, one optimiser at a time (DCP
    # refuses several at once when one has an empty group, as AdamW's gains without MLA)
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    return dict(model=get_model_state_dict(model),
                **{f"optim{i}": get_optimizer_state_dict(model, o) for i, o in enumerate(optims)})


def save(run_dir, step, model, optims, meta, fsdp, master):
    """Every rank calls this. meta: the fields beside the weights (step, configs, scaler, rng)."""
    meta = dict(meta, step=step)
    if fsdp:
        import torch.distributed.checkpoint as dcp  # here: DCP's import (DTensor's) slows every start
        folder = os.path.join(run_dir, f"ckpt_{step}")
        if master and os.path.exists(folder):
            shutil.rmtree(folder)  # a cut write of this step
        dist.barrier()
        dcp.save(sharded_state(model, optims), checkpoint_id=folder)  # returns once every rank's shards are written
        if master:
            torch.save(meta, os.path.join(folder, "meta.pt.tmp"))
            os.replace(os.path.join(folder, "meta.pt.tmp"), os.path.join(folder, "meta.pt"))  # now it counts
            for d in os.listdir(run_dir):  # older ones, and any cut write
                if re.fullmatch(r"ckpt_\d+", d) and d != f"ckpt_{step}":
                    shutil.rmtree(os.path.join(run_dir, d))
    elif master:
        tmp = os.path.join(run_dir, "ckpt.pt.tmp")
        torch.save(dict(meta, model=model.state_dict(), optims=[o.state_dict() for o in optims]), tmp)
        os.replace(tmp, os.path.join(run_dir, "ckpt.pt"))


def read(path):
    """A checkpoint's fields, or a one-line error. A ckpt.pt is memory-mapped, so its weights and
    optimiser state (often twice the weights) are read only where they are used; a ckpt_STEP/
    folder gives its meta.pt, the shards staying on disk for load_state."""
    if not os.path.exists(path):
        fail(f"no checkpoint at {path}; train one with `python train.py`")
    try:
        if os.path.isdir(path):
            return torch.load(os.path.join(path, "meta.pt"), map_location="cpu", weights_only=False)
        return torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception as e:
        fail(f"checkpoint {path} is unreadable ({type(e).__name__}): it is truncated or not a nanoKV "
             f"checkpoint; restore it or start a new --run_name")


def load_state(path, ckpt, model, optims=()):
    """The weights (and optimisers' states) of the checkpoint read(path) gave into model and optims,
    in place. A sharded one is read by each rank for its own shards, resharded if the number of
    ranks changed; by one process for all of them."""
    if os.path.isdir(path):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict
        state = sharded_state(model, optims) if optims else {"model": model.state_dict()}
        dcp.load(state, checkpoint_id=path)
        if not optims:  # one process: a plain module, its whole weights
            model.load_state_dict(state["model"])
            return
        set_model_state_dict(model, state["model"])
        for i, o in enumerate(optims):
            set_optimizer_state_dict(model, o, state[f"optim{i}"])
        return
    model.load_state_dict(ckpt["model"])
    for o, s in zip(optims, ckpt["optims"] if optims else []):
        o.load_state_dict(s)


def meta_of(ckpt):
    # every field but the weights and optimiser states: what a caller keeps for the rest of a run
    return {k: v for k, v in ckpt.items() if k not in ("model", "optims")}


def same_model(saved, config, what):
    # a resume must build the model the run was trained with. The saved fields are resolved as
    # GPTConfig resolves them, so a field added since the run was saved counts as its default;
    # other designs' settings build nothing here (an older MHA log says n_kv_head=H)
    saved = asdict(GPTConfig(**{k: v for k, v in saved.items() if k in config}))
    ignored = {f for d in DESIGNS.values() for f in d.settings} - set(DESIGNS[config["attn"]].settings)
    diff = [k for k, v in config.items() if k not in ignored and saved.get(k) != v]
    if diff:
        fail(f"{what} with another model config ({', '.join(diff)} differ); pass the same flags or "
             f"start a new --run_name")


def restore(run_dir, fsdp, model, optims, scaler, model_config, device):
    """--resume: the last checkpoint's weights, optimiser and scaler states and RNG, loaded in place;
    returns its other fields, or None when the run was killed before its first checkpoint."""
    if not os.path.isdir(run_dir):
        fail(f"no run in {run_dir} to resume; drop --resume to start it")
    path = latest(run_dir, fsdp)
    if path is None:
        return None
    ckpt = read(path)
    same_model(ckpt["model_config"], model_config, f"{path} was trained")
    load_state(path, ckpt, model, optims)
    scaler.load_state_dict(ckpt["scaler"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    if ckpt["rng"]["cuda"] is not None and device.startswith("cuda"):
        torch.cuda.set_rng_state(ckpt["rng"]["cuda"], device)
    return meta_of(ckpt)


def resume(run_dir, fsdp, model, optims, scaler, model_config, device, train_config, master):
    """--resume: (the checkpoint's step, the last step the log holds, the step a stop_acc run
    stopped at; -1: none, or not rank 0), with the checkpoint loaded in place. The steps a killed
    run logged after its checkpoint are redone exactly, so not logged again, unless another
    schedule makes them differ: then their lines are dropped. Killed before its first
    checkpoint, the run starts again from step 0."""
    meta = restore(run_dir, fsdp, model, optims, scaler, model_config, device)
    start, max_iters = meta["step"] if meta else 0, train_config["max_iters"]
    if start > max_iters:
        fail(f"{run_dir} is at step {start}, past --max_iters={max_iters}; pass a larger "
             f"--max_iters to train on, or start a new --run_name")
    if start == max_iters:  # nothing to train: the log is left as it is
        return start, -1, -1
    old = meta["train_config"] if meta else train_config
    changed = [k for k in train_config if (k in ("max_iters", "warmup_iters", "schedule", "min_lr_frac")
                                           or k.endswith("_lr")) and old.get(k) != train_config[k]]
    if changed and master:
        print("warning: resuming with another schedule (" + ", ".join(
            f"{k} {old.get(k)} -> {train_config[k]}" for k in changed) + f"): steps after {start} follow "
            "the new one", file=sys.stderr)
    log_path = os.path.join(run_dir, "log.jsonl")
    last, stopped = (logged(log_path, model_config, start if changed else None) if master
                     else (-1, -1))
    return start, last, stopped


def logged(log_path, model_config, drop_after=None):
    """(The last step a resumed run's log holds, the step its score line says it stopped at; -1:
    none), after checking its header is this model's; drop_after=N first drops the lines of steps
    after N."""
    if not os.path.exists(log_path):
        return -1, -1
    records = read_log(log_path)
    if records:
        same_model(records[0]["config"], model_config, f"{log_path} was written")
    if drop_after is not None:
        records = [r for r in records if r.get("step", -1) <= drop_after]
        write_log(log_path, records)
    return (max([r["step"] for r in records if r["type"] == "step"], default=-1),
            next((r["step"] for r in records if r.get("stopped")), -1))


def load_model(path, device="cpu"):
    """(model in eval mode on device, the checkpoint's other fields) from either format, or from a
    folder that eval.py --export wrote (export.read: a transformers folder)."""
    if os.path.isfile(os.path.join(path, "config.json")):
        from export import read as read_export
        try:
            return read_export(path, device)
        except ImportError:
            fail(f"{path} holds safetensors weights: pip install safetensors")
        except ValueError as e:
            fail(str(e))
    ckpt = read(path)
    model = GPT(GPTConfig(**ckpt["model_config"]))
    try:
        load_state(path, ckpt, model)
    except Exception as e:
        fail(f"{path} is not a readable nanoKV checkpoint ({type(e).__name__}: "
             f"{str(e).splitlines()[0][:120]}); restore it or train again")
    return model.to(device).eval(), meta_of(ckpt)


def read_log(path):
    """The records of a log's whole lines. A line cut by a kill is dropped from the file too
    (atomically), so the next line appended starts on a line of its own."""
    with open(path, encoding="utf-8") as f:
        whole, _, cut = f.read().rpartition("\n")
    records = [json.loads(line) for line in whole.split("\n")] if whole else []
    if cut:
        write_log(path, records)
    return records


def write_log(path, records):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    os.replace(path + ".tmp", path)


def append_log(path, record):
    with open(path, "a", encoding="utf-8") as f:  # one whole line per write
        f.write(json.dumps(record) + "\n")

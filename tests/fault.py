"""
Run train.py as a power cut would stop it: `python tests/fault.py train.py ARGS` with
NANOKV_FAULT=WHERE:N runs `python train.py ARGS` and SIGKILLs it
    log:N       half-way through writing step N's log line
    eval:N      in step N's evaluation
    ckpt:N      in step N's checkpoint write, after the new one is written and before it counts
or, with inf_grad:N, makes the gradients of the step from N to N+1 inf, as an fp16 overflow would;
or, with old_ddp:0, gives DDP torch 2.11's constructor, which refuses arguments added since.
The faults are patched in from here, so train.py carries no test hook.
"""
import json
import os
import runpy
import signal
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checkpoint  # noqa: E402
import recall  # noqa: E402
import text  # noqa: E402

where, n = os.environ["NANOKV_FAULT"].split(":")
n = int(n)


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def callers_step():
    # train.py's loop runs at its top level: the step it is at is a global of the first frame up
    # the stack that has train.py's globals (the task's score sits between it and evaluate)
    f = sys._getframe(1)
    while f is not None and "max_iters" not in f.f_globals:
        f = f.f_back
    return f.f_globals.get("step") if f is not None else None


if where == "log":
    append = checkpoint.append_log

    def append_log(path, record):
        if record.get("type") == "step" and record["step"] == n:
            line = json.dumps(record) + "\n"
            with open(path, "a") as f:
                f.write(line[:len(line) // 2])
            die()
        append(path, record)
    checkpoint.append_log = append_log
elif where == "eval":  # either task's held-out score: a text's evaluate, MQAR's answers
    def then_die(score):
        def score_then_die(*args, **kwargs):
            out = score(*args, **kwargs)
            if callers_step() == n:
                die()
            return out
        return score_then_die
    text.evaluate, recall.answers = then_die(text.evaluate), then_die(recall.answers)
elif where == "ckpt":
    save, replace = checkpoint.save, os.replace

    def save_and_die(run_dir, step, *args, **kwargs):
        def replace_or_die(src, dst):
            if os.path.basename(dst) in ("ckpt.pt", "meta.pt"):  # the rename that makes the new one count
                die()
            replace(src, dst)
        os.replace = replace_or_die if step == n else replace
        try:
            save(run_dir, step, *args, **kwargs)
        finally:
            os.replace = replace
    checkpoint.save = save_and_die
elif where == "inf_grad":
    unscale = torch.amp.GradScaler.unscale_

    def unscale_inf(self, optimizer):
        if callers_step() == n:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.fill_(float("inf"))
        return unscale(self, optimizer)
    torch.amp.GradScaler.unscale_ = unscale_inf
elif where == "old_ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP
    TORCH_2_11 = {"module", "device_ids", "output_device", "dim", "broadcast_buffers", "init_sync", "process_group",
                  "bucket_cap_mb", "find_unused_parameters", "check_reduction", "gradient_as_bucket_view",
                  "static_graph", "delay_all_reduce_named_params", "param_to_hook_all_reduce", "mixed_precision",
                  "device_mesh", "skip_all_reduce_unused_params", "bucket_cap_mb_list"}  # its DDP.__init__'s
    init = DDP.__init__

    def old_init(self, *args, **kwargs):
        new = sorted(set(kwargs) - TORCH_2_11)
        if new:
            raise TypeError(f"DistributedDataParallel.__init__() got an unexpected keyword argument '{new[0]}'")
        init(self, *args, **kwargs)
    DDP.__init__ = old_init
else:
    sys.exit(f"error: NANOKV_FAULT={where}:{n}: use log, eval, ckpt, inf_grad or old_ddp")

script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")

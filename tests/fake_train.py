"""A stand-in for train.py in gpu_deep.train_runs (tests/test_gpu_check.py): it writes a run's log
of 8 steps at once, the losses a function of the step alone, or with --run_name equal to
NANOKV_HANG_RUN, hangs, as a run stuck in a compile would."""
import json
import os
import sys
import time

flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
if flags["run_name"] == os.environ.get("NANOKV_HANG_RUN"):
    time.sleep(3600)
run = os.path.join(flags["out_dir"], flags["run_name"])
os.makedirs(run, exist_ok=True)
with open(os.path.join(run, "log.jsonl"), "w") as f:
    for step in range(1, 9):
        f.write(json.dumps(dict(type="step", step=step, train_loss=5 - 0.1 * step, dt=0.1)) + "\n")

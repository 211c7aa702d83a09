"""train.py's early stop (--stop_acc): a run that has solved its task stops at that eval step,
says so in its score line, and a kill anywhere around the stop resumes to the same stop; and the
constant schedule that such a run learns under."""
import json
import os
import signal
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULT = os.path.join(ROOT, "tests", "fault.py")
TINY = ["config/mqar.py", "--run_name=r", "--n_embd=32", "--block_size=64", "--mqar_pairs=8",
        "--vocab_size=64", "--batch_size=8", "--total_batch_tokens=512", "--max_iters=16",
        "--eval_interval=2", "--log_interval=1", "--mqar_examples=40", "--warmup_iters=2",
        "--schedule=constant", "--ckpt_interval=5"]


def train(out, *args, fault=None):
    launcher = [sys.executable] + ([FAULT] if fault else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", **({"NANOKV_FAULT": fault} if fault else {})}
    return subprocess.run([*launcher, "train.py", *TINY, f"--out_dir={out}", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def records(out):
    return [json.loads(line) for line in open(os.path.join(out, "r", "log.jsonl"))]


def steps(out):
    return [(r["step"], r["train_loss"], r.get("test_acc")) for r in records(out)
            if r["type"] == "step" and r["step"] > 0]


def test_a_solved_run_stops_and_a_kill_anywhere_resumes_to_the_same_stop(tmp_path):
    full = tmp_path / "full"
    assert train(full).returncode == 0
    curve = {r["step"]: r["test_acc"] for r in records(full)
             if "test_acc" in r and r["type"] == "step"}
    lrs = [r["lr"] for r in records(full) if r["type"] == "step" and r["step"] >= 2]
    assert len(set(lrs)) == 1 and lrs[0] > 0  # constant after warm-up, to the cap
    # the stop: the first eval past the first checkpoint (step 5) whose accuracy beats every one
    # before it, so that the run reaches it there and nowhere earlier
    stop = next(s for s in sorted(curve)
                if s > 5 and curve[s] > max(curve[t] for t in curve if t < s))
    at = f"--stop_acc={curve[stop]!r}"
    run = tmp_path / "stop"
    assert train(run, at).returncode == 0
    log = records(run)
    scores = [r for r in log if r["type"] == "score"]
    assert [(r["step"], r.get("stopped")) for r in scores] == [(stop, True)]
    assert max(r["step"] for r in log if r["type"] == "step") == stop
    assert steps(run) == [s for s in steps(full) if s[0] <= stop]  # the same run up to its stop
    assert torch.load(run / "r" / "ckpt.pt", weights_only=False)["step"] == stop
    # resumed once stopped: nothing to do, the log untouched
    text = (run / "r" / "log.jsonl").read_text()
    p = train(run, at, "--resume")
    assert p.returncode == 0 and "nothing to do" in p.stdout
    assert (run / "r" / "log.jsonl").read_text() == text
    # killed in the stop's score, half-way through its step line, or in its checkpoint's write
    for fault in (f"eval:{stop}", f"log:{stop}", f"ckpt:{stop}"):
        cut = tmp_path / fault.replace(":", "_")
        p = train(cut, at, fault=fault)
        assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
        assert train(cut, at, "--resume").returncode == 0
        assert steps(cut) == steps(run), fault
        assert {r["step"] for r in records(cut) if r.get("stopped")} == {stop}, fault
        assert torch.load(cut / "r" / "ckpt.pt", weights_only=False)["step"] == stop


def test_stop_and_schedule_refuse_what_they_cannot_do_in_one_line(tmp_path):
    for args, want in ((["--schedule=linear"], "error: --schedule='linear' is unknown"),
                       (["--dataset=shakespeare", "--stop_acc=0.9"], "error: --stop_acc:")):
        p = subprocess.run([sys.executable, "train.py", f"--out_dir={tmp_path}", "--max_iters=1",
                            *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and p.stderr.startswith(want), p.stderr
        assert p.stderr.count("\n") == 1, p.stderr

"""
A harness task that needs no download: which of four continuations of a held-out Shakespeare
passage is the real one. Writes tasks/shakespeare_mc.jsonl from the prepared test split (text no run
trains on or chooses anything by); tasks/shakespeare_mc.yaml tells lm-evaluation-harness how to read it. Chance is 25%.

    python tasks/shakespeare.py
    python eval.py out/reproduce/cpu_lrkv_s0/ckpt.pt --tasks=shakespeare_mc --include_path=tasks
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from prepare import load_split, prepare  # noqa: E402

N, CONTEXT, CHOICE = 200, 96, 24  # items; bytes of passage; bytes of each continuation

prepare("shakespeare", "byte", "data")
test = np.asarray(load_split("data/shakespeare_byte", "test"))
rng = np.random.default_rng(0)
starts = np.linspace(0, len(test) - CONTEXT - CHOICE, N + 3 * N).astype(int)  # evenly spaced, none overlapping
text = lambda a, n: bytes(t for t in test[a:a + n].tolist() if t < 256).decode("utf-8", errors="replace")  # eot: dropped
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "shakespeare_mc.jsonl"), "w") as f:
    for i in range(N):
        s = starts[4 * i]
        fakes = [text(starts[4 * i + k] + CONTEXT, CHOICE) for k in (1, 2, 3)]  # the continuations of other passages
        answer = int(rng.integers(4))
        choices = fakes[:answer] + [text(s + CONTEXT, CHOICE)] + fakes[answer:]
        f.write(json.dumps({"passage": text(s, CONTEXT), "choices": choices, "answer": answer}) + "\n")

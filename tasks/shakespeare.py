"""
Harness tasks that need no download, from held-out Shakespeare (the prepared test split: text no
run trains on or chooses anything by):

    shakespeare_mc   which of four continuations of a passage is the real one (chance is 25%)
    shakespeare_gen  the rest of the passage's line, generated greedily until its newline

`python tasks/shakespeare.py` writes their items, tasks/shakespeare_{mc,gen}.jsonl; the YAML files
tell lm-evaluation-harness how to read them, through load() below, from any working directory.

    python tasks/shakespeare.py
    python eval.py out/reproduce/cpu_lrkv_s0/ckpt.pt --tasks=shakespeare_mc,shakespeare_gen --include_path=tasks
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
N, CONTEXT, CHOICE = 200, 96, 24  # items; bytes of passage; bytes of each continuation
N_GEN, LINE = 100, 64  # generation items; the most bytes of a line's rest


def load(data_files, **_):
    """The harness's custom_dataset: the task's items, data_files relative to this folder, not to
    where the harness runs (its keyword arguments are the YAML's dataset_kwargs and metadata)."""
    import datasets
    return datasets.load_dataset("json", data_files={split: os.path.join(HERE, f) for split, f in data_files.items()})


def main():
    import numpy as np
    sys.path.insert(0, os.path.dirname(HERE))
    from prepare import load_split, prepare

    prepare("shakespeare", "byte", "data")
    test = np.asarray(load_split("data/shakespeare_byte", "test"))
    rng = np.random.default_rng(0)
    starts = np.linspace(0, len(test) - CONTEXT - CHOICE, N + 3 * N).astype(int)  # evenly spaced, none overlapping
    text = lambda a, n: bytes(t for t in test[a:a + n].tolist() if t < 256).decode("utf-8", errors="replace")  # eot: dropped
    with open(os.path.join(HERE, "shakespeare_mc.jsonl"), "w") as f:
        for i in range(N):
            s = starts[4 * i]
            fakes = [text(starts[4 * i + k] + CONTEXT, CHOICE) for k in (1, 2, 3)]  # the continuations of other passages
            answer = int(rng.integers(4))
            choices = fakes[:answer] + [text(s + CONTEXT, CHOICE)] + fakes[answer:]
            f.write(json.dumps({"passage": text(s, CONTEXT), "choices": choices, "answer": answer}) + "\n")
    # passages that end inside a line whose rest is there to generate: the first such start from
    # each of N_GEN evenly spaced ones
    with open(os.path.join(HERE, "shakespeare_gen.jsonl"), "w") as f:
        for s in np.linspace(0, len(test) - CONTEXT - LINE - 64, N_GEN).astype(int):
            while "\n" not in text(s + CONTEXT, LINE)[1:] or text(s + CONTEXT, 1) == "\n":
                s += 1
            rest = text(s + CONTEXT, LINE).split("\n")[0]
            f.write(json.dumps({"passage": text(s, CONTEXT), "rest": rest}) + "\n")


if __name__ == "__main__":
    main()

"""
Reading the logs train.py writes (<dir>/<run>/log.jsonl), and checking that a set of runs is one
experiment. What every mode of plot.py reads first; numpy only, never torch.
"""
import glob
import json
import math
import os
from collections import Counter

import numpy as np

from common import DESIGNS, design_keys, fail, warn

# one experiment: these match across all runs (and each design's own settings across its seeds)
SHAPE_KEYS = ["n_layer", "n_head", "n_embd", "block_size", "vocab_size", "attn_scale", "dataset",
              "tokenizer", "held_out", "max_iters", "total_batch_tokens", "optimizer", "matrix_lr",
              "embed_lr", "head_lr", "weight_decay", "warmup_iters", "min_lr_frac", "mqar_alpha",
              "mqar_examples"]


def load_runs(dirs):
    """The runs under dirs: each may be a run folder, a folder of runs, or a log file. A run that
    cannot be read is skipped with a warning; none that can be read, or no log at all: refused."""
    paths, seen = [], set()
    for d in dirs:
        if not os.path.exists(d):
            fail(f"no such file or folder: {d}")
        if os.path.isfile(d):
            found = [d]
        elif os.path.isfile(os.path.join(d, "log.jsonl")):
            found = [os.path.join(d, "log.jsonl")]
        else:
            found = sorted(glob.glob(os.path.join(d, "*", "log.jsonl")))
        for p in found:  # `plot.py out out/run1` must not count run1 twice
            if os.path.realpath(p) not in seen:
                seen.add(os.path.realpath(p))
                paths.append(p)
    if not paths:
        fail(f"no log.jsonl in {', '.join(dirs)} (looked for <dir>/log.jsonl and "
             f"<dir>/*/log.jsonl); make some with `python train.py`")
    runs, skipped = [], []
    for path in paths:
        try:
            runs.append(load_run(path))
        except (ValueError, OSError) as e:
            skipped.append(str(e))
    if not runs:
        fail(f"no usable run: {'; '.join(skipped)}")
    for msg in skipped:
        warn(f"skipping {msg}")
    return runs


def load_run(path):
    """One run's header and eval points as numpy arrays. Raises ValueError for a bad header."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    header, steps, bad, score = None, [], [], {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        if header is None:
            # without a header we cannot tell which design the run is, so the whole run is skipped
            if not isinstance(rec, dict) or rec.get("type") != "header":
                raise ValueError(f"{path}: line {i} is not a header line")
            header = rec
        elif isinstance(rec, dict) and rec.get("type") == "header":
            continue  # a resumed run appends another header; the first one describes the run
        elif isinstance(rec, dict) and rec.get("type") == "score":
            score = rec  # every held-out token, at the last step
        elif not (isinstance(rec, dict) and rec.get("type") == "step"
                  and isinstance(rec.get("step"), int) and isinstance(rec.get("tokens"), (int, float))):
            bad.append(i)  # e.g. the last line of a run that is still writing it
        else:
            # a resumed run logs again from its checkpoint: the newest copy of a step wins, and
            # steps that the interrupted segment logged past the checkpoint go with it
            while steps and steps[-1]["step"] >= rec["step"]:
                steps.pop()
            steps.append(rec)
    if header is None:
        raise ValueError(f"{path}: empty log, no header line")
    if not steps or score.get("step") != steps[-1]["step"]:
        score = {}  # a run trained on past its score (a larger --max_iters) has none yet
    attn = header.get("attn")
    if attn not in DESIGNS:  # e.g. a design that common.DESIGNS has no row for
        raise ValueError(f"{path}: header attn is {attn!r}, expected one of {', '.join(DESIGNS)}")
    if bad:
        more = " ..." if len(bad) > 5 else ""
        warn(f"{path}: skipped unreadable line(s) {', '.join(map(str, bad[:5]))}{more}")
    config = header.get("config") if isinstance(header.get("config"), dict) else {}
    # fields older logs lack, as their default then was (text runs carry the MQAR knobs, unused)
    config = {"lrkv_factored": False, "mqar_alpha": 0.01, "mqar_examples": 1024, "window": 0,
              "k_eq_v": False, "kv_share": 1, **config}
    if "mlp_hidden" not in config and isinstance(config.get("n_embd"), int):
        config["mlp_hidden"] = 4 * config["n_embd"]
    # the test text: logs from before the val/test split scored the opening of val.bin (Hamlet)
    config["held_out"] = json.dumps(header.get("held_out", "val.bin's first eval_tokens"))
    evals = [s for s in steps if isinstance(s.get("test_loss"), (int, float))]
    col = lambda key, dtype=float: np.array([s.get(key, math.nan) for s in evals], dtype=dtype)
    return {"path": path, "name": header.get("run") or os.path.basename(os.path.dirname(path)),
            "attn": attn, "header": header, "config": config, "step": col("step", np.int64),
            "tokens": col("tokens"), "flops": col("flops"), "loss": col("test_loss"), "acc": col("test_acc"),
            "evals": evals,  # the learning curve's records, whole: MQAR logs one accuracy per pair count
            "score": score}


def odd_runs(runs, sweep=False, lr=False, own_rates=False, free=()):
    """'name (how it differs)' for every run outside the experiment that most runs are: another
    shape, data, length, batch or optimiser setting than the largest group (but the Muon rate in a
    learning-rate sweep, or with each design at its own rate), or (unless a sweep of settings) other
    settings than most of its design (with own_rates, its Muon rate too)."""
    odd = set()  # ids: a run holds numpy arrays, so `in` on a list of runs would compare them

    def split(group, keys):
        key = lambda r: tuple(r["config"].get(k) for k in keys)
        common = Counter(map(key, group)).most_common(1)[0][0]
        for r in group:
            if key(r) != common:
                odd.add(id(r))
                how = [f"{k}={v} not {c}" for k, v, c in zip(keys, key(r), common) if v != c]
                yield f"{r['name']} ({', '.join(how)})"

    free = {*free, *(["matrix_lr"] if lr or own_rates else [])}  # what the experiment varies
    why = list(split(runs, [k for k in SHAPE_KEYS if k not in free]))
    for attn in DESIGNS if not sweep else []:
        group = [r for r in runs if r["attn"] == attn and id(r) not in odd]
        keys = design_keys(attn) + (("matrix_lr",) if own_rates else ())
        why += list(split(group, keys)) if group else []
    return why


def cache(header):
    """A run's KV-cache bytes per token, and their share of MHA's, as its header counts them."""
    kv, kv_mha = header.get("kv_bytes_per_token"), header.get("mha_kv_bytes_per_token")
    return {"kv": kv, "kv_pct": kv / kv_mha if kv is not None and kv_mha else None}

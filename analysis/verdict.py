"""
The verdict at a glance: one row per design, one column per experiment of docs/plan.md, each cell
re-computed from that experiment's committed logs and marked by its own table's Holm correction.

    python plot.py --verdict          # prints the table (README's Results holds it)

Each column is the family its experiment's plan fixed, so Holm runs within a column, never across
them. Never imports torch, as plot.py.
"""
import glob
import os

import numpy as np

from common import DESIGNS
from analysis.curves import deltas, summarize
from analysis.logs import load_runs
from analysis.recall import recall_cells, recall_rows
from analysis.stats import family, holm, paired_t, render, welch
from analysis.sweeps import budget_pairs, lr_sweep, sweep

RUNS = "docs/runs"
E4_SEEDS = 3  # plan.md, E4m: seeds a cell


def paired(runs, split):
    """Each design's paired Δ MHA in final loss on split, its family corrected: {attn: paired_t}."""
    out = {attn: paired_t(d) for attn, d in deltas(runs, split).items()}
    family(list(out.values()))
    return out


def interaction(runs, other):
    """E2: Δ MHA at 1,024 minus Δ MHA at 256 per design, Welch's t, one family."""
    here, away = deltas(runs), deltas(other)
    out = {a: welch(here[a], away[a]) for a in here if a in away}
    family(list(out.values()))
    return out


def cell(r, margin=True):
    """'+0.0073 [+0.0031, +0.0115] established': the estimate, its 95% interval and its mark."""
    if not r or r.get("lo") is None:
        return "-"
    tost = r.get("tost")
    mark = ("established" if r["established"] else
            "equivalent" if margin and tost is not None and tost < 0.05 else "not shown")
    return f"{r['diff']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}] {mark}"


def recall_column(path):
    """E4, once its whole grid is logged: per design, the mean over cells of its paired Δ MHA in test
    accuracy and how many of its cells are established behind or ahead (Holm over the grid)."""
    if not glob.glob(os.path.join(path, "*", "log.jsonl")):
        return {}
    every = recall_rows(recall_cells(load_runs([path])))
    cells, seeds = {(r["width"], r["kv_pairs"]) for r in every}, {r["n"] for r in every}
    if len(every) < len(DESIGNS) * len(cells) or seeds != {E4_SEEDS}:  # runs still coming in: no half table
        return {}
    rows = [r for r in every if r["attn"] != "mha"]
    out = {}
    for attn in DESIGNS:
        mine = [r for r in rows if r["attn"] == attn and r.get("diff") is not None]
        if mine:
            behind = sum(r["established"] and r["diff"] < 0 for r in mine)
            ahead = sum(r["established"] and r["diff"] > 0 for r in mine)
            out[attn] = (f"{np.mean([r['diff'] for r in mine]):+.3f} mean over {len(mine)} cells; "
                         f"behind in {behind}, ahead in {ahead} (established)")
    return out


def same_cache(path):
    """E5, once its logs exist: LRKV (r=7) against GQA (kv=2) at nearly the same cache, paired by
    seed; a family of one."""
    if not glob.glob(os.path.join(path, "*", "log.jsonl")):
        return None
    # the pair `plot.py docs/runs/e5 --pareto` tests, as it pairs settings at nearly equal cache
    r, = family(budget_pairs(sweep(load_runs([path]))))
    a, b = r["a"], r["b"]
    return (f"At the same cache (E5): {a['label']} with {a['setting']} ({a['kv_pct']:.1%} of MHA's) minus "
            f"{b['label']} with {b['setting']} ({b['kv_pct']:.1%}), {r['pairs']} seeds: {cell(r)} "
            f"(TOST p {r['tost']:.2g}).")


def verdict(root=RUNS):
    """The table as Markdown, and the note under it."""
    e1 = load_runs([os.path.join(root, "e1")])
    cache = {r["attn"]: r["kv_pct"] for r in summarize(e1)}
    test, val = paired(e1, "test"), paired(e1, "val")
    own = paired(load_runs([os.path.join(root, "e3b")]), "test")
    ctx = interaction(load_runs([os.path.join(root, "e2")]), e1)
    sweep = load_runs([os.path.join(root, "e3a")] + sorted(glob.glob(os.path.join(root, "e1", "cpu_*_s[0-2]"))))
    _, summary = lr_sweep(sweep)
    rate = {s["attn"]: s["rate"] for s in summary}
    recall = recall_column(os.path.join(root, "e4"))
    head = ["design", "KV cache, % of MHA", "E1: Δ MHA, paper's rate", "E1 on the validation plays",
            "E3b: Δ MHA, own rate", "E2: change at context 1,024", "E3a: Δ MHA per doubling of the rate",
            "E4: recall, Δ MHA accuracy"]
    body = [[DESIGNS[a].label, f"{100 * cache[a]:.0f}%", cell(test.get(a)), cell(val.get(a)), cell(own.get(a)),
             cell(ctx.get(a), margin=False), cell(rate.get(a), margin=False), recall.get(a, "pending")]
            for a in DESIGNS if a != "mha"]
    columns = {"E1": test, "E1 validation": val, "E3b": own, "E2": ctx, "E3a": rate}
    tests = [(f"{name} {DESIGNS[a].label}", r) for name, col in columns.items() for a, r in col.items()
             if r and r.get("p") is not None]
    across = holm([r["p"] for _, r in tests])
    drop = [f"{name} (Holm p {p:.2g})" for (name, r), p in zip(tests, across) if r["established"] and p >= 0.05]
    note = ("Δ: design minus MHA in final loss (nats per byte), mean over 12 seeds (E3a: 3), 95% interval; "
            "E2 and E3a give how Δ moves. Each column is one Holm family of its own (the plan's); "
            "established: Holm's p < 0.05; equivalent: two one-sided tests within ±0.008 nats; not shown: "
            "neither. E1 and E3b score the test plays, E1's validation column the same models on the "
            "validation plays. "
            + ("E4: Δ in final MQAR test accuracy (recall of a key's value), the mean over its cells "
               f"(d_model × pairs), {E4_SEEDS} seeds a cell, each design at the rate E4r chose on validation; "
               "behind and ahead count cells established, Holm over all of E4's cells. " if recall else "") +
            f"Corrected as one family of all {len(tests)} tests instead, {len(drop)} established marks would "
            f"drop: {', '.join(drop) or 'none'}.")
    e5 = same_cache(os.path.join(root, "e5"))
    return render(head, body) + (f"\n\n{e5}" if e5 else ""), note

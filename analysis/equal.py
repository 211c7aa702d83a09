"""
E8's comparison (plot.py --equal_cache): every way to cut the KV cache to a share of MHA's, set
beside that share's incumbent (GQA with 2 K/V heads at 50%, MQA at 25%) on the same seeds. Three
kinds of saving: narrow each token (GQA, MQA, MLA, LRKV), drop tokens (a sliding window), share
what is cached (K=V, kv_share). One family per incumbent, Holm within it (docs/plan.md, E8).
"""
import math

import matplotlib.pyplot as plt

from common import DESIGNS, warn
from analysis.stats import (MARGIN, RULE, family, final_losses, fmt, gap, gap_head, render,
                            seed_stats)
from analysis.sweeps import sweep, sweep_axes

KINDS = {"narrow": "o", "drop": "s", "share": "^"}  # the figure's marker of each kind
NEAR = 0.05  # a row joins the incumbent whose cache share is within 5 points of its own


def kind(attn, config):
    """How a setting saves cache: drop (a window), share (K=V, kv_share), narrow; None for MHA."""
    if config.get("window"):
        return "drop"
    if config.get("k_eq_v") or (config.get("kv_share") or 1) > 1:
        return "share"
    return None if attn == "mha" else "narrow"


def held_share(row):
    # the cache's share of MHA's at the full context T: a window holds min(T, window) of T tokens
    c = row["runs"][0]["config"]
    T, w = c["block_size"], c.get("window") or 0
    return row["kv_pct"] * (min(T, w) / T if w else 1)


def incumbent(row):
    # a family's reference, as it ships (no K=V, kv_share or window): MQA, or GQA with 2 K/V heads
    two = row["attn"] == "gqa" and row["runs"][0]["config"].get("n_kv_head") == 2
    return (row["attn"] == "mqa" or two) and row["kind"] == "narrow"


def families(runs):
    """(rows, fams, cut): every setting of the runs (analysis.sweeps.sweep) with its kind, cache
    share at full context and parameters; fams, one per incumbent present, each a list of rows:
    the incumbent first, then the other settings within NEAR of its share, each with its paired Δ
    to the incumbent at the final step and Holm over the family; cut, the seeds not read."""
    rows = sweep(runs)
    for r in rows:
        seeds = [x["config"].get("seed") for x in r["runs"]]
        if len(set(seeds)) < len(seeds):  # two experiments' runs of one setting: which to pair?
            raise ValueError(f"{', '.join(x['name'] for x in r['runs'])}: one setting with a seed "
                             "twice; give plot.py one experiment's runs of each setting")
        c = r["runs"][0]["config"]
        w = f" window {c['window']}" if c.get("window") else ""
        r.update(kind=kind(r["attn"], c), share=held_share(r),
                 name=f"{r['label']} {r['setting']}{w}", params=r["runs"][0]["header"].get("params"))
    incs = sorted((r for r in rows if incumbent(r) and r["share"] is not None),
                  key=lambda r: -r["share"])
    near = [sorted((r for r in rows if r is not inc and r["kind"] and r["share"] is not None
                    and not incumbent(r) and abs(r["share"] - inc["share"]) <= NEAR),
                   key=lambda r: (list(KINDS).index(r["kind"]), r["share"])) for inc in incs]
    # whole seeds only: a seed that some row of the families has not finished is read in none
    # (plan, E8), and drawn in no row either, so that every point stands on the same seeds
    every = [*incs, *(r for rs in near for r in rs)]
    seed = lambda x: x["config"].get("seed")
    done = [set(final_losses(r["runs"], r["step"])) for r in every]  # the seeds each row finished
    whole = set.intersection(*done) if done else set()
    out = {seed(x) for x in runs} - whole if every else set()
    if out and not whole:
        raise ValueError("no seed that every row of the families ran: nothing to pair")
    if out:
        lost = [r["name"] for r in rows if not {seed(x) for x in r["runs"]} & whole]
        warn(f"seed(s) {', '.join(map(str, sorted(out)))} not read: not run by every row"
             + (f"; not drawn, none of its seeds read: {', '.join(lost)}" if lost else ""))
        rows, fams, _ = families([x for x in runs if seed(x) in whole])
        return rows, fams, sorted(out)
    fams = [[inc, *family([{**r, **seed_stats(r["runs"], inc["runs"], r["step"])} for r in rs])]
            for inc, rs in zip(incs, near)]
    return rows, fams, []


def word(r):
    # the row's answer against its incumbent, as the plan reads it
    if r.get("established"):
        return "ahead" if r["diff"] < 0 else "behind"
    return "= equal" if r.get("tost") is not None and r["tost"] < 0.05 else "inconclusive"


def best(fam):
    # the family's best way: the row established ahead of the incumbent with the lowest mean Δ
    return min((r for r in fam[1:] if word(r) == "ahead"), key=lambda r: r["diff"], default=None)


def answer(fam):
    """The family's answer: its best row, or that none is better than the incumbent; and the
    number of rows Holm corrected over, so that a row missing from the family is seen."""
    inc, top = fam[0], best(fam)
    k, n = sum(r.get("p") is not None for r in fam[1:]), inc["n"]
    over = f" (Holm over {k} row{'s' * (k != 1)}, {n} seed{'s' * (n != 1)})"
    if top:
        return f"best at {inc['share']:.0%}: {top['name']} ({top['diff']:+.4f} nats)" + over
    equal = [r["name"] for r in fam[1:] if word(r) == "= equal"]
    return (f"at {inc['share']:.0%}: no way is better than {inc['name']}"
            + (f"; shown equal: {', '.join(equal)}" if equal else "") + over)


def draw(rows, fams=()):
    """Final test loss against cache bytes per token at full context (log scale), a marker per
    kind; a family's rows side by side about its largest cache, 7% of x apart, each labelled
    upright above its bar; a row in no family at its own bytes."""
    fig, ax = plt.subplots(figsize=(9, 6))
    pts = [r for r in rows if r["mean"] is not None and r["share"] is not None]
    at = {r["name"]: round(r["share"] * r["kv"] / r["kv_pct"]) for r in pts}  # a window's at T
    family_of = {x["name"]: i for i, f in enumerate(fams) for x in f}
    group = {n: family_of.get(n, n) for n in at}  # its family, else its own name
    xs = []
    for r in pts:
        same = sorted((n for n in at if group[n] == group[r["name"]]), key=lambda n: at[n])
        x = max(at[o] for o in same) * 1.07 ** (same.index(r["name"]) - (len(same) - 1) / 2)
        xs.append(x)
        d, sd = DESIGNS[r["attn"]], r["sd"] or 0
        ax.errorbar(x, r["mean"], yerr=sd, color=d.colour, capsize=3,
                    marker=KINDS.get(r["kind"], "D"), markersize=7, linestyle="none")
        ax.annotate(r["name"].replace("Standard ", ""), (x, r["mean"] + sd), xytext=(0, 4),
                    textcoords="offset points", fontsize=7, color=d.colour, rotation=90,
                    ha="center", va="bottom")
    for k, m in {**KINDS, "full (MHA)": "D"}.items():  # the legend: kinds, not designs
        ax.plot([], [], marker=m, color="grey", linestyle="none", label=k)
    ax.set_xscale("log", base=2)
    left, right = min(xs) / 1.1, max(xs) * 1.1
    ticks = [2 ** k for k in range(math.floor(math.log2(left)), math.ceil(math.log2(right)) + 1)]
    if not any(left <= t <= right for t in ticks):  # points between two powers of 2: show both
        left, right = ticks[0], ticks[-1]
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.set_xlim(left, right)
    lo = min(r["mean"] - (r["sd"] or 0) for r in pts)
    hi = max(r["mean"] + (r["sd"] or 0) for r in pts)
    span = (hi - lo) or 0.01  # one point, or all alike
    ax.set_ylim(lo - 0.05 * span, hi + 0.5 * span)  # the top third for the labels
    # legend "best": not over the labels' band where a corner is free
    return sweep_axes(fig, ax, "KV cache per token at full context (bytes, bf16; log scale)",
                      "Half and a quarter of the cache, every way", legend="best")


def equal_cache_mode(runs):
    """E8's figure, its table (one block per family), the answers, and the files' names."""
    rows, fams, cut = families(runs)
    head = ["family", "kind", "setting", "cache", "params", "seeds", "test loss",
            *gap_head("Δ incumbent"), "reads"]
    body = []
    for fam in fams:
        for r in fam:
            inc = r is fam[0]
            body.append([f"{fam[0]['share']:.0%}", "incumbent" if inc else r["kind"],
                         r["name"], fmt(r["share"], ".1%"),
                         fmt(r["params"], ",d"), str(r["n"]), fmt(r["mean"], ".4f"),
                         *(["-"] * len(gap_head()) if inc else gap(r)), "-" if inc else word(r)])
    answers = [answer(f) for f in fams]
    notes = [f"final test loss at step {rows[0]['step']} (mean over seeds); cache: bytes per token "
             "as the run's header counts them, a window's at the full context, as a share of MHA's",
             RULE + "; Holm within each family (cache share), the families not corrected for each "
             f"other; reads: ahead/behind where Holm's p < 0.05, '= equal' where ±{MARGIN} holds",
             "kind: what takes a row to its family's share; a row that also narrows (GQA-2 K=V, "
             "LRKV with kv_share) is marked by its sharing",
             "the figure sets a family's rows side by side about its largest cache, 7% of x apart"]
    if cut:
        notes.append(f"seed(s) {', '.join(map(str, cut))} not read, in any row or the figure: "
                     "not run by every row of the families")
    joined = {x["name"] for f in fams for x in f}  # a family's rows are copies, with their stats
    alone = [r["name"] for r in rows if r["name"] not in joined]
    if alone:
        notes.append(f"drawn only (no incumbent within {NEAR * 100:.0f} points of its share): "
                     + ", ".join(alone))
    table = render(head, body) + "\n\n" + "\n".join(f"- {a}" for a in answers)
    return draw(rows, fams)[0], table, notes, ("figure_equal_cache", "equal_cache.md")

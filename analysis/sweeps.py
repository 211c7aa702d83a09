"""
The two sweeps plot.py draws besides the figure, from the runs it has read (logs.load_runs):
  --pareto  the cache sweep: final test loss against KV-cache size, one point per setting (LRKV's r,
            GQA's K/V heads, MLA's d_c), one line per design, and the designs paired at equal cache;
  --lr      the learning-rate sweep: each design at each Muon rate, at the paper's and at its best;
Each *_mode returns what plot.write prints and saves: the figure, the tables, their notes, names.
"""
import math

import matplotlib.pyplot as plt

from common import DESIGNS, design_keys, setting, warn
from analysis.logs import cache
from analysis.stats import RULE, family, final_losses, fmt, gap, gap_head, render, seed_stats, slope

PAPER_MATRIX_LR = 0.02  # muon.MATRIX_LR (a test keeps the two equal; plot.py never imports torch)


def sweep_axes(fig, ax, xlabel, title, legend="upper right"):
    # a sweep's figure: final loss (mean ± sd over seeds) against the swept setting; legend: its loc
    ax.set_xlabel(xlabel)
    ax.set_ylabel("Final Test Cross-Entropy Loss (mean over seeds, ± sd)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(loc=legend)
    fig.tight_layout()
    return fig, ax


# -----------------------------------------------------------------------------
# the cache sweep (--pareto): final loss against KV-cache size, one point per setting

def sweep(runs):
    """The rows of a sweep: one per setting (a design and its cache settings), seeds averaged at the
    sweep's final eval step, in legend order and by cache size. A setting none of whose seeds has
    got there yet is listed with no loss."""
    groups = {}
    for r in runs:
        knobs = tuple(r["config"].get(k) for k in design_keys(r["attn"]))
        groups.setdefault((r["attn"], knobs), []).append(r)
    step = max((r["step"][-1] for r in runs if len(r["step"])), default=None)
    base = next((g for (attn, _), g in groups.items() if attn == "mha"), None)
    rows = [{"attn": attn, "label": DESIGNS[attn].label, "setting": setting({**g[0]["config"], "attn": attn}),
             "n": sum(step in r["step"] for r in g), "step": step, "runs": g, **cache(g[0]["header"]),
             **seed_stats(g, base, step)} for (attn, _), g in groups.items()]
    return sorted(rows, key=lambda r: (list(DESIGNS).index(r["attn"]), r["kv_pct"] or 0))


def budget_pairs(rows):
    """Settings of two design families at nearly equal cache, paired seed by seed: a pair is two
    settings each of which is the other family's nearest in cache size (ties to the smaller cache),
    so a setting meets at most one of each other family. Δ is the earlier family (legend order)
    minus the later."""
    fams = [[r for r in rows if r["attn"] == a and r["kv_pct"] is not None]
            for a in DESIGNS if a != "mha"]
    nearest = lambda r, fam: min(fam, key=lambda o: (abs(o["kv_pct"] - r["kv_pct"]), o["kv_pct"]))
    pairs = []
    for i, fa in enumerate(fams):
        for fb in fams[i + 1:]:
            for a in fa:
                b = nearest(a, fb) if fb else None
                if b is not None and nearest(b, fa) is a:
                    pairs.append({"a": a, "b": b, **seed_stats(a["runs"], b["runs"], a["step"])})
    return pairs


def draw_pareto(rows):
    """Final test loss against KV-cache size, one line per design family, sd error bars."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for attn, d in DESIGNS.items():
        pts = [r for r in rows if r["attn"] == attn and None not in (r["mean"], r["kv_pct"])]
        if not pts:
            continue
        x, y = [100 * r["kv_pct"] for r in pts], [r["mean"] for r in pts]
        ax.errorbar(x, y, yerr=[r["sd"] or 0 for r in pts], color=d.colour, linestyle=d.line,
                    marker="o", capsize=3, label=d.label)
        for r, xi, yi in zip(pts, x, y):
            ax.annotate(r["setting"], (xi, yi), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=d.colour)
        if attn == "mha":  # the baseline's loss across the whole budget axis
            ax.axhline(y[0], color=d.colour, linestyle=":", linewidth=1, alpha=0.6)
    return sweep_axes(fig, ax, "KV cache per token (% of MHA's)", "What a cache budget buys")


def pareto_tables(rows, pairs):
    head = ["design", "setting", "KV % MHA", "KV B/tok", "seeds", "test loss", "sd", *gap_head()]
    body = [[r["label"], r["setting"] or "-", fmt(r["kv_pct"], ".1%"), fmt(r["kv"], ".0f"),
             str(r["n"]), fmt(r["mean"], ".4f"), fmt(r["sd"], ".4f"), *gap(r)] for r in rows]
    name = lambda r: f"{r['label']} {r['setting'] or ''}".strip()
    body2 = [[f"{name(q['a'])} - {name(q['b'])}",
              f"{fmt(q['a']['kv_pct'], '.1%')} vs {fmt(q['b']['kv_pct'], '.1%')}", *gap(q)] for q in pairs]
    return (render(head, body) + "\n\nAt nearly equal cache:\n\n"
            + render(["pair", "KV % MHA", *gap_head("Δ")], body2))


def pareto_mode(runs):
    """The cache sweep's figure, its tables, their notes and the files' names."""
    rows = family(sweep(runs))
    fig, _ = draw_pareto(rows)
    notes = [f"final test loss at step {rows[0]['step']} of every setting (mean over the seeds that "
             f"reached it); KV cache per token as the run's header counts it", RULE,
             "at nearly equal cache: two settings of two families, each the other family's nearest in "
             "cache size"]
    return fig, pareto_tables(rows, family(budget_pairs(rows))), notes, ("figure_pareto", "pareto.md")


# -----------------------------------------------------------------------------
# the learning-rate sweep (--lr): each design at each Muon rate, at the paper's and at its own best

def lr_sweep(runs):
    """A learning-rate sweep: per design and Muon rate (matrix_lr), the final test loss over the
    seeds that every design has at every rate, so each mean is over the same seeds. Returns
    (rows, summary): rows per design and rate, Δ paired against the design at the paper's rate;
    summary per design, Δ MHA at the paper's rate beside Δ MHA's best at the design's own best
    (the rate with the lowest mean validation loss, or test loss for logs with no validation split),
    and how Δ MHA moves with the rate (rate_slope)."""
    step = max((r["step"][-1] for r in runs if len(r["step"])), default=None)
    groups = {}
    for r in runs:
        groups.setdefault((r["attn"], r["config"].get("matrix_lr")), []).append(r)
    seeds = set.intersection(*[set(final_losses(g, step)) for g in groups.values()]) if groups else set()
    dropped = sorted(r["name"] for g in groups.values() for r in g if r["config"].get("seed") not in seeds)
    if dropped:
        warn(f"left out {len(dropped)} run(s) whose seed not every design and rate has: "
             f"{', '.join(dropped)}")
    groups = {k: [r for r in g if r["config"].get("seed") in seeds] for k, g in groups.items()}
    rows, summary = [], []
    for attn, d in DESIGNS.items():
        rates = sorted(lr for a, lr in groups if a == attn)
        if not rates:
            continue
        paper = groups.get((attn, PAPER_MATRIX_LR))
        # the choice reads validation wherever every run of the design has it
        val = {lr: final_losses(groups[(attn, lr)], step, "val") for lr in rates}
        on = "validation" if seeds and all(len(v) == len(seeds) for v in val.values()) else "test"
        own = [{"attn": attn, "label": d.label, "lr": lr, "n": len(seeds), "step": step,
                "val": sum(val[lr].values()) / len(seeds) if on == "validation" else None,
                **seed_stats(groups[(attn, lr)], paper, step)} for lr in rates]
        by = "val" if on == "validation" else "mean"
        best = min(own, key=lambda r: math.inf if r[by] is None else r[by])["lr"]
        rows += own
        summary.append({"attn": attn, "label": d.label, "best": best, "runs": groups[(attn, best)],
                        "paper_runs": paper, "n": len(seeds), "chosen_on": on,
                        "edge": len(rates) > 2 and best in (rates[0], rates[-1])})
    base = next((s for s in summary if s["attn"] == "mha"), None)
    for s in summary:
        s["paper"] = seed_stats(s["paper_runs"], base and base["paper_runs"], step) if s["paper_runs"] else {}
        s["own"] = seed_stats(s["runs"], base and base["runs"], step)
        s["rate"] = rate_slope(groups, s["attn"], step) if base and s is not base else {}
    for key in ("paper", "own", "rate"):  # each column of tests is one family
        family([s[key] for s in summary])
    return family(rows), summary


def rate_slope(groups, attn, step):
    """How a design's gap to MHA moves with the Muon rate: the slope of Δ MHA (same seed, same rate)
    on log2 of the rate, with an intercept per seed (stats.slope); None with fewer than two rates."""
    x, y, seed = [], [], []
    for (a, lr), g in groups.items():
        if a == attn and ("mha", lr) in groups:
            own, ref = final_losses(g, step), final_losses(groups[("mha", lr)], step)
            for k in own.keys() & ref.keys():
                x, y, seed = x + [math.log2(lr / PAPER_MATRIX_LR)], y + [own[k] - ref[k]], seed + [k]
    if len(set(x)) < 2 or len(x) - len(set(seed)) - 1 < 1:
        return {}
    r = slope(x, y, seed)
    return {**r, "diff": r["slope"], "pairs": r["points"]}


def draw_lr(rows, summary):
    """Final test loss against the Muon rate, one line per design, sd error bars, bests ringed."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for attn, d in DESIGNS.items():
        pts = [r for r in rows if r["attn"] == attn and r["mean"] is not None]
        if not pts:
            continue
        ax.errorbar([r["lr"] for r in pts], [r["mean"] for r in pts], yerr=[r["sd"] or 0 for r in pts],
                    color=d.colour, linestyle=d.line, marker="o", capsize=3, label=d.label)
        best = next(s["best"] for s in summary if s["attn"] == attn)
        ax.scatter([best], [next(r["mean"] for r in pts if r["lr"] == best)], s=160,
                   facecolors="none", edgecolors=d.colour, linewidth=1.5, zorder=3)
    ax.axvline(PAPER_MATRIX_LR, color="gray", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    return sweep_axes(fig, ax, "Muon learning rate (matrix_lr; dotted: the paper's)",
                      "Each design's learning rate")


def lr_tables(rows, summary):
    head = ["design", "matrix_lr", "x paper", "seeds", "validation loss", "test loss", "sd",
            *gap_head("Δ paper rate")]
    body = [[r["label"], fmt(r["lr"], ".4g"), fmt(r["lr"] / PAPER_MATRIX_LR, ".3g"), str(r["n"]),
             fmt(r["val"], ".4f"), fmt(r["mean"], ".4f"), fmt(r["sd"], ".4f"), *gap(r)] for r in rows]
    head2 = ["design", "seeds", "at the paper's rate: Δ MHA", "95% CI", "p", "Holm",
             "own best rate (x paper, chosen on)", "at own best: Δ MHA at its best", "95% CI", "p", "Holm"]
    best = lambda s: (f"{fmt(s['best'], '.4g')} (x{fmt(s['best'] / PAPER_MATRIX_LR, '.3g')}, "
                      f"{s['chosen_on']}{', edge' if s['edge'] else ''})")
    body2 = [[s["label"], str(s["n"]), *gap(s["paper"])[1:5], best(s), *gap(s["own"])[1:5]]
             for s in summary]
    head3 = ["design", "points", "Δ MHA per doubling of the rate", "95% CI", "p", "Holm", "established",
             "finds"]
    body3 = [[s["label"], str(s["rate"]["pairs"]), *gap(s["rate"])[1:7]] for s in summary if s["rate"]]
    return (render(head, body) + "\n\n" + render(head2, body2)
            + ("\n\nHow the gap to MHA moves with the rate:\n\n" + render(head3, body3) if body3 else ""))


def lr_mode(runs):
    """The learning-rate sweep's figure, its tables, their notes and the files' names."""
    rows, summary = lr_sweep(runs)
    fig, _ = draw_lr(rows, summary)
    notes = [f"final test loss at step {rows[0]['step']}, each design at each Muon rate (matrix_lr; "
             f"the AdamW rates as the runs set them), over the seeds every design has at every rate; "
             f"validation loss: its mean over the same seeds, what own best reads ('-' where a run has "
             f"no validation split)", RULE,
             "Δ paper rate: the design at this rate minus itself at the paper's; own best: the rate of "
             "its lowest mean validation loss (test loss where the logs have no validation split: then "
             "it is chosen on the text and seeds it is compared on, which flatters every design a "
             "little); a design swept at one rate: that rate, chosen elsewhere; edge: the lowest or "
             "highest rate swept, so the design's own optimum may lie beyond it",
             "families for Holm: the first table; each column of tests of the second; the third",
             "per doubling: the least-squares slope of Δ MHA (same seed and rate) on log2 of the rate, "
             "an intercept per seed, t with points - seeds - 1 degrees of freedom (so are its finds)"]
    return fig, lr_tables(rows, summary), notes, ("figure_lr", "lr.md")

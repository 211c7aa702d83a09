"""
Redraw Figure 4 of "Low-Rank Key Value Attention" (arXiv 2601.11471) from training logs: test loss
against training tokens (bottom axis) and compute (top axis), one line per attention design, seeds
averaged with a min-max band; and a table of each design's final loss over seeds, its paired
difference to MHA (same seed, same data order) with a 95% interval and p, and the paper's metric,
how much sooner it reaches MHA's final loss. Other modes draw something else: --pareto, loss
against KV-cache size, and --lr, loss against the Muon rate (analysis/sweeps.py); --equal_cache,
every way to cut the cache at 50% and 25% of MHA's (analysis/equal.py); --recall, MQAR
solve rates (analysis/recall.py); --verdict, every experiment's answer (analysis/verdict.py). What
reads and judges the logs is in analysis/, this file draws and writes.

It reads only the <dir>/<run>/log.jsonl files that train.py writes; it never imports torch. The
runs must be one experiment (the same shape, data, steps, batch and optimiser; per design the same
settings): it names any run that is not and stops, rather than average it in as a seed. It prints
the tables as Markdown and writes them, and the figure, into the folder of the first DIR:
results.md and figure_tokens.png/.pdf (figure_flops with --x=flops; pareto.md and figure_pareto
with --pareto; lr.md and figure_lr with --lr; recall.md and figure_recall with --recall).

python plot.py out/reproduce                     # what reproduce.sh draws
python plot.py out/reproduce --x=flops --seeds   # against compute, with every seed's own curve
python plot.py out/pareto --pareto               # what SWEEP=pareto bash reproduce.sh draws
python plot.py out/lr --lr                       # what SWEEP=lr bash reproduce.sh draws
python plot.py docs/runs/e8 docs/runs/e5 --equal_cache   # E8: narrow, drop or share the cache
python plot.py out/recall --recall               # what SWEEP=recall bash reproduce.sh draws (MQAR)
python plot.py --verdict                         # every experiment's answer, at a glance and in full
python plot.py out/matched out/reproduce/cpu_mha_s*   # parameter-matched designs, the figure's MHA
"""
import os
import sys
import math
import argparse

import numpy as np
import matplotlib
matplotlib.use("Agg")  # we only write files, so never need a window (works with no display)
import matplotlib.pyplot as plt

from common import DESIGNS, fail, warn
from analysis.curves import deltas, summarize
from analysis.equal import equal_cache_mode
from analysis.logs import load_runs, odd_runs
from analysis.recall import recall_mode
from analysis.stats import RULE, family, fmt, gap, gap_head, render, welch
from analysis.sweeps import lr_mode, pareto_mode
from analysis.verdict import verdict

TOKEN_UNITS = [(1e9, "Billions"), (1e6, "Millions"), (1e3, "Thousands")]
FLOP_UNITS = [(1e18, "ExaFLOPs"), (1e15, "PetaFLOPs"), (1e12, "TeraFLOPs"), (1e9, "GigaFLOPs")]
AXIS_NAMES = {"tokens": "Training Tokens ({})", "flops": "Training Compute ({})"}


# -----------------------------------------------------------------------------
# the figure: loss against tokens or compute per design, and how much sooner each gets to MHA's loss

def unit(x, units):
    """The largest unit not above x, e.g. 3.2e8 tokens -> (1e6, 'Millions')."""
    return next(((scale, name) for scale, name in units if x >= scale), units[-1])


def draw(rows, x="tokens", seeds=False, xmin=0.1):
    """The figure; returns (fig, ax, top axis or None)."""
    curves = [r for r in rows if r["curve"]]
    xmax = max([r["curve"][x][-1] for r in curves], default=0.0) or 1.0  # 1.0: no eval past step 0
    ms, mname = unit(xmax, TOKEN_UNITS if x == "tokens" else FLOP_UNITS)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for r in curves:
        d, c = DESIGNS[r["attn"]], r["curve"]
        ax.plot(c[x] / ms, c["loss"], color=d.colour, linestyle=d.line, linewidth=2, label=d.label)
        if len(c["runs"]) > 1:
            ax.fill_between(c[x] / ms, c["lo"], c["hi"], color=d.colour, alpha=0.15, linewidth=0)
        if seeds:  # each seed's own curve, thin and unlabelled
            for run in c["runs"]:
                ax.plot(run[x] / ms, run["loss"], color=d.colour, linestyle=d.line, linewidth=0.7,
                        alpha=0.5)

    # the paper's figure starts at 5B of 50B tokens, past the steep early drop: start the view at
    # the same fraction of the longest run and fit the y range to what is in view
    lo_x, ys = xmin * xmax / ms, []
    for c in (r["curve"] for r in curves):
        xs = c[x] / ms
        ys += c["lo"][xs >= lo_x].tolist() + c["hi"][xs >= lo_x].tolist()
        if xs[0] < lo_x <= xs[-1]:  # where the line enters the view
            ys += [np.interp(lo_x, xs, c["lo"]), np.interp(lo_x, xs, c["hi"])]
    ys = [y for y in ys if np.isfinite(y)]
    ax.set_xlim(lo_x, xmax / ms * 1.02)
    if ys:
        pad = 0.05 * (max(ys) - min(ys)) or 0.05
        ax.set_ylim(min(ys) - pad, max(ys) + pad)
    ax.set_xlabel(AXIS_NAMES[x].format(mname))
    ax.set_ylabel("Test Cross-Entropy Loss")
    top, flop_name = compute_axis(fig, ax, rows, x, xmax, ms, mname)
    ax.set_title(f"Training Compute ({flop_name}) vs. Test Cross-Entropy Loss")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(loc="upper right")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig, ax, top


def compute_axis(fig, ax, rows, x, xmax, ms, mname):
    """The top axis, compute over a tokens axis or tokens over a compute one. Returns it (None
    where no header counts FLOPs) and the name of the unit of compute, for the title."""
    # One FLOPs/token ratio converts; the designs' own differ by a few percent, so it is MHA's (the
    # baseline's), or the first design's, and the caption says so.
    ref = next((r for r in rows if r["attn"] == "mha" and r["fpt"]), None)
    ref = ref or next((r for r in rows if r["fpt"]), None)
    if ref is None:
        warn("no flops_per_token in any header: no compute axis")
        return None, mname
    ratio = ref["fpt"]
    to_top = ratio if x == "tokens" else 1 / ratio
    ts, tname = unit(xmax * to_top, FLOP_UNITS if x == "tokens" else TOKEN_UNITS)
    k = ms / ts * to_top  # main-axis units -> top-axis units
    top = ax.secondary_xaxis("top", functions=(lambda v: v * k, lambda v: v / k))
    top.set_xlabel(AXIS_NAMES["flops" if x == "tokens" else "tokens"].format(tname))
    spread = max(abs(r["fpt"] / ratio - 1) for r in rows if r["fpt"])
    how = ("Top axis: tokens ×" if x == "tokens" else
           "Bottom axis: each design's own compute; top axis: compute ÷")
    fig.text(0.01, 0.01, f"{how} {ref['label']}'s {fmt(ratio, 'sci')} training FLOPs/token "
             f"(the designs' own differ by up to {spread:.1%})", fontsize=7, color="gray")
    return top, tname if x == "tokens" else mname


def figure_mode(runs, x="tokens", seeds=False, xmin=0.1):
    """The figure, the results table, its notes and the files' names."""
    rows = summarize(runs)
    fig, _, _ = draw(rows, x=x, seeds=seeds, xmin=xmin)
    base = next((r for r in rows if r["attn"] == "mha" and r["curve"]), None)
    notes = [f"test loss: every token of the test split at the last step where the logs have it "
             f"(their score line), else the learning curve's last eval; faster: on the learning curve "
             f"(eval_tokens of the test split), target Standard MHA's last eval on it, {base['loss']:.4f} at "
             f"{fmt(base['tokens'], 'count')} tokens, 1 - design/MHA tokens (or FLOPs) to get there, "
             f"interpolated between evals; its 95% interval from 10,000 bootstrap resamples of the "
             f"seeds, paired with MHA's ('never': some resamples do not get there)" if base else
             "no Standard MHA run with an eval: nothing to measure 'faster' against", RULE]
    for r in runs if seeds else []:
        last = f"{r['loss'][-1]:.4f} at step {r['step'][-1]}" if len(r["step"]) else "no eval yet"
        notes.append(f"run {r['name']} ({r['attn']}, seed {r['config'].get('seed', '?')}): {last}")
    return fig, results_table(rows), notes, (f"figure_{x}", "results.md")


def versus_table(runs, other, there):
    """The interaction of a design's gap to MHA with what two experiments change (a context, say):
    Δ MHA here minus Δ MHA there. The two draw other batches, so Welch's t on the two sets of
    paired Δ; one family over the designs (Holm)."""
    here, away = deltas(runs), deltas(other)
    rows = family([{"label": DESIGNS[a].label, "n": (len(here[a]), len(away[a])),
                    "here": float(np.mean(here[a])), "there": float(np.mean(away[a])),
                    **welch(here[a], away[a])}
                   for a in here if a in away and len(here[a]) > 1 and len(away[a]) > 1])
    head = ["design", "pairs here, there", "Δ MHA here", f"Δ MHA in {there}", "interaction", "95% CI",
            "p", "Holm", "established", "finds"]
    body = [[r["label"], "%d, %d" % r["n"], fmt(r["here"], "+.4f"), fmt(r["there"], "+.4f"), *gap(r)[1:7]]
            for r in rows]
    return render(head, body)


# -----------------------------------------------------------------------------
# output: Markdown tables, printed and written beside the figure


def results_table(rows):
    """Two tables: the gaps (final test loss, the paired test, how much sooner each gets to MHA's
    loss) and the costs (cache, parameters, FLOPs)."""
    def faster(r, x):
        point = fmt(r[f"faster_{x}"], "+.1%") if r[f"reach_{x}"] is not None else r["miss"]
        ci = r.get(f"faster_{x}_ci")
        end = lambda v: "never" if v == -math.inf else fmt(v, "+.1%")
        return f"{point} [{end(ci[0])}, {end(ci[1])}]" if ci else point
    head = ["design", "seeds", "test loss", "sd", *gap_head(), "faster (95% CI)",
            "faster, compute (95% CI)"]
    body = [[r["label"], str(r["n"]), fmt(r["mean"], ".4f"), fmt(r["sd"], ".4f"), *gap(r),
             faster(r, "tokens"), faster(r, "flops")] for r in rows]
    head2 = ["design", "tokens", "KV B/tok", "KV % MHA", "params", "FLOPs/tok", "6N/tok"]
    body2 = [[r["label"], fmt(r["tokens"], "count"), fmt(r["kv"], ".0f"), fmt(r["kv_pct"], ".1%"),
              fmt(r["params"], "count"), fmt(r["fpt"], "sci"), fmt(r["paper_fpt"], "sci")] for r in rows]
    return render(head, body) + "\n\n" + render(head2, body2)


def write(out, fig, table, notes, names):
    """Print the tables and notes as Markdown; write them, and the figure (.png, .pdf), into out."""
    md = "# Results\n\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    print(md, end="")
    png, pdf, md_path = (os.path.join(out, f) for f in (f"{names[0]}.png", f"{names[0]}.pdf", names[1]))
    try:
        os.makedirs(out, exist_ok=True)
        fig.savefig(png, dpi=150)
        fig.savefig(pdf)
        with open(md_path, "w") as f:
            f.write(md)
    except OSError as e:
        fail(f"cannot write to {out}: {e}")
    plt.close(fig)
    print(f"wrote {png}, {pdf} and {md_path}")


# -----------------------------------------------------------------------------
# main: read the logs, check them, draw and tabulate one mode, write the files

def one_experiment(dirs, args):
    """The runs under dirs, refused (exit 2) unless they are one experiment."""
    runs = load_runs(dirs)
    odd = odd_runs(runs, sweep=args.pareto or args.recall or args.equal_cache, lr=args.lr or args.recall, own_rates=args.own_rates,
                   free=("n_embd",) if args.recall else ())
    if odd:
        hint = ("" if args.pareto or args.lr or args.own_rates or args.recall or args.equal_cache else
                "; a sweep? add --pareto or --lr; each design at its own Muon rate? --own_rates")
        fail(f"not one experiment, so not averaged: {'; '.join(odd)}; move these runs to a folder of "
             f"their own and plot each folder{hint}")
    return runs


def parser():
    p = argparse.ArgumentParser(description="Redraw the paper's Figure 4 from out/<run>/log.jsonl.")
    p.add_argument("dirs", nargs="*", default=["out"], help="run folders or folders of runs (default: out)")
    p.add_argument("--out", help="where the figure and results.md go (default: the first of DIRS)")
    p.add_argument("--x", choices=["tokens", "flops"], default="tokens",
                   help="main x axis (flops: equal compute)")
    p.add_argument("--seeds", action="store_true", help="also draw and list every seed's own run")
    p.add_argument("--xmin", type=float, default=0.1, help="start the view at this fraction of the x range")
    sweeps = p.add_mutually_exclusive_group()  # two kinds of sweep: one at a time
    sweeps.add_argument("--pareto", action="store_true",
                        help="a sweep: final loss against KV-cache size per setting")
    sweeps.add_argument("--lr", action="store_true",
                        help="a learning-rate sweep: final loss against the Muon rate")
    sweeps.add_argument("--recall", action="store_true",
                        help="MQAR runs: accuracy by design, width and pairs, against KV-cache size")
    sweeps.add_argument("--equal_cache", action="store_true",
                        help="every way to cut the cache (narrow, drop, share) against GQA at 50%% "
                             "and MQA at 25%% (E8)")
    sweeps.add_argument("--own_rates", action="store_true",
                        help="the figure with each design at its own Muon rate (one rate a design)")
    p.add_argument("--reference", metavar="DIR", nargs="+",
                   help="with --recall: MHA's validity runs (E6 stage B), whose solved pair counts are the "
                        "reference cells that set the Holm families")
    p.add_argument("--verdict", action="store_true",
                   help="every experiment in docs/runs in one table, at a glance and in full, printed")
    p.add_argument("--versus", metavar="DIR", action="append",
                   help="another experiment of the same designs (another context, say): how each "
                        "design's gap to MHA differs between the two; repeat it for more folders")
    p.error = fail  # bad arguments too: one line, exit status 2
    return p


def main(argv=None):
    args = parser().parse_args(argv)

    if args.verdict:
        try:
            print("\n\n".join(verdict()))  # the glance, then the full table and its notes
        except ValueError as e:
            fail(str(e))
        return 0
    if args.reference and not args.recall:
        fail("--reference names the validity runs of --recall; add --recall")
    if args.versus and (args.pareto or args.lr or args.recall or args.equal_cache):
        fail("--versus compares two figures' gaps; it does not go with a sweep or --recall")
    runs = one_experiment(args.dirs, args)
    other = one_experiment(args.versus, args) if args.versus else None
    if args.pareto:
        fig, table, notes, names = pareto_mode(runs)
    elif args.lr:
        fig, table, notes, names = lr_mode(runs)
    elif args.equal_cache:
        try:
            fig, table, notes, names = equal_cache_mode(runs)
        except ValueError as e:
            fail(str(e))
    elif args.recall:
        try:
            fig, table, notes, names = recall_mode(runs, load_runs(args.reference) if args.reference else None)
        except ValueError as e:
            fail(str(e))
    else:
        fig, table, notes, names = figure_mode(runs, x=args.x, seeds=args.seeds, xmin=args.xmin)
        if args.own_rates:
            rate = {r["attn"]: r["config"].get("matrix_lr") for r in runs}
            notes.append("each design at its own Muon rate (matrix_lr): "
                         + ", ".join(f"{DESIGNS[a].label} {rate[a]:g}" for a in DESIGNS if a in rate))
    if other:
        where = " ".join(args.versus)
        table += f"\n\nAgainst {where}:\n\n" + versus_table(runs, other, where)
        notes.append(f"interaction: Δ MHA here minus Δ MHA in {where}, each a mean over seeds of the "
                     "paired difference; the two experiments draw other batches, so Welch's t on the two "
                     "sets of Δ; Holm over the designs; finds from Welch's standard error and df")
    first = args.dirs[0]  # by default the files go beside the logs
    out = args.out or (first if os.path.isdir(first) else os.path.dirname(first))
    write(out, fig, table, notes, names)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

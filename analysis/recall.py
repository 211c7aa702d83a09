"""
--recall: multi-query associative recall (MQAR, the top-level recall.py) by design, width and
number of key-value pairs, from the runs logs.load_runs read. Logs of one pair count a run (E4)
get E4's table: each design's accuracy paired with MHA's seed by seed. recall_mode returns what
plot.write prints and saves: the figure, the tables, their notes, names.
"""
import math

import matplotlib.pyplot as plt

from common import DESIGNS, warn
from analysis.logs import cache
from analysis.stats import family, fmt, gap, gap_head, paired_t, render
from analysis.sweeps import PAPER_MATRIX_LR


SOLVED = 0.99  # a run solves its cell when its final test accuracy reaches this


def recall_cells(runs):
    """{(attn, width, pairs): {rate: runs}} of the finished runs (a score line with accuracy)."""
    cells = {}
    for r in runs:
        c = r["config"]
        if c.get("dataset") != "mqar":
            raise ValueError(f"{r['path']} is not an MQAR run (dataset={c.get('dataset')}); --recall reads "
                             "runs of train.py config/mqar.py")
        if "test_acc" not in r["score"]:
            warn(f"{r['path']}: not finished (no score line), left out")
            continue
        key = (r["attn"], c["n_embd"], c["mqar_pairs"])
        cells.setdefault(key, {}).setdefault(c["matrix_lr"], []).append(r)
    return cells


def mean_of(group, key):
    return sum(r["score"][key] for r in group) / len(group)


def chosen_rate(rates):
    """The rate of the highest mean validation accuracy, ties to the lower validation loss."""
    return max(rates, key=lambda lr: (mean_of(rates[lr], "val_acc"), -mean_of(rates[lr], "val_loss")))


def first_solved(r):
    """The first eval step whose (curve) test accuracy reaches SOLVED, or None."""
    hit = [s for s, a in zip(r["step"].tolist(), r["acc"].tolist()) if a >= SOLVED]
    return hit[0] if hit else None


def recall_rows(cells):
    """One row per (design, width, pairs) at the design's chosen rate, with the paired test of its
    accuracy against MHA's of the same seeds; all rows but MHA's one family (Holm)."""
    rows = []
    for (attn, width, pairs), rates in cells.items():
        lr = chosen_rate(rates)
        g = rates[lr]
        acc = {r["config"]["seed"]: r["score"]["test_acc"] for r in g}
        rows.append({"attn": attn, "label": DESIGNS[attn].label, "width": width, "kv_pairs": pairs, "lr": lr,
                     "rates": len(rates), "runs": g, "n": len(g), "acc": acc, **cache(g[0]["header"]),
                     "mean": sum(acc.values()) / len(acc), "lo_acc": min(acc.values()), "hi_acc": max(acc.values()),
                     "solved": sum(a >= SOLVED for a in acc.values()), "first": [first_solved(r) for r in g]})
    rows.sort(key=lambda r: (r["width"], r["kv_pairs"], list(DESIGNS).index(r["attn"])))
    for r in rows:
        base = next((b for b in rows if b["attn"] == "mha" and (b["width"], b["kv_pairs"]) == (r["width"], r["kv_pairs"])),
                    None)
        d = [r["acc"][s] - base["acc"][s] for s in sorted(r["acc"]) if s in base["acc"]] if base and base is not r else []
        r.update(paired_t(d))
    family([r for r in rows if r["attn"] != "mha"])
    return rows


def smallest_cache(rows):
    """{(attn, pairs): the smallest KV bytes per token at which the design's mean accuracy is solved}."""
    out = {}
    for r in rows:
        if r["mean"] >= SOLVED and r["kv"] is not None:
            key = (r["attn"], r["kv_pairs"])
            out[key] = min(out.get(key, math.inf), r["kv"])
    return out


def draw_recall(rows):
    """Accuracy against KV-cache bytes per token and against pairs, mean over seeds, bars min to max."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5.5))
    markers, styles = "osD^v<>", ["-", "--", ":", "-."]
    pairs, widths = sorted({r["kv_pairs"] for r in rows}), sorted({r["width"] for r in rows})
    for attn, d in DESIGNS.items():
        for i, p in enumerate(pairs):
            pts = sorted((r for r in rows if r["attn"] == attn and r["kv_pairs"] == p), key=lambda r: r["kv"])
            if pts:
                a1.errorbar([r["kv"] for r in pts], [r["mean"] for r in pts], capsize=3, color=d.colour,
                            yerr=[[r["mean"] - r["lo_acc"] for r in pts], [r["hi_acc"] - r["mean"] for r in pts]],
                            marker=markers[i % len(markers)], linestyle=styles[i % len(styles)],
                            label=f"{d.label}, {p} pairs")  # a line across widths
        for j, w in enumerate(widths):
            pts = [r for r in rows if r["attn"] == attn and r["width"] == w]
            if pts:
                a2.errorbar([r["kv_pairs"] for r in pts], [r["mean"] for r in pts], capsize=3, color=d.colour,
                            yerr=[[r["mean"] - r["lo_acc"] for r in pts], [r["hi_acc"] - r["mean"] for r in pts]],
                            linestyle=styles[j % len(styles)], marker="o", label=f"{d.label}, d_model {w}")
    a1.set_xscale("log")
    a1.set_xlabel("KV-cache bytes per token (bf16, all layers)")
    a2.set_xscale("log", base=2)
    a2.set_xlabel("key-value pairs in the sequence")
    for ax in (a1, a2):
        ax.set_ylabel("MQAR test accuracy (mean over seeds, bars min-max)")
        ax.axhline(SOLVED, color="gray", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    fig.suptitle("What a compressed cache forgets: multi-query associative recall")
    fig.tight_layout()
    return fig


def recall_tables(cells, rows):
    steps = lambda r: ", ".join("never" if s is None else str(s) for s in r["first"])
    head = ["d_model", "pairs", "design", "KV B/tok", "rate (x paper)", "seeds", "test accuracy", "min-max",
            "solved", "first step at 0.99", *gap_head("Δ MHA")[:-1], "validation accuracy"]
    body = [[str(r["width"]), str(r["kv_pairs"]), r["label"], fmt(r["kv"], ".0f"),
             fmt(r["lr"] / PAPER_MATRIX_LR, ".3g") + (" chosen" if r["rates"] > 1 else ""), str(r["n"]),
             fmt(r["mean"], ".3f"), f"{r['lo_acc']:.3f}-{r['hi_acc']:.3f}", f"{r['solved']}/{r['n']}", steps(r),
             *(gap(r)[:7] if r["attn"] != "mha" else ["-"] * 7), fmt(mean_of(r["runs"], "val_acc"), ".3f")]
            for r in rows]
    small = smallest_cache(rows)
    pairs = sorted({r["kv_pairs"] for r in rows})
    body2 = [[DESIGNS[a].label, *(fmt(small.get((a, p)), ".0f") for p in pairs)]
             for a in DESIGNS if any(r["attn"] == a for r in rows)]
    out = render(head, body) + "\n\nThe smallest KV cache (bytes per token) at which the mean accuracy reaches " \
        f"{SOLVED} ('-': at no width here):\n\n" + render(["design", *(f"{p} pairs" for p in pairs)], body2)
    swept = [(k, rates) for k, rates in cells.items() if len(rates) > 1]
    if swept:
        head3 = ["d_model", "pairs", "design", "rate (x paper)", "seeds", "validation accuracy", "validation loss",
                 "test accuracy", "chosen"]
        body3 = [[str(w), str(p), DESIGNS[a].label, fmt(lr / PAPER_MATRIX_LR, ".3g"), str(len(g)),
                  fmt(mean_of(g, "val_acc"), ".3f"), fmt(mean_of(g, "val_loss"), ".4f"), fmt(mean_of(g, "test_acc"), ".3f"),
                  "yes" if lr == chosen_rate(rates) else ""]
                 for (a, w, p), rates in sorted(swept, key=lambda kv: (kv[0][1], kv[0][2], list(DESIGNS).index(kv[0][0])))
                 for lr, g in sorted(rates.items())]
        out += "\n\nThe rates, chosen on validation:\n\n" + render(head3, body3)
    return out


def recall_mode(runs):
    """The recall figure, its tables, their notes and the files' names."""
    cells = recall_cells(runs)
    if not cells:
        raise ValueError("no finished MQAR run (a score line with test_acc) to tabulate")
    rows = recall_rows(cells)
    notes = [f"test accuracy: argmax at the answers of the fixed test set, at the last step; solved: runs at "
             f"or above {SOLVED}; first step: each seed's first eval of the learning curve (a quarter of the "
             "test set) at or above it",
             "a cell's design runs at its chosen rate: where several rates ran, the one of the highest mean "
             "validation accuracy (ties: lower validation loss), chosen on the same seeds it is shown on "
             "(E4 reports its grid on other seeds than its rate sweep)",
             "Δ MHA: the design's test accuracy minus MHA's at the same width, pairs and seed, the mean over "
             "seeds; 95% CI from t with pairs - 1 df; Holm over every row but MHA's (one family); finds: "
             "the smallest gap found with 80% power at Holm's strictest level; no equivalence is claimed"]
    return draw_recall(rows), recall_tables(cells, rows), notes, ("figure_recall", "recall.md")

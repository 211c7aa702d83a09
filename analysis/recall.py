"""
--recall: multi-query associative recall (MQAR, the top-level recall.py) by design, width and
number of key-value pairs, from the runs logs.load_runs read. Two kinds of log:
  - E6's, many seeds a design, each run trained on a mixture of pair counts (a list) and scored at
    each, or with a sliding window: solve rates against MHA's, Fisher's exact test, Holm;
  - E4's, one pair count a run: each design's accuracy paired with MHA's seed by seed;
  - E7's, runs that stop once solved (stop_acc): the time to solve, censored at the cap, by design
    and cache (Kaplan-Meier, log-rank and Fisher against MHA, Holm), and accuracy by distance.
recall_mode returns what plot.write prints and saves: the figure, the tables, their notes, names.
"""
import math
import statistics
from collections import Counter

import numpy as np
import matplotlib.pyplot as plt

from common import DESIGNS, design_keys, warn
from analysis.logs import cache
from analysis.stats import family, fisher_exact, fmt, gap, gap_head, holm, paired_t, render, smallest_rate_gap
from analysis.survival import survival_mode
from analysis.sweeps import PAPER_MATRIX_LR


SOLVED = 0.99  # a run solves its cell when its final test accuracy reaches this
VALID, VALID_RUNS = 11 / 12, 12  # E6's validity rule: a reference cell is one MHA solves on 11 of 12 unused seeds


def finished(runs):
    """The runs with a score line; a run that is not MQAR is refused (ValueError)."""
    out = []
    for r in runs:
        if r["config"].get("dataset") != "mqar":
            raise ValueError(f"{r['path']} is not an MQAR run (dataset={r['config'].get('dataset')}); --recall "
                             "reads runs of train.py config/mqar.py")
        if "test_acc" not in r["score"]:
            warn(f"{r['path']}: not finished (no score line), left out")
            continue
        out.append(r)
    return out


def recall_cells(runs):
    """{(attn, width, pairs): {rate: runs}} of the finished runs (a score line with accuracy)."""
    cells = {}
    for r in finished(runs):
        c = r["config"]
        cells.setdefault((r["attn"], c["n_embd"], c["mqar_pairs"]), {}).setdefault(c["matrix_lr"], []).append(r)
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
    fig.suptitle("Multi-query associative recall: accuracy against cache size")
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


def recall_mode(runs, reference_runs=None):
    """The recall figure, its tables, their notes and the files' names: E7's times to solve where
    runs stop when solved (stop_acc), E6's solve rates where a run was scored at a mixture of pair
    counts or attends through a window, else E4's table."""
    if any(r["config"].get("stop_acc") for r in runs):
        return survival_mode(finished(runs))
    if any(isinstance(r["config"].get("mqar_pairs"), list) or r["config"].get("window") for r in runs):
        return solve_mode(runs, reference_runs)
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


# -----------------------------------------------------------------------------
# solve rates (E6): many seeds a design, each run scored at every pair count it trained on

def counts(r):
    """The pair counts a run was scored at: its mixture's, or its one count."""
    pairs = r["config"]["mqar_pairs"]
    return list(pairs) if isinstance(pairs, list) else [pairs]


def at(record, key, N, alone):
    # a log record's value at N pairs: its `key`_pN, or its `key` for a run of N pairs alone
    return record.get(f"{key}_p{N}", record.get(key) if alone else None)


def first_solved_at(r, N):
    """The first eval step whose test accuracy at N pairs reaches SOLVED; math.inf if none does."""
    alone = counts(r) == [N]
    return next((s["step"] for s in r["evals"] if (at(s, "test_acc", N, alone) or 0) >= SOLVED), math.inf)


def solve_groups(runs):
    """{(attn, window, width): runs} of the finished runs. A group is one design at one setting and
    one rate (E6's plan): one that mixes them is refused (ValueError), never pooled."""
    groups = {}
    for r in finished(runs):
        groups.setdefault((r["attn"], r["config"].get("window") or 0, r["config"]["n_embd"]), []).append(r)
    for (attn, window, width), g in groups.items():
        keys = ("matrix_lr", *design_keys(attn))
        if len({tuple(r["config"].get(k) for k in keys) for r in g}) > 1:
            raise ValueError(f"{label(attn, window)} at d_model {width}: its runs differ in {', '.join(keys)} "
                             f"({', '.join(r['name'] for r in g)}); plot each setting or rate apart")
    rates = {g[0]["config"]["matrix_lr"] for g in groups.values()}
    if len(rates) > 1:  # E6's plan: every design at the one rate stage A chose
        raise ValueError(f"the designs ran at several rates ({', '.join(map(str, sorted(rates)))}); solve rates "
                         "compare designs at one: plot each rate apart")
    return groups


def label(attn, window):
    return DESIGNS[attn].label + (f", window {window}" if window else "")


def reference_cells(runs, main=None):
    """{width: [pair counts]} at which the validity runs (MHA, full attention, VALID_RUNS seeds)
    solve at least VALID of them: E6's reference cells (docs/plan.md). main: a main run, whose rate,
    length and pair counts the validity runs must share."""
    cells = {}
    for (attn, window, width), g in solve_groups(runs).items():
        if (attn, window) != ("mha", 0):
            raise ValueError(f"--reference takes MHA's validity runs (full attention), not {label(attn, window)}")
        seeds = len({r["config"]["seed"] for r in g})
        if seeds < VALID_RUNS:
            raise ValueError(f"the validity rule needs {VALID_RUNS} finished runs of distinct seeds; "
                             f"d_model {width} has {seeds}")
        differ = [k for k in ("matrix_lr", "max_iters", "mqar_pairs")
                  if main and g[0]["config"].get(k) != main["config"].get(k)]
        if differ:
            raise ValueError(f"the validity runs differ from the main runs in {', '.join(differ)}")
        for N in sorted({N for r in g for N in counts(r)}):
            accs = [at(r["score"], "test_acc", N, counts(r) == [N]) for r in g if N in counts(r)]
            if sum(a is not None and a >= SOLVED for a in accs) >= VALID * len(accs) - 1e-9:
                cells.setdefault(width, []).append(N)
    return cells


def families(rows, reference):
    # each tested row's Holm family. Without reference cells, one. With them (E6's plan), the
    # largest reference count is the primary family, full attention and the narrowest window;
    # other reference counts and other windows are the secondary; other counts are not tested
    if reference is None:
        return {id(r): "all" for r in rows}
    out = {}
    for r in rows:
        cells = reference.get(r["width"], [])
        first_window = min((b["window"] for b in rows if b["width"] == r["width"] and b["window"]), default=0)
        if r["pairs"] in cells:
            primary = r["pairs"] == max(cells) and r["window"] in (0, first_window)
            out[id(r)] = "primary" if primary else "secondary"
    return out


def solve_rows(groups, reference=None):
    """One row per design (a window its own), width and pair count: runs solved, mean accuracy,
    the median first step at SOLVED; against MHA (full attention) at the same width and count, the
    gap in solve rate and Fisher's exact p; Holm within each family (families)."""
    rows = []
    for (attn, window, width), g in groups.items():
        T, share = g[0]["config"]["block_size"], cache(g[0]["header"])["kv_pct"]
        share = share * min(T, window) / T if share is not None and window else share  # a window's cache holds W
        for N in sorted({N for r in g for N in counts(r)}):
            acc = {r["name"]: at(r["score"], "test_acc", N, counts(r) == [N]) for r in g if N in counts(r)}
            mine = [r for r in g if acc.get(r["name"]) is not None]
            if not mine:  # no score line holds this count
                continue
            k = sum(acc[r["name"]] >= SOLVED for r in mine)
            rows.append({"attn": attn, "window": window, "label": label(attn, window), "width": width, "pairs": N,
                         "kv_pct": share, "n": len(mine), "k": k, "rate": k / len(mine),
                         "accs": [acc[r["name"]] for r in mine], "mean": float(np.mean([acc[r["name"]] for r in mine])),
                         "first": statistics.median(first_solved_at(r, N) for r in mine)})
    rows.sort(key=lambda r: (r["width"], r["pairs"], r["window"] > 0, list(DESIGNS).index(r["attn"]), r["window"]))
    for r in rows:
        base = next((b for b in rows if (b["attn"], b["window"], b["width"], b["pairs"]) ==
                     ("mha", 0, r["width"], r["pairs"])), None)
        if base is not None and base is not r:
            r.update(base=base, diff=r["rate"] - base["rate"])
    fam = families([r for r in rows if "base" in r], reference)
    for name in dict.fromkeys(fam.values()):
        tested = [r for r in rows if fam.get(id(r)) == name]
        for r in tested:
            r.update(family=name, p=fisher_exact(r["k"], r["n"], r["base"]["k"], r["base"]["n"]))
        for r, p_holm in zip(tested, holm([r["p"] for r in tested])):
            r.update(p_holm=p_holm, established=p_holm < 0.05,
                     finds=smallest_rate_gap(r["n"], r["base"]["k"], r["base"]["n"], 0.05 / len(tested)))
    return rows


def solve_table(rows):
    head = ["d_model", "pairs", "design", "KV % MHA", "solved", "Δ MHA", "family", "Fisher p", "Holm", "established",
            "finds", "test accuracy", "first step at 0.99"]
    mark = lambda r: {True: "yes", False: "no"}.get(r.get("established"), "-")
    body = [[str(r["width"]), str(r["pairs"]), r["label"], fmt(r["kv_pct"], ".1%"), f"{r['k']}/{r['n']}",
             fmt(r.get("diff"), "+.2f"), r.get("family", "-"), fmt(r.get("p"), ".2g"), fmt(r.get("p_holm"), ".2g"), mark(r),
             fmt(r.get("finds"), ".2f"), fmt(r["mean"], ".3f"), "never" if r["first"] == math.inf else f"{r['first']:.0f}"]
            for r in rows]
    return render(head, body)


def draw_solves(rows, width):
    """At one width: each seed's test accuracy per design and pair count (a jittered strip), and
    each design's solve rate against the pairs. The legend sits outside."""
    rows = [r for r in rows if r["width"] == width]
    kinds = list(dict.fromkeys((r["attn"], r["window"]) for r in rows))
    pairs = sorted({r["pairs"] for r in rows})
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5.5), layout="constrained")
    jitter, slot = np.random.default_rng(0), 0.8 / len(kinds)  # each design a slot of a pair count's 0.8
    windows = sorted({w for _, w in kinds if w})
    for j, (attn, window) in enumerate(kinds):
        d, mine = DESIGNS[attn], [r for r in rows if (r["attn"], r["window"]) == (attn, window)]
        style = dict(color=d.colour, marker="o" if not window else "xs^v"[windows.index(window) % 4])
        for r in mine:
            x = pairs.index(r["pairs"]) - 0.4 + slot * (j + 0.5 + jitter.uniform(-0.35, 0.35, r["n"]))
            a1.scatter(x, r["accs"], s=14, alpha=0.7, **style)
        a2.plot([r["pairs"] for r in mine], [r["rate"] for r in mine], label=label(attn, window),
                linestyle=d.line if not window else "--", **style)
    a1.set_xticks(range(len(pairs)), [str(p) for p in pairs])
    a1.set_ylim(-0.05, 1.05)
    a1.set_ylabel("MQAR test accuracy, one point per seed")
    a2.set_xscale("log", base=2)
    a2.set_xticks(pairs, [str(p) for p in pairs])
    a2.set_ylim(-0.05, 1.05)
    a2.set_ylabel(f"solve rate: runs at test accuracy {SOLVED} or above")
    for ax in (a1, a2):
        ax.set_xlabel("key-value pairs in the sequence")
        ax.grid(alpha=0.3)
    a1.axhline(SOLVED, color="gray", linestyle=":", linewidth=1)
    fig.legend(loc="outside right upper", fontsize=8)
    fig.suptitle(f"Recall by pair count, d_model {width}: each seed, and each design's solve rate")
    return fig


def solve_mode(runs, reference_runs=None):
    """E6's figure, its table, the notes and the files' names. reference_runs: the validity runs
    (MHA, unused seeds), whose reference cells set the families; None: one family."""
    groups = solve_groups(runs)
    if not groups:
        raise ValueError("no finished MQAR run (a score line with test_acc) to tabulate")
    main = next(iter(groups.values()))[0]
    reference = reference_cells(reference_runs, main) if reference_runs is not None else None
    rows = solve_rows(groups, reference)
    m = Counter(r["family"] for r in rows if "family" in r)
    width = Counter({w: len(g) for (_, _, w), g in groups.items()}).most_common(1)[0][0]  # the most runs
    if reference is None:
        fams = f"Holm over every row but MHA's, {m['all']} tests, one family"
    else:
        cells = "; ".join(f"d_model {w}: {', '.join(map(str, c))} pairs" for w, c in reference.items()) or "none"
        fams = (f"reference cells (MHA solves at least {VALID:.3g} of the --reference runs): {cells}; the primary "
                f"family ({m['primary']} tests) is the largest reference count, full attention and the narrowest "
                f"window; the secondary ({m['secondary']}) the other reference counts and windows; a count that "
                "is no reference cell is not tested ('-'); Holm within each family")
    notes = [f"solved: runs whose final test accuracy at that pair count (test_acc_pN, every test example) "
             f"is {SOLVED} or above; Δ MHA: the solve rate minus MHA's (full attention) at the same d_model "
             "and pairs",
             f"Fisher p: two-sided Fisher's exact test of solved and not against MHA's runs; {fams}; established "
             "when Holm's p < 0.05; finds: the smallest gap in solve rate from MHA's own that the row's runs "
             "against MHA's could establish at Holm's strictest level, 0.05 / the family's tests (some count "
             "of solved runs whose Fisher p is below it; '-': none)",
             "KV % MHA: the cache of a whole sequence (block_size tokens); a window's holds min(T, W) of T "
             "tokens; test accuracy: the mean over seeds; first step at 0.99: the median over seeds of the "
             "first eval of the learning curve (a quarter of the test examples) at or above it, a seed "
             "that never got there counted as never",
             f"figure: d_model {width}, the width with the most runs"]
    return draw_solves(rows, width), solve_table(rows), notes, ("figure_recall", "recall.md")


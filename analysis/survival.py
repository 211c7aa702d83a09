"""
--recall for E7's runs, which stop at the first eval that solves (train.py --stop_acc): the time to
solve by design and cache, censored at the cap (Kaplan-Meier; log-rank and Fisher against MHA,
Holm), the frontier of caches seen to solve and to fail, and accuracy by the distance from key to
query. survival_mode returns what plot.write prints and saves, as analysis/recall.py's modes do.
"""
import re

import matplotlib.pyplot as plt
import numpy as np

from common import DESIGNS, reaches, warn
from analysis.logs import cache
from analysis.stats import (fisher_exact, fmt, holm, kaplan_meier, km_at, logrank, median_time,
                            render)


def label(attn, window):
    return DESIGNS[attn].label + (f", window {window}" if window else "")


def kind(row):
    return "window" if row["window"] else row["attn"]  # the windows as one design


def time_to_solve(r):
    """(step, solved): the step a run stopped at, solved; or its cap, censored."""
    return r["score"]["step"], bool(r["score"].get("stopped"))


def whole_set_solved(r):
    # the stop read a quarter of the test set: whether every test example agrees, at each count
    sc = r["score"]
    keys = [k for k in sc if re.fullmatch(r"test_acc_p\d+", k)] or ["test_acc"]
    return reaches(sc, keys, r["config"]["stop_acc"])  # the stop's rule (recall.MQAR.solved)


def curve(r):
    # the learning curve's test accuracy; a window's at the answers inside it (the mean over the
    # counts of test_acc_win_pN), as its solve rule and the plan's reading of it take them
    win = sorted(k for k in (r["evals"] or [{}])[-1] if re.fullmatch(r"test_acc_win_p\d+", k))
    return (np.array([np.mean([e[k] for k in win if e[k] is not None]) for e in r["evals"]])
            if win else r["acc"])


def flat(r):
    # the plan's reading of a censored run: its last three curve accuracies within 0.02 of each
    # other (on the plateau), else still rising at the cap
    last = curve(r)[-3:]
    return len(last) == 3 and last.max() - last.min() <= 0.02


def reading(r):
    """The plan's reading of an arm against MHA (docs/plan.md, E7, part A), in a few words: more
    often where Fisher establishes more solved by the cap; as often (Fisher not established, at
    most 2 runs under MHA's share), later or sooner where the log-rank test establishes it;
    fewer, with a censored run flat on the plateau (can't tell capacity from learning), or with
    every censored run still rising (the cap, not the cache, is the limit seen); inconclusive
    where neither."""
    b = r["base"]
    short = (b["k"] / b["n"] - r["k"] / r["n"]) * r["n"]  # runs short of MHA's share
    if r["p_f_holm"] < 0.05 and short < 0:
        return "more often"
    fewer = r["p_f_holm"] < 0.05 and short > 0
    if not fewer and short <= 2:
        if r["p_lr_holm"] < 0.05:
            return "later" if r["o_e"] < 0 else "sooner"
        return "as often"
    if not fewer:
        return "inconclusive"
    return "can't tell" if r["flat"] else "past the cap"


def survival_rows(runs):
    """One row per arm (design, window, cache bytes per token, d_model): its runs' times, the
    median with its interval, the share solved at the cap; each arm run on MHA's seeds against
    MHA's (full attention, the same width) by log-rank and by Fisher, each test a Holm family."""
    groups = {}
    for r in runs:
        c = r["config"]
        w, T = c.get("window") or 0, c["block_size"]
        # a window's cache holds min(T, W) of a sequence's T tokens: its bytes a token on average
        kv = cache(r["header"])["kv"] * (min(T, w) / T if w else 1)
        groups.setdefault((r["attn"], w, kv, c["n_embd"]), []).append(r)
    rows = []
    for (attn, window, kv, width), g in groups.items():
        times, solved = zip(*map(time_to_solve, g))
        med, lo, hi = median_time(times, solved)
        rows.append(dict(attn=attn, window=window, kv=kv, width=width, runs=g, n=len(g),
                         times=times, solved=solved, k=sum(solved), label=label(attn, window),
                         cap=max(r["config"]["max_iters"] for r in g), median=med, lo=lo, hi=hi,
                         whole=sum(s and whole_set_solved(r) for r, s in zip(g, solved)),
                         flat=sum(not s and flat(r) for r, s in zip(g, solved))))
    order = list(DESIGNS)
    rows.sort(key=lambda r: (r["width"], r["window"] > 0, order.index(r["attn"]), -r["kv"]))
    for width in {r["width"] for r in rows}:
        mha = [r for r in rows if (r["attn"], r["window"], r["width"]) == ("mha", 0, width)]
        base = max(mha, key=lambda r: r["n"], default=None)
        # tested: the arms run on MHA's seeds (the same data), not part B's cache walk (its own
        # seeds, for the frontier only), so A's families are the same with or without B's logs
        seeds = lambda r: sorted(x["config"]["seed"] for x in r["runs"])  # noqa: E731
        tested = []
        for r in (r for r in rows if base and r is not base and r["width"] == width):
            if seeds(r) == seeds(base):
                tested.append(r)
            elif set(seeds(r)) & set(seeds(base)):  # an arm of part A short of a run: say so
                warn(f"{r['label']}, {r['kv']:.0f} B: not every one of MHA's seeds; not "
                     "tested against MHA")
        for r in tested:
            o_e, _, p = logrank(r["times"], r["solved"], base["times"], base["solved"])
            r.update(base=base, o_e=o_e, p_lr=p,
                     p_f=fisher_exact(r["k"], r["n"], base["k"], base["n"]))
        for key in ("p_lr", "p_f"):
            for r, p in zip(tested, holm([r[key] for r in tested])):
                r[key + "_holm"] = p
        for r in tested:
            r["reading"] = reading(r)
    return rows


def pooled_distance(runs, counts=True):
    """{pairs: {bin: [hits, answers]}} summed over the solved runs' score lines (test_dist_pN);
    counts False: {bin: [hits, answers]}, every count pooled too."""
    out = {}
    for r in (r for r in runs if time_to_solve(r)[1]):
        for k, cells in r["score"].items():
            if k.startswith("test_dist_p"):
                mine = out.setdefault(int(k[len("test_dist_p"):]) if counts else 0, {})
                for b, (h, n) in cells.items():
                    mine[int(b)] = [a + x for a, x in zip(mine.get(int(b), [0, 0]), (h, n))]
    return out if counts else out.get(0, {})


def draw_survival(rows):
    """The fraction of runs solved against steps (1 - Kaplan-Meier); the solved runs' test
    accuracy by the distance from key to query, every count pooled (both for arms of more than
    one run); and the share solved by the cap against the cache, a line a design (the windows one
    line): part B's frontier."""
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(18, 5.5), layout="constrained")
    for r in rows:
        d, km = DESIGNS[r["attn"]], kaplan_meier(r["times"], r["solved"])
        style = dict(color=d.colour, linestyle="--" if r["window"] else d.line)
        steps = [0] + [t for t, *_ in km] + [r["cap"]]
        if r["n"] > 1:  # one run's curve is a single step: part B's points are in the third panel
            a1.step(steps, [1 - km_at(km, t) for t in steps], where="post",
                    label=f"{r['label']}, {r['kv']:.0f} B/token", **style)
        cells = pooled_distance(r["runs"], counts=False)
        if cells and r["n"] > 1:  # part B's, a run a point, are in the table
            bins = sorted(cells)
            a2.plot(bins, [cells[b][0] / cells[b][1] for b in bins], marker="o", **style)
    for i, k in enumerate(dict.fromkeys(map(kind, rows))):
        mine = sorted((r for r in rows if kind(r) == k), key=lambda r: r["kv"])
        d = DESIGNS[mine[0]["attn"]]
        a3.plot([r["kv"] for r in mine], [r["k"] / r["n"] for r in mine], marker="o",
                color=d.colour, linestyle="--" if k == "window" else d.line)
        for r in mine:
            a3.annotate(f"{r['k']}/{r['n']}", (r["kv"], r["k"] / r["n"]), fontsize=7,
                        textcoords="offset points", xytext=(3, 3 - 9 * i), color=d.colour)
    a3.set_xscale("log", base=2)
    a3.set_title("a window's solve reads only the keys inside it", fontsize=9)
    a3.set_xlabel("KV cache, bytes per token (a window's: its average over a sequence)")
    a3.set_ylabel("share of runs solved by the cap (k/n beside each)")
    a1.set_xlabel("training step")
    a1.set_ylabel("fraction of runs solved (1 - Kaplan-Meier)")
    a2.set_xscale("log", base=2)
    a2.set_xlabel("distance from key to query (bins from 2^k)")
    a2.set_ylabel("test accuracy of the solved runs, every count")
    for ax in (a1, a2, a3):
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8)
    fig.suptitle("How long each design takes to learn the lookup, what it recalls by distance, "
                 "and the smallest cache seen to learn it")
    return fig


def most_pairs(row):
    """The solved runs' mean test accuracy at the largest count, over every answer (a window's
    beyond it too: what it holds, where its solve rule reads only what it reaches), and N."""
    sc = [r["score"] for r, s in zip(row["runs"], row["solved"]) if s]
    counts = [int(k[len("test_acc_p"):]) for k in sc[0] if re.fullmatch(r"test_acc_p\d+", k)]
    key = f"test_acc_p{max(counts)}" if counts else "test_acc"
    return np.mean([x[key] for x in sc]), max(counts, default=None)


def frontier(rows):
    """Per design (the windows as one): the smallest cache seen to solve, with its solved runs'
    accuracy at the most pairs over every answer, and the largest cache seen to fail on every
    seed."""
    out = []
    for k in dict.fromkeys(map(kind, rows)):
        mine = [r for r in rows if kind(r) == k]
        held = min((r for r in mine if r["k"]), key=lambda r: r["kv"], default=None)
        lost = [r["kv"] for r in mine if not r["k"]]
        acc, N = most_pairs(held) if held else (None, None)
        out.append([DESIGNS[k].label if k != "window" else "Standard MHA, windows",
                    fmt(held and held["kv"], ".0f"), fmt(acc, ".3f") + (f" at {N}" if N else ""),
                    fmt(max(lost, default=None), ".0f")])
    return out


def survival_tables(rows):
    step = lambda t: "not reached" if t is None else str(t)  # noqa: E731
    head = ["d_model", "design", "KV B/token", "runs", "solved by the cap", "median step",
            "95% interval", "O - E", "log-rank p", "Holm", "Fisher p", "Holm", "whole test set",
            "censored: flat", "reading"]
    body = [[str(r["width"]), r["label"], fmt(r["kv"], ".0f"), str(r["n"]), f"{r['k']}/{r['n']}",
             step(r["median"]), f"{step(r['lo'])} to {step(r['hi'])}", fmt(r.get("o_e"), "+.1f"),
             fmt(r.get("p_lr"), ".2g"), fmt(r.get("p_lr_holm"), ".2g"), fmt(r.get("p_f"), ".2g"),
             fmt(r.get("p_f_holm"), ".2g"), f"{r['whole']}/{r['k']}",
             f"{r['flat']}/{r['n'] - r['k']}", r.get("reading", "-")] for r in rows]
    bins = (2, 4, 8, 16, 32, 64)
    dist = [[f"{r['label']}, {r['kv']:.0f} B", str(N),
             *(f"{cells[b][0] / cells[b][1]:.3f}" if b in cells else "-" for b in bins)]
            for r in rows for N, cells in sorted(pooled_distance(r["runs"]).items())]
    return (render(head, body)
            + "\n\nThe frontier: the smallest cache (KV bytes per token) seen to solve every "
            "count (a window: at the keys inside it), its solved runs' test accuracy at the most "
            "pairs over every answer (a window's beyond it too), and the largest cache seen to "
            "fail on every seed ('-': none):\n\n"
            + render(["design", "smallest solved", "there: accuracy, every answer, pairs",
                      "largest never"], frontier(rows))
            + "\n\nTest accuracy of the solved runs by the distance from key to query (every test "
            "example, pooled over seeds):\n\n"
            + render(["arm", "pairs", *(f"{b}-{2 * b - 1}" for b in bins)], dist))


def survival_mode(runs):
    """E7's table and figure from the finished runs (a score line) of runs that stop when
    solved."""
    rows = survival_rows(runs)
    if not rows:
        raise ValueError("no finished MQAR run (a score line with test_acc) to tabulate")
    notes = ["solved: the run stopped at the first eval whose learning-curve test accuracy (a "
             "quarter of the test set) reached its stop_acc at every pair count (a window: at the "
             "keys inside it); its step is the time to solve; a run that did not is censored at "
             "its cap",
             "median step: Kaplan-Meier's, with Brookmeyer and Crowley's 95% interval (the steps "
             "whose estimate lies within 1.96 Greenwood standard errors of 1/2); not reached: the "
             "curve never got to 1/2",
             "O - E: the arm's solved runs minus those expected were it MHA (negative: later); "
             "log-rank p, two-sided, and Fisher p, two-sided, of the share solved by the cap, each "
             "against MHA at the same width, each a Holm family over the arms it tests; whole test "
             "set: the solved runs whose score line, every test example, is at its stop_acc or "
             "above at every count; censored: flat, the runs censored at the cap whose last three "
             "curve accuracies lie within 0.02 of each other (the rest were still rising)",
             "reading (docs/plan.md, E7): as often, where the share solved by the cap is not "
             "established below MHA's (Fisher, Holm) and within 2 runs of it, later or sooner "
             "where log-rank establishes it too; more often where Fisher establishes more solved; "
             "fewer solved (established): can't tell capacity "
             "from learning where a censored run is flat, past the cap (it learns later than the "
             "cap allows) where every censored run was still rising; inconclusive where neither",
             "KV B/token: flops.py's, as the log's header gives it; a window's, the average over a "
             "sequence of block_size tokens, of which it holds min(block_size, W)"]
    return draw_survival(rows), survival_tables(rows), notes, ("figure_recall", "recall.md")

"""
Redraw Figure 4 of "Low-Rank Key Value Attention" (arXiv 2601.11471) from training logs:
test cross-entropy loss against training tokens (bottom axis) and cumulative training compute
(top axis), one line per attention design, seeds averaged with a min-max band. Also prints a
results table: each design's mean and standard deviation over seeds, its paired difference to MHA
(same seed, so same data order) with a paired t-test (95% interval, p), and the paper's metric,
how much sooner it reaches MHA's final loss. A gap is called established only where its interval
excludes zero. Two kinds of sweep draw something else:
  --pareto  final test loss against KV-cache size, one point per setting (LRKV's r, GQA's K/V
            heads, MLA's d_c), one line per design family, and the families paired at equal cache;
  --lr      final test loss against the Muon learning rate per design, and the comparison at the
            paper's rate beside each design at its own best rate.

It reads only the <dir>/<run>/log.jsonl files that train.py writes; it never imports torch. The
runs must be one experiment (the same shape, data, steps, batch and optimiser; per design the same
settings); it names any run that is not and stops, rather than average it in as a seed. It writes
figure_tokens.png/.pdf and results.md (figure_flops with --x=flops; figure_pareto and pareto.md
with --pareto; figure_lr and lr.md with --lr) into the folder of the first DIR.

python plot.py out/reproduce                     # what reproduce.sh draws
python plot.py out/reproduce --x=flops --paper --seeds
python plot.py out/pareto --pareto               # what SWEEP=pareto bash reproduce.sh draws
python plot.py out/lr --lr                       # what SWEEP=lr bash reproduce.sh draws
python plot.py out/matched out/reproduce/cpu_mha_s*   # parameter-matched designs against the figure's MHA
"""
import os
import sys
import json
import glob
import math
import argparse
from collections import Counter

import numpy as np
import matplotlib
matplotlib.use("Agg")  # we only write files, so never need a window (works with no display)
import matplotlib.pyplot as plt

from common import DESIGNS, LABELS, setting

# labels, colours and line styles of the paper's Figure 4 (DESIGNS is its legend order)
COLOURS = {"mha": ("tab:blue", "-"), "lrkv": ("tab:red", "-"), "mla": ("tab:purple", ":"),
           "gqa": ("tab:orange", "--"), "mqa": ("tab:green", "-")}
STYLE = {a: (LABELS[a], *COLOURS[a]) for a in DESIGNS}
# the paper's final test losses at 50B tokens (Table 9), for the figure's configuration only
PAPER_FINAL = {"mha": 2.740, "lrkv": 2.665, "mla": 2.714, "gqa": 2.704, "mqa": 2.728}
PAPER_TOKENS = 50e9
PAPER_SHAPE = {"n_layer": 24, "n_head": 12, "n_embd": 1536, "block_size": 8192}
# one experiment: these match across all runs, and these across the runs (seeds) of a design
SHAPE_KEYS = ["n_layer", "n_head", "n_embd", "block_size", "vocab_size", "attn_scale", "dataset", "tokenizer",
              "max_iters", "total_batch_tokens", "optimizer", "matrix_lr", "embed_lr", "head_lr", "weight_decay",
              "warmup_iters", "min_lr_frac"]
DESIGN_KEYS = ["n_kv_head", "lrkv_rank", "lrkv_factored", "mla_kv_rank", "mla_rope_dim", "mla_q_rank",
               "mla_deepseek", "mlp_hidden"]
PAPER_MATRIX_LR = 0.02  # muon.MATRIX_LR (a test keeps the two equal; plot.py never imports torch)
TOKEN_UNITS = [(1e9, "Billions"), (1e6, "Millions"), (1e3, "Thousands")]
FLOP_UNITS = [(1e18, "ExaFLOPs"), (1e15, "PetaFLOPs"), (1e12, "TeraFLOPs"), (1e9, "GigaFLOPs")]


def warn(msg):
    print(f"warning: {msg}", file=sys.stderr)


def find_runs(dirs):
    """log.jsonl paths under dirs; each may be a run folder, a folder of runs, or a log file."""
    paths, seen = [], set()
    for d in dirs:
        if not os.path.exists(d):
            raise FileNotFoundError(d)
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
    return paths


def load_run(path):
    """One run's header and eval points as numpy arrays. Raises ValueError for a bad header."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    header, steps, bad = None, [], []
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
            continue
        if isinstance(rec, dict) and rec.get("type") == "header":
            continue  # a resumed run appends another header; the first one describes the run
        if not (isinstance(rec, dict) and rec.get("type") == "step" and isinstance(rec.get("step"), int)
                and isinstance(rec.get("tokens"), (int, float))):
            bad.append(i)  # e.g. the last line of a run that is still writing it
            continue
        # a resumed run logs again from its checkpoint: the newest copy of a step wins, and steps
        # that the interrupted segment logged past the checkpoint go with it
        while steps and steps[-1]["step"] >= rec["step"]:
            steps.pop()
        steps.append(rec)
    if header is None:
        raise ValueError(f"{path}: empty log, no header line")
    attn = header.get("attn")
    if attn not in STYLE:
        raise ValueError(f"{path}: header attn is {attn!r}, expected one of {', '.join(DESIGNS)}")
    if bad:
        more = " ..." if len(bad) > 5 else ""
        warn(f"{path}: skipped unreadable line(s) {', '.join(map(str, bad[:5]))}{more}")
    evals = [s for s in steps if isinstance(s.get("test_loss"), (int, float))]
    config = header.get("config") if isinstance(header.get("config"), dict) else {}
    # fields that logs written before they existed lack, as their default then was
    config.setdefault("lrkv_factored", False)
    if "mlp_hidden" not in config and isinstance(config.get("n_embd"), int):
        config["mlp_hidden"] = 4 * config["n_embd"]
    nan = float("nan")
    return {
        "path": path,
        "name": header.get("run") or os.path.basename(os.path.dirname(path)),
        "attn": attn,
        "header": header,
        "config": config,
        "last_step": steps[-1]["step"] if steps else None,
        "step": np.array([s["step"] for s in evals], dtype=np.int64),
        "tokens": np.array([s["tokens"] for s in evals], dtype=float),
        "flops": np.array([s.get("flops", nan) for s in evals], dtype=float),
        "loss": np.array([s["test_loss"] for s in evals], dtype=float),
    }


def combine(runs):
    """Average a design's seeds over the eval steps all of them reached: mean, min and max curves."""
    label = STYLE[runs[0]["attn"]][0]
    for r in runs:
        if len(r["step"]) == 0:
            warn(f"{r['path']}: no eval yet, listed in the table but not drawn")
    runs = [r for r in runs if len(r["step"])]
    if not runs:
        return None
    common = set(runs[0]["step"].tolist()).intersection(*[r["step"].tolist() for r in runs[1:]])
    if not common:
        warn(f"{label}: the runs share no eval step, using {runs[0]['path']} only")
        runs, common = runs[:1], set(runs[0]["step"].tolist())
    steps = np.array(sorted(common))
    if any(r["step"][-1] > steps[-1] for r in runs):
        warn(f"{label}: averaging {len(runs)} runs up to step {steps[-1]}, the last eval all of them reached")
    pick = lambda key: np.stack([r[key][np.isin(r["step"], steps)] for r in runs])
    loss = pick("loss")
    return {
        "runs": runs, "step": steps,
        "tokens": pick("tokens").mean(0), "flops": pick("flops").mean(0),
        "loss": loss.mean(0), "lo": loss.min(0), "hi": loss.max(0),
    }


def reach(xs, losses, target):
    """First x at which the loss gets down to target, linear between eval points; None if never."""
    xs, losses = np.asarray(xs, dtype=float), np.asarray(losses, dtype=float)
    hit = np.nonzero(losses <= target)[0]
    if len(hit) == 0:
        return None
    i = hit[0]
    if i == 0:
        return float(xs[0])
    x0, x1, l0, l1 = xs[i - 1], xs[i], losses[i - 1], losses[i]
    return float(x0 + (l0 - target) / (l0 - l1) * (x1 - x0))


def betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (modified
    Lentz), which converges fast for x < (a + 1) / (a + b + 2); above, I_x(a, b) = 1 - I_{1-x}(b, a)."""
    if x <= 0 or x >= 1:
        return float(x >= 1)
    if x > (a + 1) / (a + b + 2):
        return 1 - betainc(b, a, 1 - x)
    front = math.exp(a * math.log(x) + b * math.log1p(-x) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)) / a
    tiny = 1e-300
    f, c, dd = tiny, tiny, 0.0
    for i in range(1000):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2:  # the odd terms d_{2m+1}
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        else:  # the even terms d_{2m}
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        dd = 1 + num * dd
        dd = 1 / (dd if abs(dd) > tiny else tiny)
        c = 1 + num / (c if abs(c) > tiny else tiny)
        f *= c * dd
        if abs(c * dd - 1) < 1e-15:
            break
    return front * f


def t_p(t, df):
    """Two-sided p-value of Student's t with df degrees of freedom: P(|T| >= |t|)."""
    return betainc(df / 2, 0.5, df / (df + t * t))


def t_quantile(q, df):
    """The t with P(T <= t) = q, for q > 1/2, by bisection on t_p (monotone in t)."""
    lo, hi = 0.0, 1.0
    while t_p(hi, df) > 2 * (1 - q):
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_p(mid, df) > 2 * (1 - q) else (lo, mid)
    return (lo + hi) / 2


def paired_t(d):
    """A paired t-test of the differences d (one per seed): n, their mean and sd, the 95% interval
    of the mean from the t distribution with n - 1 degrees of freedom, the two-sided p-value of
    mean 0, and whether the gap is established (the interval excludes 0). Needs n >= 2."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    out = {"pairs": n, "diff": float(d.mean()) if n else None, "diff_sd": None, "lo": None, "hi": None,
           "p": None, "established": None}
    if n < 2:
        return out
    m, sd = out["diff"], float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = t_quantile(0.975, n - 1) * se
    p = t_p(m / se, n - 1) if se > 0 else float(m == 0)  # every pair the same: no doubt about the mean
    return {**out, "diff_sd": sd, "lo": m - half, "hi": m + half, "p": p, "established": bool(m - half > 0 or m + half < 0)}


def final_losses(group, step):
    """{seed: test loss at step} of the runs that reached it."""
    return {r["config"].get("seed"): float(r["loss"][r["step"] == step][0]) for r in group if step in r["step"]}


def seed_stats(runs, base, step):
    """Final test loss at `step` over seeds: mean and sd, and the paired t-test of the difference
    to the base runs of the same seeds (paired_t). Runs that have not reached `step` are left out."""
    own, ref = final_losses(runs, step), final_losses(base or [], step)
    x = np.array(list(own.values()))
    paired = base is not None and base is not runs
    d = [own[k] - ref[k] for k in own if k in ref] if paired else []
    return {"mean": float(x.mean()) if len(x) else None, "sd": float(x.std(ddof=1)) if len(x) > 1 else None,
            **paired_t(d)}


def cache(header):
    """A run's KV-cache bytes per token, and their share of MHA's, as its header counts them."""
    kv, kv_mha = header.get("kv_bytes_per_token"), header.get("mha_kv_bytes_per_token")
    return {"kv": kv, "kv_pct": kv / kv_mha if kv is not None and kv_mha else None}


def summarize(runs):
    """One row per design present, in legend order, with its averaged curve and table values."""
    rows = []
    for attn in DESIGNS:
        group = [r for r in runs if r["attn"] == attn]
        if not group:
            continue
        h, c = group[0]["header"], combine(group)
        rows.append({**cache(h),
            "attn": attn, "label": STYLE[attn][0], "n": len(group), "curve": c,
            "tokens": c["tokens"][-1] if c else None, "flops": c["flops"][-1] if c else None,
            "loss": c["loss"][-1] if c else None,
            "params": h.get("params"), "fpt": h.get("flops_per_token"), "paper_fpt": h.get("paper_flops_per_token"),
            "reach_tokens": None, "reach_flops": None, "faster_tokens": None, "faster_flops": None,
            "miss": "-",  # what the reach columns say when the design does not get there
        })
    # the paper's metric: how much sooner a design gets down to the baseline's final test loss.
    # The baseline's own reference point is its final eval, i.e. its whole training budget.
    base = next((r for r in rows if r["attn"] == "mha" and r["curve"]), None)
    for r in rows:
        c = r["curve"]
        r.update(seed_stats(c["runs"], base and base["curve"]["runs"], c["step"][-1]) if c else
                 seed_stats([], None, None))
    if base is None:
        return rows
    for r in rows:
        c = r["curve"]
        if c is None:
            continue
        if r is base:
            r["reach_tokens"], r["reach_flops"] = base["tokens"], base["flops"]
        else:
            r["reach_tokens"] = reach(c["tokens"], c["loss"], base["loss"])
            r["reach_flops"] = reach(c["flops"], c["loss"], base["loss"])
        if r["reach_tokens"] is not None:
            r["faster_tokens"] = 1 - r["reach_tokens"] / base["tokens"]
        if r["reach_flops"] is not None:
            r["faster_flops"] = 1 - r["reach_flops"] / base["flops"]
        r["miss"] = "not yet" if r["tokens"] < base["tokens"] else "never"  # a shorter run may still get there
    return rows


def odd_runs(runs, sweep=False, lr=False):
    """'name (how it differs)' for every run outside the experiment that most runs are: another
    shape, data, length, batch or optimiser setting than the largest group (but the Muon rate in a
    learning-rate sweep), or (unless a sweep of settings) other settings than most of its design."""
    odd = set()  # ids: a run holds numpy arrays, so `in` on a list of runs would compare them

    def split(group, keys):
        key = lambda r: tuple(r["config"].get(k) for k in keys)
        common = Counter(map(key, group)).most_common(1)[0][0]
        for r in group:
            if key(r) != common:
                odd.add(id(r))
                yield r["name"] + " (" + ", ".join(f"{k}={v} not {c}" for k, v, c in zip(keys, key(r), common)
                                                   if v != c) + ")"

    why = list(split(runs, [k for k in SHAPE_KEYS if not (lr and k == "matrix_lr")]))
    for attn in DESIGNS if not sweep else []:
        group = [r for r in runs if r["attn"] == attn and id(r) not in odd]
        why += list(split(group, DESIGN_KEYS)) if group else []
    return why


def sweep(runs):
    """The rows of a sweep: one per setting (a design and its cache settings), seeds averaged at the
    sweep's final eval step, in legend order and by cache size. A setting none of whose seeds has
    got there yet is listed with no loss."""
    groups = {}
    for r in runs:
        groups.setdefault((r["attn"], tuple(r["config"].get(k) for k in DESIGN_KEYS)), []).append(r)
    step = max((r["step"][-1] for r in runs if len(r["step"])), default=None)
    base = next((g for (attn, _), g in groups.items() if attn == "mha"), None)
    rows = []
    for (attn, _), group in groups.items():
        rows.append({"attn": attn, "label": STYLE[attn][0], "setting": setting({**group[0]["config"], "attn": attn}),
                     "n": sum(step in r["step"] for r in group), "step": step, "runs": group,
                     **cache(group[0]["header"]), **seed_stats(group, base, step)})
    return sorted(rows, key=lambda r: (DESIGNS.index(r["attn"]), r["kv_pct"] or 0))


def budget_pairs(rows):
    """Settings of two design families at nearly equal cache, paired seed by seed: a pair is two
    settings each of which is the other family's nearest in cache size (ties to the smaller cache),
    so a setting meets at most one of each other family. Δ is the earlier family (legend order)
    minus the later."""
    fams = [[r for r in rows if r["attn"] == a and r["kv_pct"] is not None] for a in DESIGNS if a != "mha"]
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
    for attn in DESIGNS:
        pts = [r for r in rows if r["attn"] == attn and r["mean"] is not None and r["kv_pct"] is not None]
        if not pts:
            continue
        label, color, ls = STYLE[attn]
        x, y = [100 * r["kv_pct"] for r in pts], [r["mean"] for r in pts]
        ax.errorbar(x, y, yerr=[r["sd"] or 0 for r in pts], color=color, linestyle=ls, marker="o", capsize=3,
                    label=label)
        for r, xi, yi in zip(pts, x, y):
            ax.annotate(r["setting"], (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)
        if attn == "mha":  # the baseline's loss across the whole budget axis
            ax.axhline(y[0], color=color, linestyle=":", linewidth=1, alpha=0.6)
    return sweep_axes(fig, ax, "KV cache per token (% of MHA's)", "What a cache budget buys")


def sweep_axes(fig, ax, xlabel, title):
    # a sweep's figure: final loss (mean ± sd over seeds) against the swept setting
    ax.set_xlabel(xlabel)
    ax.set_ylabel("Final Test Cross-Entropy Loss (mean over seeds, ± sd)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(loc="upper right")
    fig.tight_layout()
    return fig, ax


def pareto_table(rows, markdown=False):
    head = ["design", "setting", "KV % MHA", "KV B/tok", "seeds", "test loss", "sd", *gap_head()]
    body = [[r["label"], r["setting"] or "-", fmt(r["kv_pct"], ".1%"), fmt(r["kv"], ".0f"), str(r["n"]),
             fmt(r["mean"], ".4f"), fmt(r["sd"], ".4f"), *gap(r)] for r in rows]
    return render(head, body, markdown)


def pairs_table(pairs, markdown=False):
    name = lambda r: f"{r['label']} {r['setting'] or ''}".strip()
    head = ["pair", "KV % MHA", *gap_head("Δ")]
    body = [[f"{name(q['a'])} - {name(q['b'])}", f"{fmt(q['a']['kv_pct'], '.1%')} vs {fmt(q['b']['kv_pct'], '.1%')}",
             *gap(q)] for q in pairs]
    return render(head, body, markdown)


def lr_sweep(runs):
    """A learning-rate sweep: per design and Muon rate (matrix_lr), the final test loss over the
    seeds that every design has at every rate, so each mean is over the same seeds. Returns
    (rows, summary): rows per design and rate, Δ paired against the design at the paper's rate;
    summary per design, Δ MHA at the paper's rate beside Δ MHA's best at the design's own best
    (the rate with the lowest mean)."""
    step = max((r["step"][-1] for r in runs if len(r["step"])), default=None)
    groups = {}
    for r in runs:
        groups.setdefault((r["attn"], r["config"].get("matrix_lr")), []).append(r)
    seeds = set.intersection(*[set(final_losses(g, step)) for g in groups.values()]) if groups else set()
    dropped = [r["name"] for g in groups.values() for r in g if r["config"].get("seed") not in seeds]
    if dropped:
        warn(f"left out {len(dropped)} run(s) whose seed not every design and rate has: {', '.join(sorted(dropped))}")
    groups = {k: [r for r in g if r["config"].get("seed") in seeds] for k, g in groups.items()}
    rows, summary = [], []
    for attn in DESIGNS:
        rates = sorted(lr for a, lr in groups if a == attn)
        if not rates:
            continue
        paper = groups.get((attn, PAPER_MATRIX_LR))
        for lr in rates:
            rows.append({"attn": attn, "label": STYLE[attn][0], "lr": lr, "n": len(seeds), "step": step,
                         **seed_stats(groups[(attn, lr)], paper, step)})
        own = [r for r in rows if r["attn"] == attn]
        best = min(own, key=lambda r: r["mean"] if r["mean"] is not None else math.inf)
        summary.append({"attn": attn, "label": STYLE[attn][0], "best": best["lr"], "runs": groups[(attn, best["lr"])],
                        "paper_runs": paper, "n": len(seeds), "edge": len(rates) > 2 and best["lr"] in (rates[0], rates[-1])})
    base = next((s for s in summary if s["attn"] == "mha"), None)
    for s in summary:
        at_paper = seed_stats(s["paper_runs"], base and base["paper_runs"], step) if s["paper_runs"] else {}
        at_best = seed_stats(s["runs"], base and base["runs"], step)
        s["paper"], s["own"] = at_paper, at_best
    return rows, summary


def draw_lr(rows, summary):
    """Final test loss against the Muon rate, one line per design, sd error bars, each best ringed."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for attn in DESIGNS:
        pts = [r for r in rows if r["attn"] == attn and r["mean"] is not None]
        if not pts:
            continue
        label, color, ls = STYLE[attn]
        x = [r["lr"] for r in pts]
        ax.errorbar(x, [r["mean"] for r in pts], yerr=[r["sd"] or 0 for r in pts], color=color, linestyle=ls,
                    marker="o", capsize=3, label=label)
        best = next(s["best"] for s in summary if s["attn"] == attn)
        ax.scatter([best], [next(r["mean"] for r in pts if r["lr"] == best)], s=160, facecolors="none",
                   edgecolors=color, linewidth=1.5, zorder=3)
    ax.axvline(PAPER_MATRIX_LR, color="gray", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    return sweep_axes(fig, ax, "Muon learning rate (matrix_lr; dotted: the paper's)", "Each design's learning rate")


def lr_tables(rows, summary, markdown=False):
    head = ["design", "matrix_lr", "x paper", "seeds", "test loss", "sd", *gap_head("Δ paper rate")]
    body = [[r["label"], fmt(r["lr"], ".4g"), fmt(r["lr"] / PAPER_MATRIX_LR, ".3g"), str(r["n"]), fmt(r["mean"], ".4f"),
             fmt(r["sd"], ".4f"), *gap(r)] for r in rows]
    head2 = ["design", "seeds", "at the paper's rate: Δ MHA", "95% CI", "p", "own best rate (x paper)",
             "at own best: Δ MHA at its best", "95% CI", "p"]
    body2 = [[s["label"], str(s["n"]), *gap(s["paper"])[1:4],
              f"{fmt(s['best'], '.4g')} (x{fmt(s['best'] / PAPER_MATRIX_LR, '.3g')}{', edge' if s['edge'] else ''})",
              *gap(s["own"])[1:4]]
             for s in summary]
    return render(head, body, markdown) + "\n\n" + render(head2, body2, markdown)


def paper_config(runs):
    """(True, '') if every run is the figure's configuration, else (False, why not)."""
    for r in runs:
        got = [r["config"].get(k) for k in PAPER_SHAPE]
        if got != list(PAPER_SHAPE.values()):
            return False, (f"{r['name']} is {'/'.join(map(str, got))}, the figure's runs are "
                           f"{'/'.join(map(str, PAPER_SHAPE.values()))} ({'/'.join(PAPER_SHAPE)})")
    return True, ""


def unit(x, units):
    """The largest unit not above x, e.g. 3.2e8 tokens -> (1e6, 'Millions')."""
    for scale, name in units:
        if x >= scale:
            return scale, name
    return units[-1]


def draw(rows, x="tokens", paper=False, seeds=False, xmin=0.1):
    """The figure; returns (fig, ax, top axis or None)."""
    curves = [r for r in rows if r["curve"]]
    # The top axis converts with a single FLOPs/token ratio; the designs' own ratios differ by a few
    # percent, so it uses MHA's (the baseline), or the first design's, and the caption says so.
    ref = next((r for r in rows if r["attn"] == "mha" and r["fpt"]), None) or next((r for r in rows if r["fpt"]), None)
    ratio = ref["fpt"] if ref else None
    key = "tokens" if x == "tokens" else "flops"
    main_units, top_units = (TOKEN_UNITS, FLOP_UNITS) if x == "tokens" else (FLOP_UNITS, TOKEN_UNITS)
    xmax = max([r["curve"][key][-1] for r in curves], default=0.0) or 1.0  # 1.0: nothing past step 0 yet
    paper_x = None
    if paper and ratio:
        paper_x = PAPER_TOKENS if x == "tokens" else PAPER_TOKENS * ratio  # the paper's final point, 50B tokens
        xmax = max(xmax, paper_x)
    ms, mname = unit(xmax, main_units)
    names = {"tokens": "Training Tokens ({})", "flops": "Training Compute ({})"}

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for r in curves:
        label, color, ls = STYLE[r["attn"]]
        c = r["curve"]
        ax.plot(c[key] / ms, c["loss"], color=color, linestyle=ls, linewidth=2, label=label)
        if len(c["runs"]) > 1:
            ax.fill_between(c[key] / ms, c["lo"], c["hi"], color=color, alpha=0.15, linewidth=0)
        if seeds:  # each seed's own curve, thin and unlabelled
            for run in c["runs"]:
                ax.plot(run[key] / ms, run["loss"], color=color, linestyle=ls, linewidth=0.7, alpha=0.5)
    if paper_x is not None:
        for attn in DESIGNS:
            ax.scatter([paper_x / ms], [PAPER_FINAL[attn]], marker="*", s=140, color=STYLE[attn][1],
                       edgecolor="black", linewidth=0.5, zorder=3)
        ax.scatter([], [], marker="*", s=140, color="lightgray", edgecolor="black", linewidth=0.5,
                   label="Paper, Table 9 (50B tokens)")

    # the paper's figure starts at 5B of 50B tokens, past the steep early drop: start the view at
    # the same fraction of the longest run and fit the y range to what is in view
    lo_x, hi_x = xmin * xmax / ms, xmax / ms
    ys = list(PAPER_FINAL.values()) if paper_x is not None else []
    for r in curves:
        c = r["curve"]
        xs = c[key] / ms
        keep = xs >= lo_x
        ys += c["lo"][keep].tolist() + c["hi"][keep].tolist()
        if xs[0] < lo_x <= xs[-1]:  # where the line enters the view
            ys += [np.interp(lo_x, xs, c["lo"]), np.interp(lo_x, xs, c["hi"])]
    ys = [y for y in ys if np.isfinite(y)]
    ax.set_xlim(lo_x, hi_x * 1.02)
    if ys:
        pad = 0.05 * (max(ys) - min(ys)) or 0.05
        ax.set_ylim(min(ys) - pad, max(ys) + pad)

    ax.set_xlabel(names[key].format(mname))
    ax.set_ylabel("Test Cross-Entropy Loss")
    top, flop_name = None, mname
    if ratio:
        ts, tname = unit(xmax * (ratio if x == "tokens" else 1 / ratio), top_units)
        k = ms / ts * (ratio if x == "tokens" else 1 / ratio)  # main-axis units -> top-axis units
        top = ax.secondary_xaxis("top", functions=(lambda v: v * k, lambda v: v / k))
        top.set_xlabel(names["flops" if x == "tokens" else "tokens"].format(tname))
        flop_name = tname if x == "tokens" else mname
        spread = max(abs(r["fpt"] / ratio - 1) for r in rows if r["fpt"])
        how = "Top axis: tokens ×" if x == "tokens" else "Bottom axis: each design's own compute; top axis: compute ÷"
        fig.text(0.01, 0.01, f"{how} {ref['label']}'s {fmt(ratio, 'sci')} training FLOPs/token "
                 f"(the designs' own differ by up to {spread:.1%})", fontsize=7, color="gray")
    else:
        warn("no flops_per_token in any header: no compute axis")
    ax.set_title(f"Training Compute ({flop_name}) vs. Test Cross-Entropy Loss")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(loc="upper right")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig, ax, top


def fmt(x, how):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "-"
    if how == "count":  # params, tokens
        for scale, s in [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")]:
            if abs(x) >= scale:
                return f"{x / scale:.3g}{s}"
        return f"{x:.0f}"
    if how == "sci":  # FLOPs: 3.07e9
        return f"{x:.3g}".replace("e+0", "e").replace("e+", "e")
    return format(x, how)


def gap_head(delta="Δ MHA"):
    return ["pairs", delta, "95% CI", "p", "established"]


def gap(r):
    """The paired t-test's columns (paired_t): pairs, mean Δ, its 95% interval, p, established."""
    if r.get("diff") is None:
        return ["0", "-", "-", "-", "-"]
    ci = f"[{r['lo']:+.4f}, {r['hi']:+.4f}]" if r["lo"] is not None else "-"
    return [str(r["pairs"]), fmt(r["diff"], "+.4f"), ci, fmt(r["p"], ".2g"),
            {True: "yes", False: "no", None: "-"}[r["established"]]]


def table(rows, markdown=False):
    """The results table as aligned plain text, or as markdown."""
    head = ["design", "seeds", "tokens", "test loss", "sd", *gap_head(), "KV B/tok", "KV % MHA",
            "params", "FLOPs/tok", "6N/tok", "faster", "faster (compute)"]
    body = [[r["label"], str(r["n"]), fmt(r["tokens"], "count"), fmt(r["loss"], ".4f"), fmt(r["sd"], ".4f"),
             *gap(r), fmt(r["kv"], ".0f"), fmt(r["kv_pct"], ".1%"), fmt(r["params"], "count"),
             fmt(r["fpt"], "sci"), fmt(r["paper_fpt"], "sci"),
             fmt(r["faster_tokens"], "+.1%") if r["reach_tokens"] is not None else r["miss"],
             fmt(r["faster_flops"], "+.1%") if r["reach_flops"] is not None else r["miss"]] for r in rows]
    return render(head, body, markdown)


def render(head, body, markdown):
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    w = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    line = lambda row: "  ".join(row[0].ljust(w[0]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(row))
    return "\n".join(line(row) for row in [head] + body)


def main(argv=None):
    p = argparse.ArgumentParser(description="Redraw the paper's Figure 4 from out/<run>/log.jsonl files.")
    p.add_argument("dirs", nargs="*", default=["out"], help="run folders or folders of runs (default: out)")
    p.add_argument("--out", help="where the figure and results.md go (default: the first of DIRS)")
    p.add_argument("--x", choices=["tokens", "flops"], default="tokens", help="main x axis (flops: equal compute)")
    p.add_argument("--paper", action="store_true", help="mark the paper's final losses (figure's config only)")
    p.add_argument("--seeds", action="store_true", help="also draw and list every seed's own run")
    p.add_argument("--xmin", type=float, default=0.1, help="start the view at this fraction of the x range")
    p.add_argument("--pareto", action="store_true", help="a sweep: final loss against KV-cache size per setting")
    p.add_argument("--lr", action="store_true", help="a learning-rate sweep: final loss against the Muon rate")
    args = p.parse_args(argv)

    dirs = args.dirs
    try:
        paths = find_runs(dirs)
    except FileNotFoundError as e:
        print(f"plot.py: no such file or folder: {e}", file=sys.stderr)
        return 2
    if not paths:
        print(f"plot.py: no log.jsonl in {', '.join(dirs)} (looked for <dir>/log.jsonl and <dir>/*/log.jsonl); "
              f"make some with `python train.py`", file=sys.stderr)
        return 2
    runs, skipped = [], []
    for path in paths:
        try:
            runs.append(load_run(path))
        except (ValueError, OSError) as e:
            skipped.append(str(e))
    if not runs:
        print(f"plot.py: no usable run: {'; '.join(skipped)}", file=sys.stderr)
        return 2
    for msg in skipped:
        warn(f"skipping {msg}")

    if args.pareto and args.lr:
        print("plot.py: --pareto and --lr are two kinds of sweep: pass one", file=sys.stderr)
        return 2
    odd = odd_runs(runs, sweep=args.pareto, lr=args.lr)
    if odd:
        print(f"plot.py: not one experiment, so not averaged: {'; '.join(odd)}; move these runs to a folder of "
              f"their own and plot each folder{'' if args.pareto or args.lr else '; a sweep? add --pareto or --lr'}",
              file=sys.stderr)
        return 2
    rule = ("Δ: the mean over the seeds both sides ran (pairs) of the difference in final test loss, seed by seed; "
            "95% CI from the t distribution with pairs - 1 degrees of freedom; p: two-sided paired t-test; "
            "established when the interval excludes 0 ('-' with fewer than two pairs). Of k comparisons with no "
            "gap, about 0.05·k are established by chance")
    if args.pareto:
        rows = sweep(runs)
        pairs = budget_pairs(rows)
        fig, ax = draw_pareto(rows)
        text = pareto_table(rows) + "\n\n" + pairs_table(pairs)
        md_table = pareto_table(rows, markdown=True) + "\n\nAt nearly equal cache:\n\n" + pairs_table(pairs, markdown=True)
        notes = [f"final test loss at step {rows[0]['step']} of every setting (mean over the seeds that reached "
                 f"it); KV cache per token as the run's header counts it", rule,
                 "at nearly equal cache: two settings of two families, each the other family's nearest in cache size"]
        name, md_name = "figure_pareto", "pareto.md"
    elif args.lr:
        rows, summary = lr_sweep(runs)
        fig, ax = draw_lr(rows, summary)
        text, md_table = lr_tables(rows, summary), lr_tables(rows, summary, markdown=True)
        notes = [f"final test loss at step {rows[0]['step']}, each design at each Muon rate (matrix_lr; the AdamW "
                 f"rates as the runs set them), over the seeds every design has at every rate", rule,
                 "Δ paper rate: the design at this rate minus itself at the paper's; own best: the rate of its lowest "
                 "mean, chosen on the same seeds it is compared on (which flatters every design a little); edge: "
                 "the lowest or highest rate swept, so the design's own optimum may lie beyond it"]
        name, md_name = "figure_lr", "lr.md"
    else:
        rows = summarize(runs)
        paper = False
        if args.paper:
            paper, why = paper_config(runs)
            if not paper:
                print(f"note: --paper overlay skipped: {why}")
        fig, ax, top = draw(rows, x=args.x, paper=paper, seeds=args.seeds, xmin=args.xmin)
        text, md_table = table(rows), table(rows, markdown=True)
        base = next((r for r in rows if r["attn"] == "mha" and r["curve"]), None)
        notes = [f"target: Standard MHA's final test loss {base['loss']:.4f} at {fmt(base['tokens'], 'count')} "
                 f"tokens; faster = 1 - design/MHA tokens (or FLOPs) to get there, interpolated between evals"
                 if base else "no Standard MHA run with an eval: nothing to measure 'faster' against", rule]
        if args.seeds:
            for r in runs:
                last = f"{r['loss'][-1]:.4f} at step {r['step'][-1]}" if len(r["step"]) else "no eval yet"
                notes.append(f"run {r['name']} ({r['attn']}, seed {r['config'].get('seed', '?')}): {last}")
        name, md_name = f"figure_{args.x}", "results.md"
    print(text)
    print("\n".join(notes))

    out = args.out or (dirs[0] if os.path.isdir(dirs[0]) else os.path.dirname(dirs[0]))  # beside the logs
    png, pdf, md = (os.path.join(out, f) for f in (f"{name}.png", f"{name}.pdf", md_name))
    try:
        os.makedirs(out, exist_ok=True)
        fig.savefig(png, dpi=150)
        fig.savefig(pdf)
        with open(md, "w") as f:
            f.write("# Results\n\n" + md_table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    except OSError as e:
        print(f"plot.py: cannot write to {out}: {e}", file=sys.stderr)
        return 2
    plt.close(fig)
    print(f"wrote {png}, {pdf} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

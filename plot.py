"""
Redraw Figure 4 of "Low-Rank Key Value Attention" (arXiv 2601.11471) from training logs:
test cross-entropy loss against training tokens (bottom axis) and cumulative training compute
(top axis), one line per attention design, seeds averaged with a min-max band. Also prints a
results table: each design's mean and standard deviation over seeds, its paired difference to MHA
(same seed, so same data order), and the paper's metric, how much sooner it reaches MHA's final loss.
With --pareto it draws a sweep instead: final test loss against KV-cache size, one point per
setting (LRKV's r, GQA's K/V heads, MLA's d_c), one line per design family.

It reads only the <dir>/<run>/log.jsonl files that train.py writes; it never imports torch. The
runs must be one experiment (the same shape, data, steps and batch; per design the same settings);
it names any run that is not and stops, rather than average it in as a seed. It writes
figure_tokens.png/.pdf and results.md (figure_flops with --x=flops; figure_pareto and pareto.md
with --pareto) into the folder of the runs.

python plot.py out/reproduce                     # what reproduce.sh draws
python plot.py out/reproduce --x=flops --paper --seeds
python plot.py out/pareto --pareto               # what SWEEP=pareto bash reproduce.sh draws
"""
import os
import sys
import json
import glob
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
              "max_iters", "total_batch_tokens"]
DESIGN_KEYS = ["n_kv_head", "lrkv_rank", "lrkv_factored", "mla_kv_rank", "mla_rope_dim", "mla_q_rank",
               "mla_deepseek"]
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


def seed_stats(runs, base, step):
    """Final test loss at `step` over seeds: mean, sd, and the paired difference to the base runs
    (same seed): its mean, its sd, and whether the gap is established, |mean| > 2 sd of the
    differences (needs two pairs or more). Runs that have not reached `step` are left out."""
    def at(group):
        return {r["config"].get("seed"): float(r["loss"][r["step"] == step][0]) for r in group if step in r["step"]}
    own, ref = at(runs), at(base or [])
    x = np.array(list(own.values()))
    d = np.array([own[k] - ref[k] for k in own if k in ref])
    sd = lambda a: float(a.std(ddof=1)) if len(a) > 1 else None
    paired = base is not None and base is not runs and len(d) > 0
    return {"mean": float(x.mean()) if len(x) else None, "sd": sd(x), "pairs": len(d) if paired else 0,
            "diff": float(d.mean()) if paired else None, "diff_sd": sd(d) if paired else None,
            "real": bool(abs(d.mean()) > 2 * sd(d)) if paired and len(d) > 1 else None}


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


def odd_runs(runs, sweep=False):
    """'name (how it differs)' for every run outside the experiment that most runs are: another
    shape, data, length or batch than the largest group, or (unless a sweep of settings) other
    settings than most of its design."""
    odd = set()  # ids: a run holds numpy arrays, so `in` on a list of runs would compare them

    def split(group, keys):
        key = lambda r: tuple(r["config"].get(k) for k in keys)
        common = Counter(map(key, group)).most_common(1)[0][0]
        for r in group:
            if key(r) != common:
                odd.add(id(r))
                yield r["name"] + " (" + ", ".join(f"{k}={v} not {c}" for k, v, c in zip(keys, key(r), common)
                                                   if v != c) + ")"

    why = list(split(runs, SHAPE_KEYS))
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
                     "n": sum(step in r["step"] for r in group), "step": step, **cache(group[0]["header"]),
                     **seed_stats(group, base, step)})
    return sorted(rows, key=lambda r: (DESIGNS.index(r["attn"]), r["kv_pct"] or 0))


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
    ax.set_xlabel("KV cache per token (% of MHA's)")
    ax.set_ylabel("Final Test Cross-Entropy Loss (mean over seeds, ± sd)")
    ax.set_title("What a cache budget buys")
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(loc="upper right")
    fig.tight_layout()
    return fig, ax


def pareto_table(rows, markdown=False):
    head = ["design", "setting", "KV % MHA", "KV B/tok", "seeds", "test loss", "sd", "Δ MHA", "sd Δ", "gap"]
    body = [[r["label"], r["setting"] or "-", fmt(r["kv_pct"], ".1%"), fmt(r["kv"], ".0f"), str(r["n"]),
             fmt(r["mean"], ".4f"), fmt(r["sd"], ".4f"), *gap(r)] for r in rows]
    return render(head, body, markdown)


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


def gap(r):
    """The paired-difference columns: Δ MHA, its sd, and whether the gap is established."""
    if r["diff"] is None:
        return ["-", "-", "-"]
    return [fmt(r["diff"], "+.4f"), fmt(r["diff_sd"], ".4f"), {True: "real", False: "noise", None: "-"}[r["real"]]]


def table(rows, markdown=False):
    """The results table as aligned plain text, or as markdown."""
    head = ["design", "seeds", "tokens", "test loss", "sd", "Δ MHA", "sd Δ", "gap", "KV B/tok", "KV % MHA",
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

    odd = odd_runs(runs, sweep=args.pareto)
    if odd:
        print(f"plot.py: not one experiment, so not averaged: {'; '.join(odd)}; move these runs to a folder of "
              f"their own and plot each folder{'' if args.pareto else '; a sweep of settings? add --pareto'}",
              file=sys.stderr)
        return 2
    rule = ("Δ MHA: the mean over seeds of (design - MHA) in final test loss, same seed; gap 'real' when "
            "|Δ| > 2 sd of those differences, 'noise' when not, '-' with fewer than two pairs")
    if args.pareto:
        rows = sweep(runs)
        fig, ax = draw_pareto(rows)
        text, md_table = pareto_table(rows), pareto_table(rows, markdown=True)
        notes = [f"final test loss at step {rows[0]['step']} of every setting (mean over the seeds that reached "
                 f"it); KV cache per token as the run's header counts it", rule]
        name, md_name = "figure_pareto", "pareto.md"
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

"""
The figure's numbers: each design's seeds averaged into one learning curve, its final loss paired
with MHA's seed by seed, and the paper's metric, how much sooner it reaches MHA's final loss (with
a bootstrap interval). numpy only, never torch.
"""
import numpy as np

from common import DESIGNS, warn
from analysis.stats import family, final_losses, seed_stats
from analysis.logs import cache


def combine(runs):
    """Average a design's seeds over the eval steps all of them reached: mean, min, max curves."""
    label = DESIGNS[runs[0]["attn"]].label
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
        warn(f"{label}: averaging {len(runs)} runs up to step {steps[-1]}, "
             f"the last eval all of them reached")
    pick = lambda key: np.stack([r[key][np.isin(r["step"], steps)] for r in runs])
    loss = pick("loss")
    return {"runs": runs, "step": steps, "tokens": pick("tokens").mean(0),
            "flops": pick("flops").mean(0), "loss": loss.mean(0), "lo": loss.min(0), "hi": loss.max(0)}


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


def summarize(runs):
    """One row per design present, in legend order, with its averaged curve and table values."""
    rows = []
    for attn in DESIGNS:
        group = [r for r in runs if r["attn"] == attn]
        if not group:
            continue
        h, c = group[0]["header"], combine(group)
        last = lambda key: c[key][-1] if c else None
        rows.append({**cache(h), "attn": attn, "label": DESIGNS[attn].label, "n": len(group),
                     "curve": c, "tokens": last("tokens"), "flops": last("flops"), "loss": last("loss"),
                     "params": h.get("params"), "fpt": h.get("flops_per_token"),
                     "paper_fpt": h.get("paper_flops_per_token"), "reach_tokens": None,
                     "reach_flops": None, "faster_tokens": None, "faster_flops": None,
                     "miss": "-"})  # what the reach columns say when the design does not get there
    # the paper's metric: how much sooner a design gets down to the baseline's final test loss.
    # The baseline's own reference point is its final eval, i.e. its whole training budget.
    base = next((r for r in rows if r["attn"] == "mha" and r["curve"]), None)
    for r in rows:
        c = r["curve"]
        r.update(seed_stats(c["runs"], base and base["curve"]["runs"], c["step"][-1]) if c else
                 seed_stats([], None, None))
        if base is None or c is None:
            continue
        for x in ("tokens", "flops"):
            r[f"reach_{x}"] = base[x] if r is base else reach(c[x], c["loss"], base["loss"])
            if r[f"reach_{x}"] is not None:
                r[f"faster_{x}"] = 1 - r[f"reach_{x}"] / base[x]
            if r is not base:
                r[f"faster_{x}_ci"] = faster_interval(c, base["curve"], x)
        # a shorter run may still get there
        r["miss"] = "not yet" if r["tokens"] < base["tokens"] else "never"
    return family(rows)


def faster_interval(c, base, x, resamples=10_000):
    """The 95% percentile interval of 'faster' (1 - x to reach MHA's final loss / MHA's x) over
    bootstrap resamples of the seeds both curves have, each seed drawn with MHA's same seed
    (numpy's generator, seed 0; docs/plan.md). -inf where a resample never gets there. None with
    fewer than two such seeds."""
    seed = lambda r: r["config"].get("seed")
    mine = {seed(r): r for r in c["runs"]}
    pairs = [(mine[seed(b)], b) for b in base["runs"] if seed(b) in mine]
    if len(pairs) < 2:
        return None
    at = lambda r, steps: r["loss"][np.isin(r["step"], steps)]
    own = np.stack([at(a, c["step"]) for a, _ in pairs])  # (seeds, evals)
    ref = np.stack([at(b, base["step"])[-1:] for _, b in pairs])[:, 0]  # MHA's final eval per seed
    pick = np.random.default_rng(0).integers(0, len(pairs), (resamples, len(pairs)))
    loss, target = own[pick].mean(1), ref[pick].mean(1)  # (resamples, evals), (resamples,)
    hit = loss <= target[:, None]
    i = hit.argmax(1)  # the first eval at or below the target
    xs, prev = c[x][i], c[x][np.maximum(i - 1, 0)]
    l0, l1 = loss[np.arange(resamples), np.maximum(i - 1, 0)], loss[np.arange(resamples), i]
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = np.where((i > 0) & (l0 > l1), prev + (l0 - target) / (l0 - l1) * (xs - prev), xs)
    faster = np.where(hit.any(1), 1 - cross / base[x][-1], -np.inf)
    lo, hi = np.quantile(faster, [0.025, 0.975], method="inverted_cdf")
    return float(lo), float(hi)



def deltas(runs, split="test"):
    """{design: its final loss on split minus MHA's, seed by seed} at the runs' last eval step."""
    step = max((r["step"][-1] for r in runs if len(r["step"])), default=None)
    base = final_losses([r for r in runs if r["attn"] == "mha"], step, split)
    out = {}
    for attn in DESIGNS:
        own = final_losses([r for r in runs if r["attn"] == attn], step, split)
        if attn != "mha" and own:
            out[attn] = [own[k] - base[k] for k in sorted(own) if k in base]
    return out


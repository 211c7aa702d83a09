"""
The statistics plot.py reports, with no scipy: Student's t distribution from the regularised
incomplete beta function, the paired t-test of a gap over seeds, a setting's final losses, and the
columns a gap takes in a Markdown table. numpy and math only, so plot.py stays light.
"""
import math

import numpy as np


def betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (modified
    Lentz), which converges fast for x < (a + 1) / (a + b + 2); above, use
    I_x(a, b) = 1 - I_{1-x}(b, a)."""
    if x <= 0 or x >= 1:
        return float(x >= 1)
    if x > (a + 1) / (a + b + 2):
        return 1 - betainc(b, a, 1 - x)
    front = math.exp(a * math.log(x) + b * math.log1p(-x)
                     + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)) / a
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
    out = {"pairs": n, "diff": float(d.mean()) if n else None, "diff_sd": None, "lo": None,
           "hi": None, "p": None, "established": None}
    if n < 2:
        return out
    m, sd = out["diff"], float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = t_quantile(0.975, n - 1) * se
    p = t_p(m / se, n - 1) if se > 0 else float(m == 0)  # every pair the same: no doubt of the mean
    return {**out, "diff_sd": sd, "lo": m - half, "hi": m + half, "p": p,
            "established": bool(m - half > 0 or m + half < 0)}


def final_losses(group, step):
    """{seed: test loss at step} of the runs (plot.load_run's dicts) that reached it."""
    return {r["config"].get("seed"): float(r["loss"][r["step"] == step][0])
            for r in group if step in r["step"]}


def seed_stats(runs, base, step):
    """Final test loss at `step` over seeds: mean and sd, and the paired t-test of the difference
    to the base runs of the same seeds (paired_t). Runs short of `step` are left out."""
    own, ref = final_losses(runs, step), final_losses(base or [], step)
    x = np.array(list(own.values()))
    paired = base is not None and base is not runs
    d = [own[k] - ref[k] for k in own if k in ref] if paired else []
    return {"mean": float(x.mean()) if len(x) else None,
            "sd": float(x.std(ddof=1)) if len(x) > 1 else None, **paired_t(d)}


# -----------------------------------------------------------------------------
# how a gap is reported: the test's columns in the Markdown tables plot.py prints

RULE = ("Δ: the mean over the seeds both sides ran (pairs) of the difference in final test loss, "
        "seed by seed; 95% CI from the t distribution with pairs - 1 degrees of freedom; p: two-sided "
        "paired t-test; established when the interval excludes 0 ('-' with fewer than two pairs). Of "
        "k comparisons with no gap, about 0.05·k are established by chance")


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
    """The paired t-test's columns (stats.paired_t): pairs, mean Δ, 95% interval, p, established."""
    if r.get("diff") is None:
        return ["0", "-", "-", "-", "-"]
    ci = f"[{r['lo']:+.4f}, {r['hi']:+.4f}]" if r["lo"] is not None else "-"
    return [str(r["pairs"]), fmt(r["diff"], "+.4f"), ci, fmt(r["p"], ".2g"),
            {True: "yes", False: "no", None: "-"}[r["established"]]]


def render(head, body):
    """A Markdown table, the first column left-aligned and the rest right-aligned."""
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])

"""
The statistics plot.py reports, with no scipy: Student's t distribution from the regularised
incomplete beta function; the paired t-test of a gap over seeds, Welch's test of two independent
means, the slope of a gap on a setting, Fisher's exact test of two solve rates; Kaplan-Meier, the
log-rank test and the median with its interval for times to an event; Holm's correction
within a table, the smallest gap a test would find, two one-sided tests of equivalence; a
setting's final losses; and the columns a gap takes in a Markdown table. numpy and math only, so
plot.py stays light. The plan they serve, fixed before the runs, is docs/plan.md.
"""
import math

import numpy as np

from common import warn


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


def t_test(m, se, df):
    """The t-test of an estimate m with standard error se: its 95% interval and two-sided p."""
    half = t_quantile(0.975, df) * se
    p = t_p(m / se, df) if se > 0 else float(m == 0)  # every pair the same: no doubt of the mean
    return {"lo": m - half, "hi": m + half, "p": p, "df": df, "se": se,
            "established": bool(m - half > 0 or m + half < 0)}


def paired_t(d):
    """A paired t-test of the differences d (one per seed): n, their mean and sd, the 95% interval
    of the mean from the t distribution with n - 1 degrees of freedom, the two-sided p-value of
    mean 0, and whether the gap is established (the interval excludes 0). Needs n >= 2."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    out = {"pairs": n, "diff": float(d.mean()) if n else None, "diff_sd": None, "lo": None,
           "hi": None, "p": None, "established": None, "tost": None}
    if n < 2:
        return out
    sd = float(d.std(ddof=1))
    return {**out, "diff_sd": sd, **t_test(out["diff"], sd / math.sqrt(n), n - 1), "tost": tost(d)}


def welch(a, b):
    """Welch's test of mean(a) - mean(b) from two independent samples (each of size >= 2): the
    difference, its 95% interval and p, with the Welch-Satterthwaite degrees of freedom."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = ((va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if va + vb > 0
          else len(a) + len(b) - 2)
    m = float(a.mean() - b.mean())
    return {"diff": m, "pairs": (len(a), len(b)), **t_test(m, math.sqrt(va + vb), df)}


def slope(x, y, group):
    """The least-squares slope of y on x with an intercept of its own for each group (a seed), so
    that what a seed shares at every x cancels: the slope, its 95% interval and p (t with
    points - groups - 1 degrees of freedom)."""
    x, y, group = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(group)
    xc, yc = x.copy(), y.copy()
    for g in set(group.tolist()):  # centre within each group: the groups' intercepts drop out
        xc[group == g] -= x[group == g].mean()
        yc[group == g] -= y[group == g].mean()
    b = float(xc @ yc / (xc @ xc))
    df = len(x) - len(set(group.tolist())) - 1
    se = math.sqrt(((yc - b * xc) ** 2).sum() / df / (xc @ xc))
    return {"slope": b, "points": len(x), **t_test(b, se, df)}


def holm(ps):
    """Holm's step-down adjusted p-values of one family, in the order given (None stays None): the
    i-th smallest p times (k - i), never below an earlier one, at most 1."""
    order = sorted((p, i) for i, p in enumerate(ps) if p is not None)
    out, run = [None] * len(ps), 0.0
    for rank, (p, i) in enumerate(order):
        run = max(run, min(1.0, (len(order) - rank) * p))
        out[i] = run
    return out


def smallest_gap(se, df, alpha, power=0.8):
    """The smallest true difference a two-sided t-test at level alpha finds with the given power,
    from its standard error and degrees of freedom: (t_{1-alpha/2} + t_power) se, the usual
    approximation to the noncentral t's answer. Paired: se = sd / sqrt(n), df = n - 1; Welch's
    test and a slope bring their own."""
    if se is None or df is None or df < 1:
        return None
    return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se


def fisher_exact(k1, n1, k2, n2):
    """Fisher's exact test of two solve rates, k1 of n1 against k2 of n2, two-sided: the
    probability, with the margins fixed (hypergeometric), of every table no likelier than the one
    seen. Counted in integers (math.comb), so ties between tables are exact."""
    K, N = k1 + k2, n1 + n2
    weight = lambda x: math.comb(n1, x) * math.comb(n2, K - x)  # tables with x of K in the first row
    seen = weight(k1)
    tail = sum(w for w in map(weight, range(max(0, K - n2), min(n1, K) + 1)) if w <= seen)
    return min(1.0, tail / math.comb(N, K))


def smallest_rate_gap(n, k0, n0, alpha):
    """The smallest gap in solve rate from a reference's k0 of n0 that n runs could establish, i.e.
    whose Fisher's p is below alpha, over every k of n the runs could solve; None if none can."""
    gaps = [abs(k / n - k0 / n0) for k in range(n + 1) if fisher_exact(k, n, k0, n0) < alpha]
    return min(gaps, default=None)


# -----------------------------------------------------------------------------
# time to an event (E7: the first step a run solved), right-censored at a cap

def kaplan_meier(times, events):
    """The Kaplan-Meier estimate of S(t) = P(no event by t) from times (the event's, or the
    censoring's where events is False): [(t, at risk, events at t, S(t), Greenwood's variance)] at
    each distinct event time, in order. A run censored at t counts as at risk at t (events
    first)."""
    rows, S, green = [], 1.0, 0.0
    for t in sorted({t for t, e in zip(times, events) if e}):
        n = sum(u >= t for u in times)
        d = sum(u == t and e for u, e in zip(times, events))
        S *= 1 - d / n
        green += d / (n * (n - d)) if n > d else math.inf
        rows.append((t, n, d, S, S * S * green if S > 0 else 0.0))
    return rows


def km_at(rows, t):
    """S(t) from kaplan_meier's rows: the value after the last event time <= t (1 before any)."""
    return next((r[3] for r in reversed(rows) if r[0] <= t), 1.0)


def median_time(times, events, z=1.959963984540054):
    """(the median time to the event, its 95% interval's ends): Brookmeyer and Crowley's interval,
    the times whose S(t) is within z Greenwood standard errors of 1/2, read as the first t at which
    S's lower band, and then its upper band, reach 1/2; None where that never happens by the last
    event ("not reached")."""
    rows = kaplan_meier(times, events)
    def first(ok):  # the first event time at which ok(S, its standard error)
        return next((t for t, _, _, S, v in rows if ok(S, math.sqrt(v))), None)
    return (first(lambda S, se: S <= 0.5), first(lambda S, se: S - z * se <= 0.5),
            first(lambda S, se: S + z * se <= 0.5))


def logrank(times1, events1, times2, events2):
    """The two-sided log-rank test of two groups' times to an event: (O - E, its variance, p) for
    group 1, with the hypergeometric variance, which takes tied times as they are; p from the
    chi-square with 1 degree of freedom, erfc(sqrt(chi2 / 2))."""
    times, events = list(times1) + list(times2), list(events1) + list(events2)
    first = [True] * len(times1) + [False] * len(times2)
    o_e = var = 0.0
    for t in sorted({t for t, e in zip(times, events) if e}):
        at = [(g, u == t and e) for u, e, g in zip(times, events, first) if u >= t]
        n, n1 = len(at), sum(g for g, _ in at)
        d, d1 = sum(e for _, e in at), sum(g and e for g, e in at)
        o_e += d1 - d * n1 / n
        var += d * (n1 / n) * (1 - n1 / n) * (n - d) / (n - 1) if n > 1 else 0.0
    p = math.erfc(math.sqrt(o_e * o_e / var / 2)) if var > 0 else 1.0
    return o_e, var, p


MARGIN = 0.008  # nats: "no difference" means within this of MHA (docs/plan.md)


def tost(d, margin=MARGIN):
    """Two one-sided t-tests that the mean of the paired differences d lies inside ±margin: the
    larger of the two one-sided p-values (equivalent at level 0.05 when it is below 0.05, i.e. when
    the 90% interval lies inside the margin)."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return None
    m, se, df = d.mean(), d.std(ddof=1) / math.sqrt(len(d)), len(d) - 1
    if se == 0:
        return float(abs(m) >= margin)
    upper = lambda t: t_p(t, df) / 2 if t > 0 else 1 - t_p(t, df) / 2  # P(T >= t)
    return max(upper((m + margin) / se), upper((margin - m) / se))


def family(rows, alpha=0.05):
    """One table's gaps as one family: each row with a paired test gets its Holm-adjusted p
    (p_holm), 'established' by it, and the smallest gap it would find at 80% power at Holm's
    strictest level (alpha / k)."""
    tested = [r for r in rows if r.get("p") is not None]
    for r, ph in zip(tested, holm([r["p"] for r in tested])):
        r["p_holm"], r["established"] = ph, ph < alpha
        r["finds"] = smallest_gap(r.get("se"), r.get("df"), alpha / len(tested))
    return rows


def final_losses(group, step, split="test"):
    """{seed: loss at step} of the runs (logs.load_run's dicts) that reached it: the score line's
    (every held-out token) where the run logged one at that step, else the learning curve's (test)."""
    out, curve = {}, []
    for r in group:
        score = r.get("score") or {}
        if score.get("step") == step and f"{split}_loss" in score:
            out[r["config"].get("seed")] = float(score[f"{split}_loss"])
        elif split == "test" and step in r["step"]:
            out[r["config"].get("seed")] = float(r["loss"][r["step"] == step][0])
            curve.append(r["name"])
    if curve and len(curve) < len(out):  # two estimates of the loss in one comparison
        warn(f"{', '.join(curve)}: no score line at step {step}, so the learning curve's sample of the "
             "test split stands in for every test token beside runs that have one")
    return out


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
          "paired t-test, nominal; Holm: p adjusted by Holm's step-down correction over the table's k "
          "comparisons (one family); established when Holm's p < 0.05 ('-' with fewer than two pairs); "
          "finds: the smallest true gap the test would establish with 80% power at Holm's strictest "
          f"level 0.05/k; ±{MARGIN}: two one-sided tests that |Δ| < {MARGIN} nats, 'yes' (p) when both "
          "reject at 0.05, the only way a table says 'no difference'")


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
    return ["pairs", delta, "95% CI", "p", "Holm", "established", "finds", f"±{MARGIN}"]


def gap(r):
    """A gap's columns (paired_t, then family): pairs, mean Δ, 95% interval, nominal p, Holm's p,
    established, the smallest gap found at 80% power, equivalence within the margin."""
    if r.get("diff") is None:
        return ["0", "-", "-", "-", "-", "-", "-", "-"]
    ci = f"[{r['lo']:+.4f}, {r['hi']:+.4f}]" if r["lo"] is not None else "-"
    same = r.get("tost")
    same = "-" if same is None else f"yes ({same:.2g})" if same < 0.05 else f"no ({same:.2g})"
    return [str(r["pairs"]), fmt(r["diff"], "+.4f"), ci, fmt(r["p"], ".2g"), fmt(r.get("p_holm"), ".2g"),
            {True: "yes", False: "no", None: "-"}[r["established"]], fmt(r.get("finds"), ".4f"), same]


def render(head, body):
    """A Markdown table, the first column left-aligned and the rest right-aligned."""
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])

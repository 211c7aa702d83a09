"""analysis/stats.py's tests against answers computed another way: scipy (a dev extra, tests only), a full
least-squares fit, hand-worked examples. plot.py and analysis/ never import scipy."""
import math

import numpy as np
import pytest
import scipy.stats as scipy_stats

from analysis import stats

RNG = np.random.default_rng(0)
SAMPLES = [RNG.normal(0.004, 0.008, n) for n in (3, 5, 12, 30)]


@pytest.mark.parametrize("d", SAMPLES)
def test_paired_t_is_scipys_one_sample_t(d):
    r, ref = stats.paired_t(d), scipy_stats.ttest_1samp(d, 0.0)
    lo, hi = ref.confidence_interval(0.95)
    assert r["p"] == pytest.approx(ref.pvalue, rel=1e-6)
    assert (r["lo"], r["hi"]) == pytest.approx((lo, hi), rel=1e-6)


@pytest.mark.parametrize("a, b", [(SAMPLES[2], SAMPLES[1]), (SAMPLES[3], SAMPLES[0] * 3), (SAMPLES[2], SAMPLES[2] + 0.01)])
def test_welch_is_scipys_unequal_variance_t(a, b):
    r, ref = stats.welch(a, b), scipy_stats.ttest_ind(a, b, equal_var=False)
    lo, hi = ref.confidence_interval(0.95)
    assert r["diff"] == pytest.approx(a.mean() - b.mean())
    assert r["p"] == pytest.approx(ref.pvalue, rel=1e-6) and r["df"] == pytest.approx(ref.df, rel=1e-9)
    assert (r["lo"], r["hi"]) == pytest.approx((lo, hi), rel=1e-6)


def test_slope_with_an_intercept_per_seed_is_the_full_least_squares_fit():
    seeds, x = np.repeat([0, 1, 2], 5), np.tile(np.log2([0.5, 0.7, 1, 1.4, 2]), 3)
    y = 0.01 * x + np.array([0.003, -0.004, 0.008])[seeds] + RNG.normal(0, 0.004, 15)
    r = stats.slope(x, y, seeds)
    # the same model as a design matrix: the slope and one dummy column per seed, no other intercept
    X = np.column_stack([x] + [(seeds == s).astype(float) for s in range(3)])
    coef, res, *_ = np.linalg.lstsq(X, y, rcond=None)
    df = 15 - 4
    se = math.sqrt(res[0] / df * np.linalg.inv(X.T @ X)[0, 0])
    assert r["slope"] == pytest.approx(coef[0], rel=1e-9) and r["df"] == df and r["se"] == pytest.approx(se, rel=1e-9)
    assert r["p"] == pytest.approx(2 * scipy_stats.t.sf(abs(coef[0] / se), df), rel=1e-6)
    assert r["hi"] - r["slope"] == pytest.approx(scipy_stats.t.ppf(0.975, df) * se, rel=1e-6)
    # a shared offset per seed changes nothing: it is what the intercepts absorb
    assert stats.slope(x, y + np.array([1.0, -2.0, 0.5])[seeds], seeds)["slope"] == pytest.approx(r["slope"], rel=1e-9)


def test_holm_by_hand_and_by_its_definition():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, None, 0.9]) == pytest.approx([1.0, None, 1.0])
    # definition: H_i is rejected at level a iff every smaller-or-equal p_(j) <= a / (k - j)
    ps = RNG.uniform(0, 0.2, 7).tolist()
    adj, order = stats.holm(ps), sorted(range(7), key=lambda i: ps[i])
    for a in (0.01, 0.05, 0.1):
        rejected = set()
        for j, i in enumerate(order):
            if ps[i] > a / (7 - j):
                break
            rejected.add(i)
        assert {i for i in range(7) if adj[i] <= a} == rejected


@pytest.mark.parametrize("n, sd, alpha", [(12, 0.0083, 0.0125), (5, 0.01, 0.05), (30, 0.004, 0.05 / 3)])
def test_smallest_gap_is_the_t_formula_and_near_the_noncentral_t(n, sd, alpha):
    got = stats.smallest_gap(sd / math.sqrt(n), n - 1, alpha)
    want = (scipy_stats.t.ppf(1 - alpha / 2, n - 1) + scipy_stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
    assert got == pytest.approx(want, rel=1e-6)
    # the exact power of the two-sided test at that gap, from the noncentral t: about 0.8
    tc, nc = scipy_stats.t.ppf(1 - alpha / 2, n - 1), got / (sd / math.sqrt(n))
    power = scipy_stats.nct.sf(tc, n - 1, nc) + scipy_stats.nct.cdf(-tc, n - 1, nc)
    assert 0.78 < power < 0.82
    assert stats.smallest_gap(None, 11, 0.05) is None and stats.smallest_gap(0.01, 0, 0.05) is None


def test_welchs_and_a_slopes_rows_are_sized_from_their_own_error_and_df():
    # an interaction (Welch) and a slope have no paired sd; family sizes them from se and df
    w = stats.welch(SAMPLES[2], SAMPLES[1])
    seeds, x = np.repeat([0, 1, 2], 5), np.tile(np.log2([0.5, 0.7, 1, 1.4, 2]), 3)
    s = stats.slope(x, 0.01 * x + RNG.normal(0, 0.004, 15), seeds)
    stats.family([w, s])
    for r in (w, s):
        want = (scipy_stats.t.ppf(1 - 0.05 / 4, r["df"]) + scipy_stats.t.ppf(0.8, r["df"])) * r["se"]
        assert r["finds"] == pytest.approx(want, rel=1e-6)
    # Welch's df is not an integer: the power at that gap, from the noncentral t, is still about 0.8
    tc = scipy_stats.t.ppf(1 - 0.05 / 4, w["df"])
    assert 0.78 < scipy_stats.nct.sf(tc, w["df"], w["finds"] / w["se"]) < 0.82


@pytest.mark.parametrize("d", SAMPLES[1:] + [RNG.normal(0.0, 0.002, 12), RNG.normal(0.012, 0.002, 12)])
def test_tost_is_two_one_sided_scipy_tests(d):
    lower = scipy_stats.ttest_1samp(d, -stats.MARGIN, alternative="greater").pvalue
    upper = scipy_stats.ttest_1samp(d, stats.MARGIN, alternative="less").pvalue
    assert stats.tost(d) == pytest.approx(max(lower, upper), rel=1e-6)
    # equivalent at 0.05 exactly when the 90% interval lies inside the margin
    lo, hi = scipy_stats.ttest_1samp(d, 0.0).confidence_interval(0.90)
    assert (stats.tost(d) < 0.05) == (-stats.MARGIN < lo and hi < stats.MARGIN)


def test_family_adjusts_within_a_table_and_sizes_each_test():
    rows = [{"label": "base"}] + [stats.paired_t(d) for d in SAMPLES[1:]]
    stats.family(rows)
    ps = [r["p"] for r in rows[1:]]
    assert [r["p_holm"] for r in rows[1:]] == pytest.approx(stats.holm(ps))
    assert [r["established"] for r in rows[1:]] == [p < 0.05 for p in stats.holm(ps)]
    assert rows[2]["finds"] == pytest.approx(stats.smallest_gap(rows[2]["diff_sd"] / math.sqrt(12), 11, 0.05 / 3))
    assert "p_holm" not in rows[0]


def t_tail_by_integration(t, df):
    # P(|T| >= t) from Student's density, summed numerically: a check independent of stats.betainc
    x = np.linspace(abs(t), abs(t) + 4000, 4_000_001)
    c = np.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    y = c * (1 + x * x / df) ** (-(df + 1) / 2)
    return 2 * float(((y[1:] + y[:-1]) / 2 * np.diff(x)).sum())


def test_t_distribution_known_values():
    # closed forms: df 1 is Cauchy's, P(|T| >= t) = 1 - 2 atan(t) / pi; df 2's is 1 - t / sqrt(2 + t^2)
    for t in [0.3, 1.0, 2.0, 12.706]:
        assert stats.t_p(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, rel=1e-9)
        assert stats.t_p(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)
    # the printed tables' 97.5% and 99.5% points
    for df, t975, t995 in [(1, 12.7062, 63.6567), (2, 4.3027, 9.9248), (4, 2.7764, 4.6041), (9, 2.2622, 3.2498),
                           (30, 2.0423, 2.7500)]:
        assert stats.t_quantile(0.975, df) == pytest.approx(t975, abs=1e-4)
        assert stats.t_quantile(0.995, df) == pytest.approx(t995, abs=1e-4)
        assert stats.t_p(t975, df) == pytest.approx(0.05, rel=1e-3) and stats.t_p(t995, df) == pytest.approx(0.01, rel=1e-3)
    for t, df in [(0.5, 3), (2.5, 5), (6.0, 9), (1.7, 40)]:
        assert stats.t_p(t, df) == pytest.approx(t_tail_by_integration(t, df), rel=1e-5)
    assert stats.t_p(0.0, 4) == 1.0


def test_paired_t_on_known_data():
    # n = 2: d = 0.06, 0.04, mean 0.05, sd 0.02/sqrt(2), t = 5 on 1 df. The old rule (|mean| > 2 sd)
    # called this gap real; its 95% interval is 0.05 ± 12.706 x 0.01 and includes 0
    r = stats.paired_t([0.06, 0.04])
    assert r["pairs"] == 2 and r["diff"] == pytest.approx(0.05) and r["diff_sd"] == pytest.approx(0.02 / math.sqrt(2))
    assert r["lo"] == pytest.approx(0.05 - 0.127062, abs=1e-5) and r["hi"] == pytest.approx(0.05 + 0.127062, abs=1e-5)
    assert r["p"] == pytest.approx(1 - 2 * math.atan(5) / math.pi) and r["established"] is False
    # n = 10: five 0.01s and five 0.03s, mean 0.02, sd sqrt(10/9) x 0.01, t = 6 on 9 df
    r = stats.paired_t([0.01] * 5 + [0.03] * 5)
    half = 2.262157 * math.sqrt(10 / 9) * 0.01 / math.sqrt(10)
    assert r["lo"] == pytest.approx(0.02 - half, abs=1e-7) and r["hi"] == pytest.approx(0.02 + half, abs=1e-7)
    assert r["p"] == pytest.approx(t_tail_by_integration(6.0, 9), rel=1e-5) and r["p"] < 0.001 and r["established"]
    # the sign does not matter; one pair has no interval
    assert stats.paired_t([-0.01] * 5 + [-0.03] * 5)["established"] and stats.paired_t([-0.01] * 5 + [-0.03] * 5)["hi"] < 0
    assert stats.paired_t([0.3])["lo"] is None and stats.paired_t([0.3])["established"] is None


def test_fisher_exact_known_values_and_scipys():
    # 3 of 3 against 0 of 3: the two most extreme tables of 20, p = 2/20; issue 54's 11 of 12
    # against 5 of 12, p about 0.027
    assert stats.fisher_exact(3, 3, 0, 3) == pytest.approx(0.1, abs=1e-12)
    assert stats.fisher_exact(11, 12, 5, 12) == pytest.approx(0.0272, abs=1e-4)
    assert stats.fisher_exact(4, 8, 4, 8) == 1.0 and stats.fisher_exact(0, 12, 0, 12) == 1.0
    rng = np.random.default_rng(0)
    for _ in range(50):
        n1, n2 = rng.integers(1, 25, 2)
        k1, k2 = rng.integers(0, n1 + 1), rng.integers(0, n2 + 1)
        want = scipy_stats.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue
        assert stats.fisher_exact(int(k1), int(n1), int(k2), int(n2)) == pytest.approx(want, rel=1e-9), (k1, n1, k2, n2)


def test_the_smallest_rate_gap_n_runs_could_establish():
    # 3 runs against MHA's 3 of 3: even 0 of 3 gives p 0.1, so nothing is found at 0.05
    assert stats.smallest_rate_gap(3, 3, 3, 0.05) is None
    # 12 against 12 of 12 at 0.05: 7 of 12 gives p 0.037 and 8 of 12 p 0.093, so the gap is 5/12
    assert stats.fisher_exact(7, 12, 12, 12) < 0.05 < stats.fisher_exact(8, 12, 12, 12)
    assert stats.smallest_rate_gap(12, 12, 12, 0.05) == pytest.approx(5 / 12)


# a small table of times to an event, censored where False, worked by hand below
A = ([1, 2, 2, 3, 4, 5], [True, True, True, False, True, False])
B = ([3, 4, 6, 6], [True, True, True, False])


def test_kaplan_meier_and_greenwood_by_hand_and_scipys():
    rows = stats.kaplan_meier(*A)
    # t=1: 6 at risk, 1 event; t=2: 5, 2; t=4: 2 (the run censored at 3 has left), 1
    assert [r[:3] for r in rows] == [(1, 6, 1), (2, 5, 2), (4, 2, 1)]
    S = [5 / 6, 5 / 6 * 3 / 5, 5 / 6 * 3 / 5 * 1 / 2]
    green = [1 / 30, 1 / 30 + 2 / 15, 1 / 30 + 2 / 15 + 1 / 2]
    assert [r[3] for r in rows] == pytest.approx(S, abs=1e-15)
    assert [r[4] for r in rows] == pytest.approx([s * s * g for s, g in zip(S, green)], abs=1e-15)
    assert [stats.km_at(rows, t) for t in (0, 1, 3, 9)] == pytest.approx([1, S[0], S[1], S[2]])
    res = scipy_stats.ecdf(scipy_stats.CensoredData(
        uncensored=[t for t, e in zip(*A) if e], right=[t for t, e in zip(*A) if not e]))
    assert res.sf.evaluate([1, 2, 4]) == pytest.approx(S, abs=1e-12)
    band = res.sf.confidence_interval(0.95, method="linear")  # S ± z·se, se from Greenwood
    z = scipy_stats.norm.ppf(0.975)
    hi = [min(1, s + z * math.sqrt(s * s * g)) for s, g in zip(S, green)]
    assert band.high.evaluate([1, 2, 4]) == pytest.approx(hi, abs=1e-9)


def test_median_time_and_its_interval_by_hand():
    # S: 5/6, 1/2 at t=2, 1/4 at t=4; se at t=2 and t=4 both sqrt(1/24) = 0.204: the lower band
    # reaches 1/2 at t=2 (0.5 - 0.4), the upper band never (0.25 + 0.4 > 0.5): not reached
    assert stats.median_time(*A) == (2, 2, None)
    assert stats.median_time([5] * 4, [False] * 4) == (None, None, None)  # no event: no median
    many = ([t for t in range(1, 41)], [True] * 40)  # S = 1 - t/40, every step an event
    med, lo, hi = stats.median_time(*many)
    assert med == 20 and lo < 20 < hi


def test_logrank_by_hand_and_scipys():
    o_e, var, p = stats.logrank(*A, *B)
    # at t = 1, 2, 3, 4, 6: A at risk 6, 5, 3, 2, 0 of 10, 9, 7, 5, 2; events 1, 2, 1, 2, 1
    assert o_e == pytest.approx(3 / 5 + 8 / 9 - 3 / 7, abs=1e-12)
    assert var == pytest.approx(6 / 25 + 35 / 81 + 12 / 49 + 9 / 25, abs=1e-12)
    assert p == pytest.approx(math.erfc(math.sqrt(o_e ** 2 / var / 2)), abs=1e-15)
    data = [scipy_stats.CensoredData(uncensored=[t for t, e in zip(*g) if e],
                                     right=[t for t, e in zip(*g) if not e]) for g in (A, B)]
    assert p == pytest.approx(scipy_stats.logrank(*data).pvalue, rel=1e-9)
    assert stats.logrank(*A, *A)[2] == pytest.approx(1.0)  # one group against itself

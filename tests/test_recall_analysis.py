"""plot.py --recall on synthetic MQAR logs with known answers: E4's table for runs of one pair count,
E6's solve rates for runs scored at a mixture of counts or through a window."""
import json
import math
import os
import re
import shutil

import numpy as np
import pytest
import scipy.stats
import matplotlib

matplotlib.use("Agg")
import plot  # noqa: E402
from analysis import logs, recall  # noqa: E402
from analysis.stats import holm  # noqa: E402


def mqar_log(path, attn, width, pairs, lr, seed, accs, val_acc, kv):
    """A synthetic MQAR run: its curve's test accuracy at steps 0, 100, ... and a score line."""
    cfg = dict(dataset="mqar", n_layer=2, n_head=4, n_embd=width, block_size=128, vocab_size=256, mqar_pairs=pairs,
               mqar_alpha=0.01, mqar_examples=1024, matrix_lr=lr, seed=seed, max_iters=100 * (len(accs) - 1))
    lines = [dict(type="header", run=os.path.basename(path), attn=attn, config=cfg, kv_bytes_per_token=kv,
                  mha_kv_bytes_per_token=16 * width)]
    lines += [dict(type="step", step=100 * i, tokens=100 * i, flops=0, test_loss=1.0, test_acc=a)
              for i, a in enumerate(accs)]
    lines.insert(-1, dict(type="score", step=100 * (len(accs) - 1), val_loss=1.0 - val_acc, val_acc=val_acc,
                          test_loss=1.0, test_acc=accs[-1]))
    os.makedirs(path)
    with open(os.path.join(path, "log.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in lines))


def test_plot_recall_tabulates_known_answers(tmp_path, capsys):
    # one cell (d 64, 16 pairs): MHA solves every seed; GQA 0.1 behind on seed 0, 0.2 on 1, 0.3 on 2
    mha, gqa = [0.995, 1.0, 0.999], [0.895, 0.8, 0.699]
    for s in range(3):
        mqar_log(tmp_path / f"mha_s{s}", "mha", 64, 16, 0.02, s, [0.0, 0.5, mha[s]], 0.99, 1024)
        mqar_log(tmp_path / f"gqa_s{s}", "gqa", 64, 16, 0.02, s, [0.0, 0.2, gqa[s]], 0.9, 512)
        # GQA at another rate, worse on validation, better on test: never chosen
        mqar_log(tmp_path / f"gqa_x2_s{s}", "gqa", 64, 16, 0.04, s, [0.0, 0.0, 1.0], 0.5, 512)
    assert plot.main([str(tmp_path), "--recall"]) == 0
    md = open(tmp_path / "recall.md").read()
    assert os.path.exists(tmp_path / "figure_recall.png")
    row = lambda label: next(l for l in md.splitlines() if l.startswith(f"| 64 | 16 | {label} |")).split("|")[1:-1]
    m, g = [c.strip() for c in row("Standard MHA")], [c.strip() for c in row("GQA")]
    assert m[3] == "1024" and m[4] == "1" and m[7] == "0.995-1.000"
    assert m[6] == "0.998" and m[8] == "3/3" and m[9] == "200, 200, 200" and m[-1] == "0.990"  # validation
    assert g[-1] == "0.900"  # the chosen rate's validation accuracy
    assert g[4] == "1 chosen" and g[6] == "0.798" and g[8] == "0/3" and g[9] == "never, never, never"
    d = np.array(gqa) - np.array(mha)  # -0.1, -0.2, -0.3
    se = d.std(ddof=1) / math.sqrt(3)
    assert g[10] == "3" and g[11] == f"{d.mean():+.4f}"
    assert g[12] == f"[{d.mean() - 4.302653 * se:+.4f}, {d.mean() + 4.302653 * se:+.4f}]"
    # the smallest cache at which a design solves 16 pairs: MHA's 1024; GQA never
    assert "| Standard MHA | 1024 |" in md and "| GQA | - |" in md
    # the rate table: GQA's two rates, x1 chosen on validation
    assert re.search(r"\| 64 \| 16 \| GQA \| 1 \| 3 \| 0.900 \| 0.1000 \| 0.798 \| yes \|", md)
    assert re.search(r"\| 64 \| 16 \| GQA \| 2 \| 3 \| 0.500 \| 0.5000 \| 1.000 \|  \|", md)


def test_plot_recall_refuses_text_runs(tmp_path, capsys):
    mqar_log(tmp_path / "a", "mha", 64, 16, 0.02, 0, [0.0, 1.0], 1.0, 1024)
    log = tmp_path / "a" / "log.jsonl"
    log.write_text(log.read_text().replace('"mqar"', '"shakespeare"'))
    with pytest.raises(SystemExit) as e:
        plot.main([str(tmp_path), "--recall"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "not an MQAR run" in err.splitlines()[-1]




def test_text_runs_from_before_the_mqar_knobs_combine_with_later_ones(tmp_path):
    # train.py logs mqar_alpha and mqar_examples in every header now; a log from before lacks them,
    # and plot.py took the two for another experiment
    for name, extra in (("old", {}), ("new", {"mqar_alpha": 0.01, "mqar_examples": 1024})):
        cfg = dict(dataset="shakespeare", n_layer=2, n_head=4, n_embd=64, matrix_lr=0.02, seed=0, max_iters=100, **extra)
        os.makedirs(tmp_path / name)
        lines = [dict(type="header", run=name, attn="mha", config=cfg),
                 dict(type="step", step=100, tokens=100, flops=0, test_loss=2.0)]
        (tmp_path / name / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert logs.odd_runs(logs.load_runs([str(tmp_path)])) == []


def mix_log(path, attn, seed, final, first, window=0, lr=0.02, width=64):
    """A synthetic E6 run on a mixture of pair counts: final {N: test accuracy at the score line};
    first {N: the step its curve reaches it} (None: never), the curve at 0.1 before."""
    pairs = sorted(final)
    cfg = dict(dataset="mqar", n_layer=2, n_head=4, n_embd=width, block_size=128, vocab_size=256, mqar_pairs=pairs,
               mqar_alpha=0.01, mqar_examples=1024, matrix_lr=lr, seed=seed, max_iters=200, window=window)
    lines = [dict(type="header", run=os.path.basename(path), attn=attn, config=cfg, kv_bytes_per_token=16 * width,
                  mha_kv_bytes_per_token=16 * width)]
    for s in (0, 100, 200):
        acc = {N: final[N] if first[N] is not None and s >= first[N] else 0.1 for N in pairs}
        lines.append(dict(type="step", step=s, tokens=s, flops=0, test_loss=1.0, test_acc=float(np.mean(list(acc.values()))),
                          **{f"test_acc_p{N}": a for N, a in acc.items()}))
    lines.insert(-1, dict(type="score", step=200, test_loss=1.0, test_acc=float(np.mean(list(final.values()))),
                          **{f"test_acc_p{N}": a for N, a in final.items()}))
    os.makedirs(path)
    with open(os.path.join(path, "log.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in lines))


def e6(tmp_path, solved):
    """12 seeds of each of MHA, GQA and MHA with a window of 32, at 8 and 16 pairs; solved: {(attn,
    window): (runs of 12 solving 8 pairs, ... 16 pairs)}; a solving run gets there at step 100."""
    for (attn, window), ks in solved.items():
        for s in range(12):
            final = {N: 1.0 if s < k else 0.2 for N, k in zip((8, 16), ks)}
            mix_log(tmp_path / f"{attn}_w{window}_s{s}", attn, s, final,
                    {N: 100 if a == 1.0 else None for N, a in final.items()}, window)


def test_plot_recall_gives_solve_rates_fisher_and_holm_for_a_mixture(tmp_path):
    solved = {("mha", 0): (12, 11), ("gqa", 0): (12, 10), ("mha", 32): (11, 1)}
    e6(tmp_path, solved)
    assert plot.main([str(tmp_path), "--recall"]) == 0
    md = open(tmp_path / "recall.md").read()
    assert os.path.getsize(tmp_path / "figure_recall.png") > 0 and os.path.exists(tmp_path / "figure_recall.pdf")
    row = lambda N, label: next(l for l in md.splitlines() if l.startswith(f"| 64 | {N} | {label} |")).split(" | ")
    # the 2x2 tables against MHA's, by scipy; Holm over the four rows that are not MHA's
    p = {(N, key): scipy.stats.fisher_exact([[solved[key][i], 12 - solved[key][i]],
                                             [solved[("mha", 0)][i], 12 - solved[("mha", 0)][i]]]).pvalue
         for i, N in enumerate((8, 16)) for key in (("gqa", 0), ("mha", 32))}
    adjusted = dict(zip(p, holm(list(p.values()))))
    for (N, (attn, window)), want in p.items():
        cells = row(N, "GQA" if attn == "gqa" else "Standard MHA, window 32")
        k = solved[(attn, window)][(8, 16).index(N)]
        assert cells[4] == f"{k}/12" and cells[5] == f"{(k - solved[('mha', 0)][(8, 16).index(N)]) / 12:+.2f}"
        assert cells[6] == "all" and cells[7] == f"{want:.2g}" and cells[8] == f"{adjusted[(N, (attn, window))]:.2g}"
        assert cells[9] == ("yes" if adjusted[(N, (attn, window))] < 0.05 else "no")
    window16 = row(16, "Standard MHA, window 32")
    assert window16[9] == "yes" and window16[3] == "25.0%"  # 32 of the 128 tokens MHA caches
    assert row(16, "Standard MHA")[4:6] == ["11/12", "-"] and row(16, "Standard MHA")[-1] == "100 |"  # median first step
    assert window16[-1] == "never |" and window16[11] == f"{(1 + 11 * 0.2) / 12:.3f}"
    # finds: 12 runs against MHA's 11 of 12 at Holm's strictest 0.05/4, by trying every count
    strict = [abs(k / 12 - 11 / 12) for k in range(13)
              if scipy.stats.fisher_exact([[k, 12 - k], [11, 1]]).pvalue < 0.05 / 4]
    assert window16[10] == f"{min(strict):.2f}"


def test_reference_runs_set_the_primary_and_secondary_families(tmp_path):
    # E6's plan: counts MHA's validity runs solve on 11 of 12 seeds are reference cells; the largest
    # is the primary family, the others the secondary; a count below the rule is not tested
    solved = {("mha", 0): (12, 12, 12), ("gqa", 0): (12, 9, 5), ("mha", 32): (10, 2, 0), ("mha", 64): (12, 8, 3)}
    for (attn, window), ks in solved.items():
        for s in range(12):
            final = {N: 1.0 if s < k else 0.2 for N, k in zip((4, 8, 16), ks)}
            mix_log(tmp_path / "e6" / f"{attn}_w{window}_s{s}", attn, s, final, {N: 100 for N in final}, window)
    for s, ks in enumerate([(1, 1, 1)] * 11 + [(1, 1, 0)] * 1):  # 16 pairs: 11 of 12, a reference cell too
        mix_log(tmp_path / "b" / f"mha_s{200 + s}", "mha", 200 + s, dict(zip((4, 8, 16), map(float, ks))),
                {4: 100, 8: 100, 16: 100})
    (tmp_path / "b" / "mha_s211" / "log.jsonl").write_text(  # 8 pairs: 10 of 12, not a reference cell
        (tmp_path / "b" / "mha_s211" / "log.jsonl").read_text().replace('"test_acc_p8": 1.0', '"test_acc_p8": 0.5'))
    (tmp_path / "b" / "mha_s210" / "log.jsonl").write_text(
        (tmp_path / "b" / "mha_s210" / "log.jsonl").read_text().replace('"test_acc_p8": 1.0', '"test_acc_p8": 0.5'))
    assert plot.main([str(tmp_path / "e6"), "--recall", "--reference", str(tmp_path / "b")]) == 0
    md = open(tmp_path / "e6" / "recall.md").read()
    row = lambda N, label: next(l for l in md.splitlines() if l.startswith(f"| 64 | {N} | {label} |")).split(" | ")
    labels = {("gqa", 0): "GQA", ("mha", 32): "Standard MHA, window 32", ("mha", 64): "Standard MHA, window 64"}
    fam = {(N, key): row(N, label)[6] for N in (4, 8, 16) for key, label in labels.items()}
    assert [fam[(16, k)] for k in labels] == ["primary", "primary", "secondary"]  # a second window: secondary
    assert [fam[(4, k)] for k in labels] == ["secondary"] * 3 and all(fam[(8, k)] == "-" for k in labels)
    primary = {k: scipy.stats.fisher_exact([[solved[k][2], 12 - solved[k][2]], [12, 0]]).pvalue
               for k in (("gqa", 0), ("mha", 32))}
    for k, p_holm in zip(primary, holm(list(primary.values()))):  # Holm over the primary's two rows alone
        assert row(16, labels[k])[8] == f"{p_holm:.2g}"
    assert "reference cells" in md and "d_model 64: 4, 16 pairs" in md
    with pytest.raises(SystemExit):  # --reference is --recall's
        plot.main([str(tmp_path / "e6"), "--reference", str(tmp_path / "b")])


def test_the_recall_figure_has_a_point_per_seed_and_its_legend_off_the_data(tmp_path):
    e6(tmp_path, {("mha", 0): (12, 11), ("gqa", 0): (12, 10), ("mha", 32): (11, 1)})
    fig, _, notes, names = recall.recall_mode(logs.load_runs([str(tmp_path)]))
    strip, curve = fig.axes
    assert sum(len(c.get_offsets()) for c in strip.collections) == 3 * 2 * 12  # designs x counts x seeds
    assert [line.get_ydata().tolist() for line in curve.get_lines()] == [[1.0, 11 / 12], [1.0, 10 / 12], [11 / 12, 1 / 12]]
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert not any(legend.overlaps(ax.get_window_extent()) for ax in fig.axes)
    assert names == ("figure_recall", "recall.md") and "figure: d_model 64" in notes[-1]


def test_a_design_at_two_rates_is_refused_not_pooled(tmp_path, capsys):
    e6(tmp_path, {("mha", 0): (12, 11)})
    mix_log(tmp_path / "mha_x2", "mha", 12, {8: 1.0, 16: 1.0}, {8: 100, 16: 100}, lr=0.04)
    with pytest.raises(SystemExit) as e:
        plot.main([str(tmp_path), "--recall"])
    line = capsys.readouterr().err.splitlines()[-1]
    assert e.value.code == 2 and line.startswith("error: Standard MHA at d_model 64: its runs differ in matrix_lr")


def test_designs_at_two_rates_and_a_short_or_other_validity_set_are_refused(tmp_path, capsys):
    def error(*args):
        with pytest.raises(SystemExit) as e:
            plot.main([str(tmp_path / "e6"), "--recall", *args])
        return e.value.code, capsys.readouterr().err.splitlines()[-1]
    e6(tmp_path / "e6", {("mha", 0): (12, 11)})
    for s in range(12):  # GQA at another rate than MHA: E6 compares at one
        mix_log(tmp_path / "e6" / f"gqa_s{s}", "gqa", s, {8: 1.0, 16: 1.0}, {8: 100, 16: 100}, lr=0.04)
    assert error() == (2, "error: the designs ran at several rates (0.02, 0.04); solve rates compare designs "
                          "at one: plot each rate apart")
    shutil.rmtree(tmp_path / "e6")
    e6(tmp_path / "e6", {("mha", 0): (12, 11), ("gqa", 0): (12, 10)})
    for s in range(11):  # 11 validity runs, not 12
        mix_log(tmp_path / "b" / f"mha_s{200 + s}", "mha", 200 + s, {8: 1.0, 16: 1.0}, {8: 100, 16: 100})
    assert error("--reference", str(tmp_path / "b")) == (
        2, "error: the validity rule needs 12 finished runs of distinct seeds; d_model 64 has 11")
    shutil.rmtree(tmp_path / "b")
    for s in range(12):  # 12, at another rate than the main runs
        mix_log(tmp_path / "b" / f"mha_s{200 + s}", "mha", 200 + s, {8: 1.0, 16: 1.0}, {8: 100, 16: 100}, lr=0.04)
    assert error("--reference", str(tmp_path / "b")) == (
        2, "error: the validity runs differ from the main runs in matrix_lr")


def stop_log(path, attn, seed, stop, cap=1000, window=0, kv=1024, dist=None):
    """A synthetic E7 run: stopped solved at step `stop` (None: ran to the cap, censored)."""
    end = cap if stop is None else stop
    cfg = dict(dataset="mqar", n_layer=2, n_head=4, n_embd=64, block_size=128, vocab_size=256,
               mqar_pairs=[4, 8], mqar_alpha=0.01, mqar_examples=1024, matrix_lr=0.005, seed=seed,
               max_iters=cap, window=window, stop_acc=0.99, schedule="constant")
    lines = [dict(type="header", run=os.path.basename(path), attn=attn, config=cfg, kv_bytes_per_token=kv,
                  mha_kv_bytes_per_token=1024)]
    lines += [dict(type="step", step=s, tokens=s, flops=0, test_loss=1.0, test_acc=0.1) for s in range(0, end, 100)]
    acc = 1.0 if stop else 0.1  # solved, or flat on the plateau to the cap
    lines.append(dict(type="score", step=end, test_loss=0.0, test_acc=acc, **({"stopped": True} if stop else {}),
                      **{f"test_dist_p{N}": d for N, d in (dist or {}).items()}))
    lines.append(dict(type="step", step=end, tokens=end, flops=0, test_loss=0.0, test_acc=acc))
    os.makedirs(path)
    with open(os.path.join(path, "log.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in lines))


def test_plot_recall_gives_times_to_solve_with_kaplan_meier_log_rank_and_fisher(tmp_path):
    from analysis import stats
    times = {("mha", 0): [100, 200, 200, 300, None], ("gqa", 0): [400, 600, None, None, None],
             ("mqa", 0): [100, 300, 300, 500, 900], ("mha", 32): [None] * 5}
    kv = {"mha": 1024, "gqa": 512, "mqa": 256}
    for (attn, w), ts in times.items():
        for s, t in enumerate(ts):
            stop_log(tmp_path / f"{attn}_w{w}_s{s}", attn, s, t, window=w, kv=kv[attn],
                     dist={4: {"2": [3, 4], "16": [1, 1]}, 8: {"2": [2, 2]}})
    runs = logs.load_runs([str(tmp_path)])
    _, table, notes, _ = recall.recall_mode(runs)
    rows = {r.split("|")[2].strip(): [c.strip() for c in r.split("|")[1:-1]]
            for r in table.split("\n\n")[0].splitlines()[2:]}
    as_km = lambda ts: ([t or 1000 for t in ts], [t is not None for t in ts])  # noqa: E731
    base = as_km(times[("mha", 0)])
    assert rows["Standard MHA"][4] == "4/5" and rows["Standard MHA"][8] == "-"  # no test against itself
    assert rows["Standard MHA"][5] == str(stats.median_time(*base)[0]) == "200"
    ps = {}
    for (attn, w), name in ((("gqa", 0), "GQA"), (("mqa", 0), "MQA"), (("mha", 32), "Standard MHA, window 32")):
        o_e, _, p = stats.logrank(*as_km(times[(attn, w)]), *base)
        ps[name] = p
        assert rows[name][7] == f"{o_e:+.1f}" and rows[name][8] == f"{p:.2g}"
        k = sum(t is not None for t in times[(attn, w)])
        assert rows[name][4] == f"{k}/5" and rows[name][10] == f"{stats.fisher_exact(k, 5, 4, 5):.2g}"
    assert [rows[n][9] for n in ps] == [f"{p:.2g}" for p in holm(list(ps.values()))]
    assert rows["Standard MHA, window 32"][5] == "not reached"
    assert rows["Standard MHA, window 32"][13] == "5/5" and rows["GQA"][13] == "3/3"  # flat at 0.1
    from analysis import survival
    assert survival.flat({"acc": np.array([0.5, 0.10, 0.11, 0.12]), "evals": []})
    assert not survival.flat({"acc": np.array([0.10, 0.11, 0.14]), "evals": []})  # still rising
    # a window's curve is its accuracy inside the window: rising there while flat over every answer
    evals = [{"test_acc_win_p4": a, "test_acc_win_p8": a / 2, "test_acc_p4": 0.1} for a in (0.2, 0.3, 0.4)]
    assert not survival.flat({"acc": np.array([0.1, 0.1, 0.1]), "evals": evals})
    # a count with no answer inside the window (None) is left out, not read as 0
    evals = [{"test_acc_win_p4": a, "test_acc_win_p8": None} for a in (0.2, 0.3, 0.4)]
    assert survival.curve({"evals": evals}).tolist() == [0.2, 0.3, 0.4]
    score = {"test_acc_p4": 0.5, "test_acc_win_p4": 0.995, "test_acc_p8": 0.0, "test_acc_win_p8": None}
    assert survival.whole_set_solved({"score": score, "config": {"stop_acc": 0.99}})
    # the frontier's accuracy at the most pairs, every answer: the solved runs' mean, not the window's
    runs = [{"score": dict(score, test_acc_p8=a)} for a in (0.1, 0.3, 0.9)]
    acc, N = survival.most_pairs({"runs": runs, "solved": [True, True, False]})
    assert N == 8 and acc == pytest.approx(0.2)
    # the frontier: MQA's 256 B solved; the window never did, at 32 of 128 tokens: 256 B
    frontier = table.split("\n\n")[2]
    assert "| MQA | 256 | 1.000 | - |" in frontier and "| Standard MHA, windows | - | - | 256 |" in frontier
    # by distance, the solved runs' hits pooled: MHA's 4 solved runs at 4 pairs, bin 2: 12 of 16
    dist = table.split("\n\n")[4]
    assert "| Standard MHA, 1024 B | 4 | 0.750 | - | - | 1.000 | - | - |" in dist
    assert any("Kaplan-Meier" in n for n in notes)


def test_a_cache_walk_on_other_seeds_joins_the_frontier_not_the_tests(tmp_path, capsys):
    # E7: part B's points (their own seeds) read beside part A's leave A's families as they were
    a, both = tmp_path / "a", tmp_path / "both"
    times = {"mha": [100, 200, 300, None], "gqa": [400, 500, None, None], "mqa": [200, 300, 300, 900]}
    for attn, ts in times.items():
        for s, t in enumerate(ts):
            stop_log(a / f"{attn}_s{s}", attn, s, t, kv={"mha": 1024, "gqa": 512, "mqa": 256}[attn])
    shutil.copytree(a, both)
    for s, t in zip((20, 21), (300, None)):  # a narrower MQA-like point, seeds never A's
        stop_log(both / f"mqa_small_s{s}", "mqa", s, t, kv=128)
    fig, table, _, _ = recall.recall_mode(logs.load_runs([str(both)]))
    with_b, only_a = table.split("\n\n"), recall.recall_mode(logs.load_runs([str(a)]))[1].split("\n\n")
    # the third panel, the share solved against the cache: MQA's line through 128 B (1/2) and 256 B
    mqa = [ln for ln in fig.axes[2].lines if list(ln.get_xdata()) == [128, 256]]
    assert len(mqa) == 1 and list(mqa[0].get_ydata()) == [0.5, 1.0]
    assert only_a[0] in with_b[0]  # A's rows, p values and Holm unchanged
    walked = next(l for l in with_b[0].splitlines() if "| 128 |" in l).split("|")[1:-1]
    assert walked[4].strip() == "1/2" and {c.strip() for c in walked[7:12]} == {"-"}
    assert walked[-1].strip() == "-"  # no reading: existence only
    assert "| MQA | 128 | 1.000 | - |" in with_b[2]  # the frontier moves down to it
    # an arm of part A short of one of MHA's seeds is not tested, and says so
    shutil.rmtree(a / "gqa_s3")
    short = recall.recall_mode(logs.load_runs([str(a)]))[1].split("\n\n")[0]
    assert "warning: GQA, 512 B: not every one of MHA's seeds" in capsys.readouterr().err
    assert next(l for l in short.splitlines() if "| GQA |" in l).split("|")[9].strip() == "-"

def test_the_plans_reading_of_each_arm():
    from analysis.survival import reading
    base = {"k": 16, "n": 16}
    arm = lambda k, p_f, p_lr=0.5, o_e=-1.0, flat=0: reading(  # noqa: E731
        {"base": base, "k": k, "n": 16, "p_f_holm": p_f, "p_lr_holm": p_lr, "o_e": o_e, "flat": flat})
    assert arm(14, 0.5) == "as often"  # 2 runs short, not established
    assert arm(14, 0.5, p_lr=0.01) == "later" and arm(16, 1, 0.01, o_e=3.0) == "sooner"
    assert arm(13, 0.5) == "inconclusive"  # 3 short, not established either
    assert arm(5, 0.001, flat=1) == "can't tell"  # fewer, and a censored run on the plateau
    assert arm(5, 0.001, flat=0) == "past the cap"  # fewer, every censored run still rising
    assert arm(16, 0.01) == "as often"  # level with MHA (the base solves 16 of 16)
    base["k"] = 8
    assert arm(16, 0.01) == "more often" and arm(9, 0.5) == "as often"

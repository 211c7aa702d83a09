"""The two sweeps (--pareto, --lr) on synthetic logs with known answers, and the committed sweep and
recall tables re-made from their logs."""
import glob
import math
import os
import re

import numpy as np
import pytest
import matplotlib

matplotlib.use("Agg")
import common  # noqa: E402
import plot  # noqa: E402
from analysis import curves, logs, stats, sweeps  # noqa: E402
from test_plot import SMALL, cells, header, refused, same_cells, step_lines, write  # noqa: E402


def sweep_dir(tmp_path):
    """A sweep: MHA, LRKV at r=2 and 8, GQA at 1 and 2 K/V heads, two seeds each, final losses known."""
    d = tmp_path / "pareto"
    final = {("mha", None): [2.80, 2.82], ("lrkv", 2): [2.90, 2.93], ("lrkv", 8): [2.78, 2.83],
             ("gqa", 1): [2.95, 2.99], ("gqa", 2): [2.86, 2.86]}
    mha_kv = 2 * SMALL["n_layer"] * SMALL["n_embd"] * 2
    for (attn, k), losses in final.items():
        for seed, last in enumerate(losses):
            h = header(attn, f"{attn}{k}_s{seed}", seed=seed)
            if attn == "lrkv":
                h["config"]["lrkv_rank"], h["kv_bytes_per_token"] = k, mha_kv * (32 + 4 * k) // 128
            if attn == "gqa":
                h["config"]["n_kv_head"], h["kv_bytes_per_token"] = k, mha_kv * k // 4
            write(d / h["run"], [h] + step_lines(attn, [4.0, 3.0, last]))
    return d


def test_pareto_sweep_points_and_files(tmp_path, capsys):
    d = sweep_dir(tmp_path)
    assert "add --pareto" in refused([str(d)], capsys)[0]  # a sweep is not one figure's experiment
    assert plot.main([str(d), "--pareto"]) == 0
    assert {"figure_pareto.png", "figure_pareto.pdf", "pareto.md"} <= set(os.listdir(d))
    assert not (d / "results.md").exists()
    rows = sweeps.sweep(logs.load_runs([str(d)]))
    assert [(r["attn"], r["setting"]) for r in rows] == [
        ("mha", "kv=4"), ("lrkv", "r=2"), ("lrkv", "r=8"), ("gqa", "kv=1"), ("gqa", "kv=2")]
    assert [r["kv_pct"] for r in rows] == pytest.approx([1.0, 40 / 128, 64 / 128, 0.25, 0.5])
    r8 = rows[2]
    assert r8["mean"] == pytest.approx(2.805) and r8["n"] == 2 and r8["diff"] == pytest.approx(-0.005)
    assert r8["diff_sd"] == pytest.approx(np.std([-0.02, 0.01], ddof=1)) and r8["established"] is False  # -0.02, +0.01
    assert rows[4]["diff"] == pytest.approx(0.05) and rows[4]["established"] is False  # +0.06, +0.04: 1 df
    # at nearly equal cache: LRKV r=2 (31%) with MQA (25%), r=8 with GQA kv=2 (50% each)
    pairs = sweeps.budget_pairs(rows)
    assert [(q["a"]["setting"], q["b"]["setting"]) for q in pairs] == [("r=2", "kv=1"), ("r=8", "kv=2")]
    assert pairs[0]["diff"] == pytest.approx(-0.055) and pairs[0]["p"] == pytest.approx(1 - 2 * math.atan(11) / math.pi)
    fig, ax = sweeps.draw_pareto(rows)
    lines = {c.get_label(): c.lines[0] for c in ax.containers}  # errorbar: data line, caps, bars
    assert sorted(lines) == ["GQA", "LRKV", "Standard MHA"]
    assert lines["LRKV"].get_xdata().tolist() == pytest.approx([100 * 40 / 128, 50.0])
    assert lines["GQA"].get_ydata().tolist() == pytest.approx([2.97, 2.86])
    md = (d / "pareto.md").read_text()
    assert "| LRKV | r=8 | 50.0% |" in md and "| GQA | kv=2 | 50.0% |" in md
    # Holm within each table: 4 comparisons against MHA, 2 pairs
    assert "| 2 | +0.0500 | [-0.0771, +0.1771] | 0.13 | 0.25 | no |" in md
    assert "| LRKV r=2 - GQA kv=1 | 31.2% vs 25.0% | 2 | -0.0550 | [-0.1185, +0.0085] | 0.058 | 0.12 | no |" in md


def test_lr_sweep_each_design_at_its_own_best_rate(tmp_path, capsys):
    # two designs at three Muon rates, three seeds; MHA is best at the paper's 0.02, LRKV at 0.01
    final = {("mha", 0.01): [2.90, 2.92, 2.91], ("mha", 0.02): [2.80, 2.82, 2.81], ("mha", 0.04): [2.85, 2.86, 2.84],
             ("lrkv", 0.01): [2.78, 2.81, 2.79], ("lrkv", 0.02): [2.83, 2.84, 2.85], ("lrkv", 0.04): [2.95, 2.96, 2.94]}
    d = tmp_path / "lr"
    for (attn, lr), losses in final.items():
        for seed, last in enumerate(losses):
            h = header(attn, f"{attn}_lr{lr}_s{seed}", seed=seed)
            h["config"]["matrix_lr"] = lr
            write(d / h["run"], [h] + step_lines(attn, [4.0, 3.0, last]))
    h = header("mha", "mha_lr0.02_s3", seed=3)  # a fourth seed at one rate only: left out, said so
    h["config"]["matrix_lr"] = 0.02
    write(d / h["run"], [h] + step_lines("mha", [4.0, 3.0, 2.5]))
    assert "matrix_lr=0.01 not 0.02" in refused([str(d)], capsys)[0]  # not one experiment
    assert plot.main([str(d), "--lr"]) == 0
    out = capsys.readouterr()
    assert "left out 1 run(s)" in out.err and "mha_lr0.02_s3" in out.err
    assert {"figure_lr.png", "figure_lr.pdf", "lr.md"} <= set(os.listdir(d))
    rows, summary = sweeps.lr_sweep(logs.load_runs([str(d)]))
    assert [(r["attn"], r["lr"]) for r in rows] == [(a, lr) for a in ("mha", "lrkv") for lr in (0.01, 0.02, 0.04)]
    lrkv01 = rows[3]
    assert lrkv01["mean"] == pytest.approx(np.mean([2.78, 2.81, 2.79])) and lrkv01["n"] == 3
    assert lrkv01["diff"] == pytest.approx(np.mean([-0.05, -0.03, -0.06]))  # against LRKV at 0.02, seed by seed
    assert rows[1]["diff"] is None  # MHA at the paper's rate is its own reference
    s = {x["attn"]: x for x in summary}
    assert s["mha"]["best"] == 0.02 and s["lrkv"]["best"] == 0.01
    assert s["lrkv"]["paper"]["diff"] == pytest.approx(0.03)  # 2.83-2.80, 2.84-2.82, 2.85-2.81
    own = stats.paired_t([-0.02, -0.01, -0.02])
    assert s["lrkv"]["own"]["diff"] == pytest.approx(own["diff"]) and s["lrkv"]["own"]["p"] == pytest.approx(own["p"])
    assert s["lrkv"]["paper"]["established"] is True and s["lrkv"]["own"]["established"] is True  # the sign flips
    md = (d / "lr.md").read_text()
    assert "| LRKV | 0.01 | 0.5 | 3 | - |" in md  # no validation split, so no validation loss
    assert "0.01 (x0.5, test, edge)" in md and "0.02 (x1, test) |" in md
    assert s["lrkv"]["edge"] is True and s["mha"]["edge"] is False  # LRKV's best is the lowest rate swept
    # Δ MHA at 0.01, 0.02, 0.04 by seed: -0.12 +0.03 +0.10, -0.11 +0.02 +0.10, -0.12 +0.04 +0.10; with
    # an intercept per seed the slope per doubling is (0.22 + 0.21 + 0.22) / 6
    assert s["lrkv"]["rate"]["slope"] == pytest.approx(0.65 / 6) and s["lrkv"]["rate"]["df"] == 9 - 3 - 1
    assert "| LRKV | 9 | +0.1083 |" in md and s["mha"]["rate"] == {}
    r = s["lrkv"]["rate"]  # the one slope is its own family: sized at 0.05 from its own se and df
    assert cells(md.split("moves with the rate")[1], "LRKV")[-1] == f"{stats.smallest_gap(r['se'], 5, 0.05):.4f}"
    fig, ax = sweeps.draw_lr(rows, summary)
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    assert sorted(lines) == ["LRKV", "Standard MHA"] and ax.get_xscale() == "log"
    assert lines["LRKV"].get_xdata().tolist() == [0.01, 0.02, 0.04]


def test_lr_sweep_chooses_each_rate_on_validation(tmp_path, capsys):
    # test prefers LRKV at 0.01, validation at 0.02: with score lines the choice reads validation
    val = {0.01: 2.95, 0.02: 2.90, 0.04: 2.99}
    d = tmp_path / "lr"
    for attn in ("mha", "lrkv"):
        for lr, v in val.items():
            for seed in range(2):
                h = header(attn, f"{attn}_lr{lr}_s{seed}", seed=seed)
                h["config"]["matrix_lr"] = lr
                last = 2.80 + (lr == 0.01 and attn == "lrkv") * -0.1 + 0.01 * seed
                score = {"type": "score", "step": 200, "val_loss": v + 0.01 * seed, "test_loss": last - 0.5}
                write(d / h["run"], [h] + step_lines(attn, [4.0, 3.0, last]) + [score])
    rows, summary = sweeps.lr_sweep(logs.load_runs([str(d)]))
    s = {x["attn"]: x for x in summary}
    assert s["lrkv"]["best"] == 0.02 and s["lrkv"]["chosen_on"] == "validation"
    assert rows[3]["mean"] == pytest.approx(2.70 - 0.5 + 0.005)  # the tables read the score's test loss
    assert [r["val"] for r in rows[3:]] == pytest.approx([2.955, 2.905, 2.995])  # and print what chose
    assert "| validation loss | test loss |" in sweeps.lr_tables(rows, summary)
    assert "| LRKV | 0.01 | 0.5 | 2 | 2.9550 | 2.2050 |" in sweeps.lr_tables(rows, summary)
    # one run without its score line: that design's choice falls back to test, and says so
    write(d / "lrkv_lr0.04_s1", [header("lrkv", "lrkv_lr0.04_s1", seed=1, config=dict(
        header("lrkv", "x")["config"], seed=1, matrix_lr=0.04))] + step_lines("lrkv", [4.0, 3.0, 2.81]))
    _, summary = sweeps.lr_sweep(logs.load_runs([str(d)]))
    assert {x["attn"]: x["chosen_on"] for x in summary} == {"mha": "validation", "lrkv": "test"}


def test_a_sweep_in_progress_and_mixed_estimates(tmp_path, capsys):
    # mid-sweep no seed has reached the end at every rate: the table is drawn, not a ZeroDivisionError
    d = tmp_path / "lr"
    for attn, lr, losses in [("mha", 0.01, [4.0, 3.0, 2.9]), ("mha", 0.02, [4.0, 3.0]), ("lrkv", 0.01, [4.0, 3.0, 2.8]),
                             ("lrkv", 0.02, [4.0, 3.0, 2.7])]:
        h = header(attn, f"{attn}_lr{lr}_s0")
        h["config"]["matrix_lr"] = lr
        write(d / h["run"], [h] + step_lines(attn, losses))
    rows, summary = sweeps.lr_sweep(logs.load_runs([str(d)]))
    assert {s["chosen_on"] for s in summary} == {"test"}
    # a run without its score line beside runs with one: said, since the two estimates differ
    e = tmp_path / "fig"
    for seed in range(2):
        for attn in ("mha", "lrkv"):
            h = header(attn, f"{attn}_s{seed}", seed=seed)
            score = [{"type": "score", "step": 200, "val_loss": 2.9, "test_loss": 2.8}] * (seed == 0 or attn == "mha")
            write(e / h["run"], [h] + step_lines(attn, [4.0, 3.0, 2.85]) + score)
    capsys.readouterr()
    curves.summarize(logs.load_runs([str(e)]))
    assert "lrkv_s1: no score line at step 200" in capsys.readouterr().err


def test_the_committed_sweep_tables_are_what_their_logs_give(tmp_path, monkeypatch):
    # docs/results.md's E3a: its slopes and its choice of rates must come from the logs; re-plot the
    # sweep, compare the committed lr.md, then the page's slope rows and archive.md's validation
    # table
    monkeypatch.chdir(os.path.join(os.path.dirname(__file__), ".."))
    dirs = ["docs/runs/e3a"] + sorted(glob.glob("docs/runs/e1/cpu_*_s[0-2]"))
    assert plot.main(["--lr", *dirs, "--out", str(tmp_path)]) == 0
    md = (tmp_path / "lr.md").read_text()
    assert md == open("docs/runs/e3a/lr.md").read()
    page = open("docs/results.md").read().split("## E3a.")[1].split("\n## ")[0]
    detail = open("docs/archive.md").read().split("### E3a in detail")[1]  # the choice's table
    slopes, choice = md.split("moves with the rate")[1], detail.split("**The choice**")[1]
    choice = choice.split("\n\n")[1]
    for label in ("LRKV", "MLA", "GQA", "MQA"):  # slope, its interval, p, Holm, established, finds
        same_cells(cells(page, label)[1:], cells(slopes, label)[2:])
    rates = (0.01, 0.014, 0.02, 0.028, 0.04)
    for label in ("Standard MHA", "LRKV", "MLA", "GQA", "MQA"):  # mean validation loss at each rate
        row = cells(choice, label)
        assert [c.strip("*") for c in row[1:6]] == [cells(md, f"{label} | {lr:g}")[4] for lr in rates]
        bold = next(i for i, c in enumerate(row[1:6]) if c.startswith("**"))
        best = cells(md.split("own best rate")[1], label)[6]  # e.g. 0.04 (x2, validation, edge)
        assert best.startswith(f"{rates[bold]:g} (x") and "validation" in best
        assert row[6] == re.sub(r"(\S+) \(x(\S+), validation(, edge)?\)", r"×\2 (\1\3)", best)


# E4s's table borrows E4m's MLA and GQA runs, which ran at the rate E4s gives every design
@pytest.mark.parametrize("folder, flag, table, more, section", [
    ("e4", "--recall", "recall.md", [], "### E4."),
    ("e4s", "--recall", "recall.md", ["docs/runs/e4/mla_*", "docs/runs/e4/gqa_*"], "### E4s."),
    ("e6b", "--recall", "recall.md", [], None),
    ("pareto_split", "--pareto", "pareto.md", [], None)])
def test_the_committed_recall_and_sweep_tables_are_what_their_logs_give(tmp_path, monkeypatch, folder, flag,
                                                                         table, more, section):
    monkeypatch.chdir(os.path.join(os.path.dirname(__file__), ".."))
    runs = [f"docs/runs/{folder}"] + [r for g in more for r in sorted(glob.glob(g))]
    assert plot.main(runs + [flag, "--out", str(tmp_path)]) == 0
    md = (tmp_path / table).read_text()
    assert md == open(f"docs/runs/{folder}/{table}").read()
    if section is None:
        return
    # archive.md's matrix (the probe E6 replaces), typed from that table: mean test accuracy (runs
    # solved) per cell
    page = open("docs/archive.md").read().split(section)[1].split("\n### ")[0]
    names = {d.label: d.label.split()[-1] for d in common.DESIGNS.values()}  # "Standard MHA" -> "MHA"
    want = {}
    for row in md.splitlines():
        c = [x.strip() for x in row.split("|")[1:-1]]
        if len(c) > 8 and c[0].isdigit():  # d_model, pairs, design, KV, rate, seeds, accuracy, min-max, solved
            want.setdefault(names[c[2]], []).append((int(c[0]), int(c[1]), f"{c[6]} ({c[8].split('/')[0]})"))
    assert len(want) == 5
    for design, cells_ in want.items():
        line = next(r for r in page.splitlines() if r.startswith(f"| {design} ("))
        assert [x.strip() for x in line.split("|")[3:-1]] == [v for *_, v in sorted(cells_)], design


def test_e6s_table_on_the_page_is_what_its_logs_give(tmp_path, monkeypatch):
    # docs/runs/e6/recall.md and E6's table (archive.md, E6 in detail): plot.py's, from the
    # committed logs and stage B's validity runs (which fix the reference cells)
    monkeypatch.chdir(os.path.join(os.path.dirname(__file__), ".."))
    assert plot.main(["docs/runs/e6", "--recall", "--reference", "docs/runs/e6b", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "recall.md").read_text()
    assert md == open("docs/runs/e6/recall.md").read()
    page = open("docs/archive.md").read().split("### E6 in detail")[1].split("\n### ")[0]
    assert "\n".join(line for line in md.splitlines() if line.startswith("|")) in page

"""plot.py on synthetic logs whose numbers can be worked out by hand. Fast and offline."""
import os
import sys
import json
import math
import re

import numpy as np
import pytest
import matplotlib
matplotlib.use("Agg")
from matplotlib.colors import to_rgba

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import plot  # noqa: E402
from analysis import curves, logs, stats, sweeps  # noqa: E402

TPS = 10_000  # tokens per step: evals every 100 steps are 1M tokens apart
FPT = {"mha": 1.0e8, "lrkv": 0.98e8, "mla": 0.95e8, "gqa": 0.96e8, "mqa": 0.94e8}
SMALL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 256, "dataset": "shakespeare"}

# test losses at steps 0, 100, ..., i.e. at 0, 1M, 2M, ... tokens
MHA = [4.0, 3.5, 3.2, 3.0, 2.9, 2.8]            # the target: 2.8 at 5M tokens
LRKV = [4.0, 3.4, 3.1, 2.9, 2.75, 2.7]          # 2.8 is 2/3 of the way from 3M to 4M tokens
GQA_A = [4.0, 3.45, 3.15, 2.95, 2.85, 2.78]     # two seeds, mean [4, 3.5, 3.2, 3.0, 2.85, 2.79]
GQA_B = [4.0, 3.55, 3.25, 3.05, 2.85, 2.80]     # mean reaches 2.8 at 4M + (0.05/0.06)M
MLA = [4.0, 3.4, 3.1, 2.95]                     # partial: stopped at 3M tokens, above 2.8 -> "not yet"
MQA = [4.0, 3.6, 3.3, 3.1, 3.0, 2.95]           # full length, never gets to 2.8


def header(attn, run, seed=0, shape=SMALL, **kw):
    cfg = dict(shape, n_kv_head={"mha": 4, "gqa": 2, "mqa": 1}.get(attn, 4), lrkv_rank=8, mla_kv_rank=32,
               mla_rope_dim=16, seed=seed, max_iters=500, batch_size=8)
    mha_kv = 2 * shape["n_layer"] * shape["n_embd"] * 2
    kv = {"mha": mha_kv, "gqa": mha_kv // 2, "mqa": mha_kv // 4, "mla": mha_kv // 8, "lrkv": mha_kv // 2}[attn]
    h = {"type": "header", "run": run, "attn": attn, "config": cfg, "params": 1_234_567, "kv_params": 1000,
         "flops_per_token": FPT[attn], "paper_flops_per_token": 6 * 1_234_567, "kv_bytes_per_token": kv,
         "mha_kv_bytes_per_token": mha_kv, "tokens_per_step": TPS, "git": "abc", "device": "cpu", "time": "now"}
    h.update(kw)
    return h


def step_lines(attn, losses, first=0, train_every=25):
    """Step lines every train_every steps, with an eval (test_loss) every 100 steps."""
    out = []
    for s in range(first, 100 * (len(losses) - 1) + 1, train_every):
        rec = {"type": "step", "step": s, "tokens": s * TPS, "flops": s * TPS * FPT[attn], "train_loss": 5.0,
               "lr": 1e-3, "dt": 0.1, "tokens_per_s": 1e5, "mfu": None}
        if s % 100 == 0:
            rec.update(test_loss=losses[s // 100], test_bpb=losses[s // 100] / np.log(2) / 4)
        out.append(json.dumps(rec))
    return out


def cells(md, label):
    """The cells of the Markdown table row that starts with label."""
    line = next(l for l in md.splitlines() if l.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def refused(argv, capsys):
    """plot.main(argv) must refuse: exit status 2, no traceback, and stderr ends in one line that
    starts `error: `. Returns that line and the warnings before it."""
    with pytest.raises(SystemExit) as e:
        plot.main(argv)
    err = capsys.readouterr().err
    *warnings, line = err.splitlines()
    assert e.value.code == 2 and line.startswith("error: ") and err.endswith("\n") and "Traceback" not in err
    return line, warnings


def write(folder, lines, tail=""):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "log.jsonl"), "w") as f:
        f.write("\n".join(json.dumps(l) if isinstance(l, dict) else l for l in lines) + "\n" + tail)
    return folder


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "out"
    # MHA was interrupted and resumed from step 300: the first segment's steps 300-400 are stale
    first = step_lines("mha", MHA[:5])
    first = [l.replace('"test_loss": 2.9', '"test_loss": 1.0') for l in first]  # stale value at step 400
    write(d / "mha", [header("mha", "mha")] + first + [header("mha", "mha", resumed=True)]
          + step_lines("mha", MHA, first=300))
    write(d / "lrkv", [header("lrkv", "lrkv")] + step_lines("lrkv", LRKV))
    write(d / "gqa_s0", [header("gqa", "gqa_s0", seed=0)] + step_lines("gqa", GQA_A))
    write(d / "gqa_s1", [header("gqa", "gqa_s1", seed=1)] + step_lines("gqa", GQA_B))
    write(d / "mla", [header("mla", "mla")] + step_lines("mla", MLA))
    # MQA is still running: its last line is half written
    write(d / "mqa", [header("mqa", "mqa")] + step_lines("mqa", MQA), tail='{"type": "step", "step": 51')
    return d


def test_reach_interpolates_and_never():
    t = [0, 10, 20, 30]
    assert curves.reach(t, [4.0, 3.0, 2.0, 1.0], 2.5) == pytest.approx(15.0)
    assert curves.reach(t, [4.0, 3.0, 2.0, 1.0], 2.0) == pytest.approx(20.0)   # exactly at an eval point
    assert curves.reach(t, [2.0, 3.0, 1.0, 1.0], 2.5) == pytest.approx(0.0)    # already there at the first eval
    assert curves.reach(t, [4.0, 3.0, 2.6, 2.55], 2.5) is None
    assert curves.reach(t, [4.0, 2.0, 3.0, 1.0], 2.5) == pytest.approx(7.5)    # the first crossing counts


def test_load_run_resumed_and_truncated(runs_dir, capsys):
    mha = logs.load_run(str(runs_dir / "mha" / "log.jsonl"))
    assert mha["attn"] == "mha" and mha["header"].get("resumed") is None  # the first header describes it
    assert mha["step"].tolist() == [0, 100, 200, 300, 400, 500]
    assert mha["loss"].tolist() == MHA  # the stale 1.0 at step 400 is gone
    mqa = logs.load_run(str(runs_dir / "mqa" / "log.jsonl"))
    assert mqa["loss"].tolist() == MQA
    err = capsys.readouterr().err
    assert "mqa" in err and "unreadable" in err and "mha" not in err


def test_summary_values_by_hand(runs_dir, capsys):
    runs = logs.load_runs([str(runs_dir)])
    rows = {r["attn"]: r for r in curves.summarize(runs)}
    assert [r["attn"] for r in curves.summarize(runs)] == ["mha", "lrkv", "mla", "gqa", "mqa"]
    M = 1e6
    assert rows["mha"]["loss"] == pytest.approx(2.8)
    assert rows["mha"]["reach_tokens"] == pytest.approx(5 * M) and rows["mha"]["faster_tokens"] == pytest.approx(0)
    assert rows["lrkv"]["loss"] == pytest.approx(2.7)
    assert rows["lrkv"]["reach_tokens"] == pytest.approx(3 * M + 2 / 3 * M)
    assert rows["lrkv"]["faster_tokens"] == pytest.approx(1 - (11 / 3) / 5)
    # compute: LRKV spends 0.98e8 FLOPs/token against MHA's 1e8
    assert rows["lrkv"]["reach_flops"] == pytest.approx(11 / 3 * M * 0.98e8)
    assert rows["lrkv"]["faster_flops"] == pytest.approx(1 - 11 / 3 * 0.98 / 5)
    assert rows["gqa"]["n"] == 2 and rows["gqa"]["loss"] == pytest.approx(2.79)
    assert rows["gqa"]["reach_tokens"] == pytest.approx(4 * M + 0.05 / 0.06 * M)
    assert rows["gqa"]["sd"] == pytest.approx(np.std([2.78, 2.80], ddof=1))
    assert rows["gqa"]["diff"] == pytest.approx(2.78 - 2.8)  # paired with MHA's seed 0 only: one pair
    assert rows["gqa"]["pairs"] == 1 and rows["gqa"]["diff_sd"] is None and rows["gqa"]["established"] is None
    assert rows["gqa"]["curve"]["lo"][3] == pytest.approx(2.95) and rows["gqa"]["curve"]["hi"][3] == pytest.approx(3.05)
    assert rows["mla"]["loss"] == pytest.approx(2.95) and rows["mla"]["reach_tokens"] is None
    assert rows["mqa"]["reach_tokens"] is None
    assert rows["lrkv"]["sd"] is None and rows["mha"]["diff"] is None
    assert rows["gqa"]["kv_pct"] == pytest.approx(0.5) and rows["mla"]["kv_pct"] == pytest.approx(0.125)
    md = plot.results_table(list(rows.values()))
    gaps, costs = md.split("\n\n")  # two tables: the gaps, the costs
    head = lambda t: [c.strip() for c in t.splitlines()[0].strip("|").split("|")]
    col = lambda label, name, t=gaps: cells(t, label)[head(t).index(name)]
    # one seed each side (LRKV), or one pair (GQA): no interval on 'faster'
    assert col("LRKV", "faster (95% CI)") == "+26.7%" and col("LRKV", "faster, compute (95% CI)") == "+28.1%"
    assert col("LRKV", "Δ MHA") == "-0.1000" and col("GQA", "faster (95% CI)") == "+3.3%"
    assert col("GQA", "test loss") == "2.7900" and col("GQA", "KV % MHA", costs) == "50.0%" and col("GQA", "sd") == "0.0141"
    assert col("MLA", "faster (95% CI)") == "not yet" and col("MQA", "faster, compute (95% CI)") == "never"
    assert col("MLA", "tokens", costs) == "3M"
    for t in (gaps, costs):
        lines = t.splitlines()
        assert lines[1] == "|---|" + "---:|" * (len(head(t)) - 1) and lines[2].startswith("| Standard MHA |")
        assert {len(cells(t, r["label"])) for r in rows.values()} == {len(head(t))}


def test_faster_interval_by_hand(tmp_path):
    # MHA's two seeds both reach 2.8 at 5M tokens; the design's seed 0 is LRKV's curve (+26.7%),
    # its seed 1 MQA's (never), and their mean never gets to 2.8 either: a quarter of the resamples
    # draw seed 0 twice, so the 97.5% point is +26.7% and the 2.5% point 'never'
    d = tmp_path / "out"
    for seed, losses in enumerate([LRKV, MQA]):
        write(d / f"mha_s{seed}", [header("mha", f"mha_s{seed}", seed=seed)] + step_lines("mha", MHA))
        write(d / f"lrkv_s{seed}", [header("lrkv", f"lrkv_s{seed}", seed=seed)] + step_lines("lrkv", losses))
    lrkv = next(r for r in curves.summarize(logs.load_runs([str(d)])) if r["attn"] == "lrkv")
    assert lrkv["faster_tokens_ci"] == (-math.inf, pytest.approx(1 - (11 / 3) / 5))
    assert "never [never, +26.7%]" in cells(plot.results_table([lrkv]), "LRKV")
    # both seeds LRKV's curve: every resample is the same, the interval is the point
    write(d / "lrkv_s1", [header("lrkv", "lrkv_s1", seed=1)] + step_lines("lrkv", LRKV))
    lrkv = next(r for r in curves.summarize(logs.load_runs([str(d)])) if r["attn"] == "lrkv")
    assert lrkv["faster_tokens_ci"] == pytest.approx((1 - (11 / 3) / 5,) * 2)


def test_figure_lines_styles_and_axes(runs_dir):
    runs = logs.load_runs([str(runs_dir)])
    fig, ax, top = plot.draw(curves.summarize(runs))
    lines = ax.get_lines()
    assert [l.get_label() for l in lines] == ["Standard MHA", "LRKV", "MLA", "GQA", "MQA"]
    want = [("tab:blue", "-"), ("tab:red", "-"), ("tab:purple", ":"), ("tab:orange", "--"), ("tab:green", "-")]
    for l, (color, ls) in zip(lines, want):
        assert to_rgba(l.get_color()) == to_rgba(color) and l.get_linestyle() == ls
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Standard MHA", "LRKV", "MLA", "GQA", "MQA"]
    assert len(ax.collections) == 1  # one min-max band: only GQA has two seeds
    assert lines[1].get_xdata().tolist() == [0, 1, 2, 3, 4, 5]  # Millions of tokens
    assert ax.get_xlabel() == "Training Tokens (Millions)"
    assert ax.get_ylabel() == "Test Cross-Entropy Loss"
    # 5M tokens x 1e8 FLOPs/token = 5e14 FLOPs: TeraFLOPs, converted with MHA's ratio
    assert top is not None and top in ax.child_axes
    assert top.get_xlabel() == "Training Compute (TeraFLOPs)"
    assert ax.get_title() == "Training Compute (TeraFLOPs) vs. Test Cross-Entropy Loss"
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    assert top.get_xlim() == pytest.approx((lo * 100, hi * 100))  # 1M tokens = 1e14 FLOPs = 100 TeraFLOPs
    assert lo == pytest.approx(0.5)  # the view starts at 10% of the 5M tokens, like the paper's 5B of 50B


def test_flops_axis_and_unit_scaling(runs_dir):
    runs = logs.load_runs([str(runs_dir)])
    fig, ax, top = plot.draw(curves.summarize(runs), x="flops", seeds=True)
    assert ax.get_xlabel() == "Training Compute (TeraFLOPs)"
    assert top.get_xlabel() == "Training Tokens (Millions)"
    mqa = [l for l in ax.get_lines() if l.get_label() == "MQA"][0]
    assert mqa.get_xdata()[-1] == pytest.approx(5e6 * 0.94e8 / 1e12)  # each design's own compute
    assert len(ax.get_lines()) == 5 + 6  # --seeds adds one thin line per run
    assert plot.unit(5e10, plot.TOKEN_UNITS) == (1e9, "Billions")
    assert plot.unit(5e5, plot.TOKEN_UNITS) == (1e3, "Thousands")
    assert plot.unit(1.536e20, plot.FLOP_UNITS) == (1e18, "ExaFLOPs")
    assert plot.unit(3e15, plot.FLOP_UNITS) == (1e15, "PetaFLOPs")
    assert plot.unit(5e7, plot.FLOP_UNITS) == (1e9, "GigaFLOPs")


def test_main_writes_files_and_prints_table(runs_dir, tmp_path, capsys):
    out = tmp_path / "figs"
    assert plot.main([str(runs_dir), f"--out={out}"]) == 0
    stdout = capsys.readouterr().out
    assert (out / "figure_tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "figure_tokens.pdf").read_bytes()[:5] == b"%PDF-"
    md = (out / "results.md").read_text()
    assert "| LRKV | 1 | 2.7000 | - | 1 | -0.1000 | - | - | - | - | - | - | +26.7% | +28.1% |" in md
    assert "| GQA | 2 | 2.7900 | 0.0141 |" in md and "| LRKV | 5M | 1024 | 50.0% |" in md
    assert "established when Holm's p < 0.05" in md and "figure_tokens.png" in stdout
    assert stdout.startswith(md)  # the console shows the same Markdown
    # without --out, beside the logs; --x=flops leaves the token figure alone
    before = (out / "figure_tokens.png").read_bytes()
    assert plot.main([str(runs_dir)]) == 0 and plot.main([str(runs_dir), "--x=flops"]) == 0
    assert {"figure_tokens.png", "figure_flops.png", "figure_flops.pdf", "results.md"} <= set(os.listdir(runs_dir))
    assert plot.main([str(runs_dir), f"--out={out}", "--x=flops"]) == 0
    assert (out / "figure_tokens.png").read_bytes() == before and (out / "figure_flops.png").exists()


@pytest.mark.parametrize("stray, why", [
    (dict(max_iters=300), "max_iters=300 not 500"),
    (dict(n_embd=256), "n_embd=256 not 128"),
    (dict(lrkv_rank=4), "lrkv_rank=4 not 8"),
])
def test_a_run_of_another_experiment_is_refused_not_averaged(runs_dir, capsys, stray, why):
    # a second LRKV run beside the experiment's, as `python train.py --attn=lrkv ...` would leave
    h = header("lrkv", "stray", seed=1)
    h["config"].update(stray)
    write(runs_dir / "stray", [h] + step_lines("lrkv", [9.0] * 6))
    err, warnings = refused([str(runs_dir)], capsys)
    assert len(warnings) == 1 and "mqa" in warnings[0]  # the fixture's MQA has a half-written last line
    assert "stray (" + why + ")" in err and "not one experiment" in err and err.count("(") == 1  # only the stray
    assert not (runs_dir / "results.md").exists() and not (runs_dir / "figure_tokens.png").exists()


def test_seeds_are_told_apart_by_their_own_designs_settings(tmp_path, capsys):
    # MHA and MQA ignore n_kv_head, yet their logs carry the preset's (GQA's): runs that differ in it
    # are seeds of one setting, averaged, in the figure and in a sweep
    d = tmp_path / "out"
    for attn in ("mha", "mqa"):
        for seed, (kv, losses) in enumerate([(4, GQA_A), (2, GQA_B)]):
            h = header(attn, f"{attn}_s{seed}", seed=seed)
            h["config"]["n_kv_head"] = kv
            write(d / h["run"], [h] + step_lines(attn, losses))
    assert plot.main([str(d)]) == 0
    assert cells((d / "results.md").read_text(), "Standard MHA")[1:3] == ["2", "2.7900"]
    assert cells((d / "results.md").read_text(), "MQA")[1:5] == ["2", "2.7900", "0.0141", "2"]
    rows = sweeps.sweep(logs.load_runs([str(d)]))
    assert [(r["setting"], r["n"]) for r in rows] == [("kv=4", 2), ("kv=1", 2)]  # one setting each
    # GQA's K/V heads are its own setting: two GQA runs that differ in them are two experiments
    for seed, kv in enumerate([2, 1]):
        h = header("gqa", f"gqa_s{seed}", seed=seed)
        h["config"]["n_kv_head"] = kv
        write(d / h["run"], [h] + step_lines("gqa", GQA_A))
    err, _ = refused([str(d)], capsys)
    assert "gqa_s1 (n_kv_head=1 not 2)" in err and "mha_s" not in err and "mqa_s" not in err
    assert plot.main([str(d), "--pareto"]) == 0  # a sweep of settings: two GQA points
    gqa = [r for r in sweeps.sweep(logs.load_runs([str(d)])) if r["attn"] == "gqa"]
    assert sorted((r["setting"], r["n"]) for r in gqa) == [("kv=1", 1), ("kv=2", 1)]


def test_no_eval_run_listed_not_drawn(tmp_path, capsys):
    d = tmp_path / "out"
    write(d / "mha", [header("mha", "mha")] + step_lines("mha", MHA))
    write(d / "gqa", [header("gqa", "gqa")] + [l for l in step_lines("gqa", GQA_A) if "test_loss" not in l])
    rows = curves.summarize(logs.load_runs([str(d)]))
    assert "no eval yet" in capsys.readouterr().err
    fig, ax, _ = plot.draw(rows)
    assert [l.get_label() for l in ax.get_lines()] == ["Standard MHA"]
    gqa = cells(plot.results_table(rows), "GQA")
    assert gqa[1] == "1" and gqa[2:4] == ["-"] * 2 and gqa[4] == "0" and gqa[5:12] == ["-"] * 7
    assert gqa[-2:] == ["-", "-"]


def test_paired_statistics_by_hand(tmp_path):
    # three seeds; LRKV is 0.03-0.05 below MHA on every seed (established), MQA is above on two seeds
    # and below on one (not), though its mean alone looks as big
    final = {"mha": [2.80, 2.90, 2.85], "lrkv": [2.76, 2.85, 2.82], "mqa": [2.90, 2.95, 2.75]}
    runs = []
    for attn, losses in final.items():
        for seed, last in enumerate(losses):
            path = write(tmp_path / f"{attn}{seed}", [header(attn, f"{attn}{seed}", seed=seed)]
                         + step_lines(attn, [4.0, 3.0, last]))
            runs.append(logs.load_run(os.path.join(path, "log.jsonl")))
    rows = {r["attn"]: r for r in curves.summarize(runs)}
    d = np.array(final["lrkv"]) - np.array(final["mha"])  # -0.04, -0.05, -0.03
    assert rows["lrkv"]["mean"] == pytest.approx(np.mean(final["lrkv"])) == pytest.approx(rows["lrkv"]["loss"])
    assert rows["lrkv"]["sd"] == pytest.approx(np.std(final["lrkv"], ddof=1))
    assert rows["lrkv"]["diff"] == pytest.approx(-0.04) and rows["lrkv"]["diff_sd"] == pytest.approx(0.01)
    assert rows["lrkv"]["diff_sd"] == pytest.approx(d.std(ddof=1))
    # t = -0.04 / (0.01 / sqrt 3) on 2 df; the interval -0.04 ± 4.3027 x 0.01 / sqrt 3
    t = 0.04 / (0.01 / math.sqrt(3))
    assert rows["lrkv"]["p"] == pytest.approx(1 - t / math.sqrt(2 + t * t))
    assert rows["lrkv"]["hi"] == pytest.approx(-0.04 + 4.302653 * 0.01 / math.sqrt(3), abs=1e-6)
    assert rows["lrkv"]["pairs"] == 3 and rows["lrkv"]["established"] is True
    assert rows["mqa"]["diff"] == pytest.approx(0.05 / 3) and rows["mqa"]["established"] is False
    assert rows["mha"]["diff"] is None and rows["mha"]["established"] is None
    # Holm over the table's two comparisons: LRKV's p is the smaller, so doubled
    assert cells(plot.results_table(list(rows.values())), "LRKV")[4:10] == [
        "3", "-0.0400", "[-0.0648, -0.0152]", "0.02", "0.04", "yes"]


def test_bad_arguments_are_one_line(runs_dir, capsys):
    # argparse's usage-and-error is two lines; plot.py's refusals are one, like every other script's
    assert "unrecognized arguments: --paper" in refused([str(runs_dir), "--paper"], capsys)[0]  # gone
    assert "--x" in refused([str(runs_dir), "--x=steps"], capsys)[0]
    assert "--pareto" in refused([str(runs_dir), "--lr", "--pareto"], capsys)[0]  # one kind of sweep at a time


def test_errors_exit_2_with_one_line(tmp_path, capsys):
    err, warnings = refused([str(tmp_path / "nope")], capsys)
    assert "nope" in err and not warnings
    (tmp_path / "empty").mkdir()
    err, warnings = refused([str(tmp_path / "empty")], capsys)
    assert "empty" in err and "python train.py" in err and not warnings
    bad = write(tmp_path / "bad" / "run1", [{"type": "header", "run": "run1", "config": {}}] + step_lines("mha", MHA))
    err, warnings = refused([str(tmp_path / "bad")], capsys)
    assert os.path.join(bad, "log.jsonl") in err and "attn" in err and not warnings
    # a design with no row in common.DESIGNS (a forgotten row) is named, with the designs it knows
    write(tmp_path / "bad" / "run2", [dict(header("mha", "run2"), attn="sparse")])
    write(tmp_path / "bad" / "run3", ["{not json"])
    err, warnings = refused([str(tmp_path / "bad")], capsys)
    assert "run2" in err and "'sparse', expected one of mha, lrkv, mla, gqa, mqa" in err and "run3" in err
    assert not warnings
    # a good run next to the bad ones: the bad ones are skipped with a warning, the plot is made
    write(tmp_path / "bad" / "good", [header("mha", "good")] + step_lines("mha", MHA))
    assert plot.main([str(tmp_path / "bad"), f"--out={tmp_path / 'o'}"]) == 0
    err = capsys.readouterr().err
    assert err.count("skipping") == 3 and (tmp_path / "o" / "figure_tokens.png").exists()


def test_cli_exit_code_and_no_torch(tmp_path):
    # the script itself: exit status 2 from the shell, and it never pulls in torch or the model
    import subprocess
    root = os.path.join(os.path.dirname(__file__), "..")
    p = subprocess.run([sys.executable, "plot.py", str(tmp_path / "nope")], cwd=root, capture_output=True, text=True,
                       env=dict(os.environ, MPLBACKEND="Agg"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: no such file")
    code = "import sys, plot; assert not {'torch', 'model', 'attention'} & set(sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0


def test_runs_scored_on_other_held_out_text_are_not_one_experiment(runs_dir, capsys):
    # a log from before the validation/test split (no held_out) beside one from after
    h = header("lrkv", "new", seed=1, held_out={"val": ["hamlet", "tempest"], "test": ["henry_v", "twelfth_night"]})
    write(runs_dir / "new", [h] + step_lines("lrkv", LRKV))
    err, _ = refused([str(runs_dir)], capsys)
    assert "new (held_out=" in err and "henry_v" in err


def test_versus_prints_each_designs_interaction_with_welchs_t(tmp_path, capsys):
    # here LRKV - MHA is -0.04, -0.05, -0.03 by seed; there +0.01, +0.02, +0.00: interaction -0.05
    here, there = tmp_path / "here", tmp_path / "there"
    for d, final in [(here, {"mha": [2.80, 2.90, 2.85], "lrkv": [2.76, 2.85, 2.82]}),
                     (there, {"mha": [2.70, 2.72, 2.74], "lrkv": [2.71, 2.74, 2.74]})]:
        for attn, losses in final.items():
            for seed, last in enumerate(losses):
                h = header(attn, f"{attn}{seed}", seed=seed, shape=dict(SMALL, block_size=256 if d == here else 64))
                write(d / h["run"], [h] + step_lines(attn, [4.0, 3.0, last]))
    assert plot.main([str(here), "--versus", str(there)]) == 0
    md = (here / "results.md").read_text()
    want = stats.welch([-0.04, -0.05, -0.03], [0.01, 0.02, 0.00])
    assert want["diff"] == pytest.approx(-0.05)
    row = cells(md.split(f"Against {there}:")[1], "LRKV")
    assert row[1:5] == ["3, 3", "-0.0400", "+0.0100", "-0.0500"] and row[6] == f"{want['p']:.2g}"
    assert row[9] == f"{stats.smallest_gap(want['se'], want['df'], 0.05):.4f}"  # one design, one family
    assert "Welch" in md
    assert "does not go with" in refused([str(here), "--versus", str(there), "--lr"], capsys)[0]


def same_cells(page, new):
    """A row of docs/results.md against plot.py's: the same numbers (2.0e−8 is 2e-08) and words; a
    page's bare 'no' stands for plot.py's 'no (p)' in the equivalence column."""
    number = r"[-+]?\d+\.?\d*(?:e[-+]?\d+)?"
    for a, b in zip([c.replace("−", "-") for c in page], new, strict=True):
        same = ([float(x) for x in re.findall(number, a)] == [float(x) for x in re.findall(number, b)]
                and re.sub(number, "#", a) == re.sub(number, "#", b))
        assert same or (a == "no" and b.startswith("no (")), (a, b)


@pytest.mark.parametrize("exp, args", [("E1", []), ("E2", ["--versus", "docs/runs/e1"]),
                                       ("E3b", ["--own_rates"])])
def test_the_committed_tables_are_what_their_logs_give(tmp_path, monkeypatch, exp, args):
    # docs/results.md's E1, E2 and E3b numbers (E2's gaps now in archive.md) must come from their
    # logs: re-plot them and compare the committed results.md, then each row of the pages' tables
    monkeypatch.chdir(os.path.join(os.path.dirname(__file__), ".."))
    assert plot.main([f"docs/runs/{exp.lower()}", "--out", str(tmp_path)] + args) == 0
    md = (tmp_path / "results.md").read_text()
    assert md == open(f"docs/runs/{exp.lower()}/results.md").read()
    page = open("docs/results.md").read().split(f"## {exp}.")[1].split("\n## ")[0]
    versus = "--versus" in args
    if versus:  # E2: the interactions on the page, its gaps at 1,024 in archive.md's details
        detail = open("docs/archive.md").read().split("### E2 in detail")[1]
        inter, page = page, detail.split("\n### ")[0]
    on_page = {"Standard MHA": "Standard MHA", "LRKV": "LRKV (r=13)", "MLA": "MLA (d_c=32)",
               "GQA": "GQA (2 K/V heads)", "MQA": "MQA"}
    mha = cells(md, "Standard MHA")
    same_cells(cells(page, "Standard MHA")[2:3], [f"{mha[2]} ± {mha[3]}"])
    if "--own_rates" in args:  # E3b's rate column: each design's Muon rate over the paper's 0.02
        for row in md.split("own Muon rate (matrix_lr): ")[1].split("\n")[0].split(", "):
            label, lr = row.rsplit(" ", 1)
            assert cells(page, on_page[label])[1] == f"×{float(lr) / 0.02:g}", row
    for label in ("LRKV", "MLA", "GQA", "MQA"):
        new, old = cells(md, label), cells(page, on_page[label])
        # mean ± sd, Δ MHA, 95% CI, p, Holm, established, finds, within ±0.008; faster, twice, but E2
        same_cells(old[2:], [f"{new[2]} ± {new[3]}", *new[5:12]] + ([] if versus else new[12:]))
        if versus:  # the interaction's row: Δ there, Δ here, I, its interval, p, Holm, established, finds
            new = cells(md.split("Against ")[1], label)
            same_cells(cells(inter, label)[1:], [new[3], new[2], *new[4:]])


def test_each_design_at_its_own_rate(tmp_path, capsys):
    # E3b: every design at the rate chosen for it; the figure's table, not refused as a sweep, but a
    # design at two rates still is
    d = tmp_path / "tuned"
    for seed in range(3):
        for attn, lr, losses in [("mha", 0.02, MHA), ("lrkv", 0.028, LRKV), ("mqa", 0.014, MQA)]:
            h = header(attn, f"{attn}_s{seed}", seed=seed)
            h["config"]["matrix_lr"] = lr
            write(d / h["run"], [h] + step_lines(attn, [x + 0.01 * seed * (attn != "mha") for x in losses]))
    assert "--own_rates" in refused([str(d)], capsys)[0]
    assert plot.main([str(d), "--own_rates"]) == 0
    md = (d / "results.md").read_text()
    assert cells(md, "LRKV")[5] == "%+.4f" % (LRKV[-1] + 0.01 - MHA[-1])  # the mean of 0, 0.01, 0.02 added
    assert "own Muon rate (matrix_lr): Standard MHA 0.02, LRKV 0.028, MQA 0.014" in md
    h = header("lrkv", "lrkv_s3", seed=3)
    h["config"]["matrix_lr"] = 0.04
    write(d / "lrkv_s3", [h] + step_lines("lrkv", LRKV))
    assert "lrkv_s3 (matrix_lr=0.04 not 0.028)" in refused([str(d), "--own_rates"], capsys)[0]
    assert "not allowed with argument" in refused([str(d), "--own_rates", "--lr"], capsys)[0]



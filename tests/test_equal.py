"""E8's comparison (plot.py --equal_cache) on synthetic logs whose answers are known: which rows join
which incumbent, the paired Δ and its reading, the family's answer, the figure's kinds."""
import os

import numpy as np
import pytest
import matplotlib

matplotlib.use("Agg")
import plot  # noqa: E402
from analysis import equal, logs, stats  # noqa: E402
from test_plot import SMALL, header, refused, step_lines, write  # noqa: E402

MHA_KV = 2 * SMALL["n_layer"] * SMALL["n_embd"] * 2
GQA = [2.80, 2.83, 2.81, 2.85]  # the 50% incumbent's final losses, seeds 0-3
MQA = [2.90, 2.88, 2.93, 2.91]  # the 25% incumbent's
# name: (attn, config, KV bytes a token as the header counts them, final losses)
ROWS = {
    "gqa": ("gqa", {}, MHA_KV // 2, GQA),
    "mha_kv": ("mha", {"k_eq_v": True}, MHA_KV // 2, [g - 0.05 + e for g, e in zip(GQA, [0, -2e-3, 1e-3, -1e-3])]),
    "mha_w128": ("mha", {"window": 128}, MHA_KV, [g + e for g, e in zip(GQA, [1e-3, -1e-3, 5e-4, -5e-4])]),
    "mla": ("mla", {"mla_kv_rank": 112}, MHA_KV // 2, [g + e for g, e in zip(GQA, [0.03, -0.02, 0.04, -0.03])]),
    "mqa": ("mqa", {}, MHA_KV // 4, MQA),
    "gqa_kv": ("gqa", {"k_eq_v": True}, MHA_KV // 4, [m + e for m, e in zip(MQA, [0.020, 0.021, 0.019, 0.020])]),
    "lrkv13": ("lrkv", {"lrkv_rank": 13}, int(MHA_KV * 0.7), [2.78, 2.80, 2.79, 2.81]),  # 70%: no family
    "mha": ("mha", {}, MHA_KV, [2.75, 2.77, 2.76, 2.78]),  # the full cache: drawn, in no family
}


@pytest.fixture
def e8(tmp_path):
    d = tmp_path / "e8"
    for name, (attn, cfg, kv, finals) in ROWS.items():
        for seed, last in enumerate(finals):
            h = header(attn, f"{name}_s{seed}", seed=seed, kv_bytes_per_token=kv)
            h["config"].update(cfg)
            write(d / h["run"], [h] + step_lines(attn, [4.0, 3.0, last]))
    return d


def test_families_pair_each_way_with_its_incumbent(e8):
    rows, fams, _ = equal.families(logs.load_runs([str(e8)]))
    assert [[r["name"] for r in f] for f in fams] == [
        ["GQA kv=2", "MLA d_c=112", "Standard MHA kv=4 window 128", "Standard MHA kv=4 K=V"],
        ["MQA kv=1", "GQA kv=2 K=V"]]  # incumbent first, then narrow, drop, share; LRKV r=13 and MHA in none
    half, quarter = fams
    assert [r["kind"] for r in half[1:]] == ["narrow", "drop", "share"]
    assert half[2]["share"] == pytest.approx(0.5) and half[2]["kv_pct"] == pytest.approx(1.0)  # 128 of 256
    kv = half[3]
    assert kv["diff"] == pytest.approx(np.mean([-0.05, -0.052, -0.049, -0.051])) and kv["pairs"] == 4
    assert [equal.word(r) for r in half[1:]] == ["inconclusive", "= equal", "ahead"]
    assert equal.word(quarter[1]) == "behind" and quarter[1]["p_holm"] == quarter[1]["p"]  # a family of one
    # Holm over the 50% family's three rows: not over both families' four, nor each row alone
    assert [r["p_holm"] for r in half[1:]] == pytest.approx(stats.holm([r["p"] for r in half[1:]]))
    assert half[3]["p_holm"] == pytest.approx(min(1, 3 * half[3]["p"]))  # the smallest p, times 3
    assert equal.answer(half) == "best at 50%: Standard MHA kv=4 K=V (-0.0505 nats) (Holm over 3 rows, 4 seeds)"
    assert equal.answer(quarter) == "at 25%: no way is better than MQA kv=1 (Holm over 1 row, 4 seeds)"
    assert equal.answer([half[0], half[2]]) == ("at 50%: no way is better than GQA kv=2; shown equal: "
                                                "Standard MHA kv=4 window 128 (Holm over 1 row, 4 seeds)")


def test_equal_cache_mode_writes_the_table_and_the_figure(e8, capsys):
    assert plot.main([str(e8), "--equal_cache"]) == 0
    assert {"figure_equal_cache.png", "equal_cache.md"} <= set(os.listdir(e8))
    md = (e8 / "equal_cache.md").read_text()
    row = next(l for l in md.splitlines() if "K=V" in l and "Standard MHA" in l)
    assert row.startswith("| 50% | share | Standard MHA kv=4 K=V | 50.0% |") and row.endswith("| ahead |")
    assert "- best at 50%: Standard MHA kv=4 K=V" in md
    rows, fams, _ = equal.families(logs.load_runs([str(e8)]))
    _, ax = equal.draw(rows, fams)
    marks = {t.get_text(): c.lines[0].get_marker() for t, c in zip(ax.texts, ax.containers)}
    assert marks["MHA kv=4 window 128"] == "s" and marks["GQA kv=2 K=V"] == "^"
    assert marks["MLA d_c=112"] == "o" and marks["MHA kv=4"] == "D"
    x = {t.get_text(): c.lines[0].get_xdata()[0] for t, c in zip(ax.texts, ax.containers)}
    half = sorted(x[k] for k in ("GQA kv=2", "MLA d_c=112", "MHA kv=4 window 128", "MHA kv=4 K=V"))
    # side by side about the family's bytes (a window's at T), each 7% of x from the next
    assert np.exp(np.mean(np.log(half))) == pytest.approx(MHA_KV // 2)
    assert np.diff(np.log(half)) == pytest.approx([np.log(1.07)] * 3)
    assert x["MHA kv=4"] == MHA_KV and ax.get_xscale() == "log"  # alone at its size: not moved


def test_a_setting_with_a_seed_twice_is_refused(e8, capsys):
    other = e8.parent / "again"
    h = header("gqa", "gqa_s0", seed=0, kv_bytes_per_token=MHA_KV // 2)
    write(other / "gqa_s0", [h] + step_lines("gqa", [4.0, 3.0, 2.9]))
    line, _ = refused([str(e8), str(other), "--equal_cache"], capsys)
    assert "a seed twice" in line


def test_old_logs_group_with_new_ones_and_only_gqa_kv2_or_mqa_leads(e8, capsys):
    # a log from before K=V and kv_share (no such keys) is the same setting as one that says False
    # and 1: the same seed in both is one seed twice, refused, not two incumbents
    h = header("gqa", "gqa_s0", seed=0, kv_bytes_per_token=MHA_KV // 2)
    h["config"].update(k_eq_v=False, kv_share=1)
    write(e8.parent / "new" / "gqa_s0", [h] + step_lines("gqa", [4.0, 3.0, 2.9]))
    assert "a seed twice" in refused([str(e8), str(e8.parent / "new"), "--equal_cache"], capsys)[0]
    # GQA with 1 K/V head is a narrow row of the 25% share, not a second incumbent
    for seed, last in enumerate([2.91, 2.90, 2.92, 2.93]):
        h = header("gqa", f"gqa1_s{seed}", seed=seed, kv_bytes_per_token=MHA_KV // 4)
        h["config"]["n_kv_head"] = 1
        write(e8 / h["run"], [h] + step_lines("gqa", [4.0, 3.0, last]))
    _, fams, _ = equal.families(logs.load_runs([str(e8)]))
    assert [r["name"] for r in fams[1]] == ["MQA kv=1", "GQA kv=1", "GQA kv=2 K=V"]


def test_readings_at_the_edges(e8, capsys):
    assert equal.word({"established": False, "tost": 0.0, "diff": 0.0}) == "= equal"  # se 0, inside
    assert equal.word({"established": False, "tost": None}) == "inconclusive"  # one pair: no test
    os.remove(e8 / "mla_s3" / "log.jsonl")  # a seed one row lacks is read in no row of any family
    rows, fams, _ = equal.families(logs.load_runs([str(e8)]))
    assert "seed(s) 3 not read: not run by every row" in capsys.readouterr().err
    assert {r["n"] for f in fams for r in f} == {3} and fams[1][1]["pairs"] == 3
    for s in range(3):  # and a row with no seed the others ran has nothing to pair
        os.remove(e8 / f"mla_s{s}" / "log.jsonl")
    h = header("mla", "mla_s9", seed=9, kv_bytes_per_token=MHA_KV // 2)
    h["config"]["mla_kv_rank"] = 112
    write(e8 / "mla_s9", [h] + step_lines("mla", [4.0, 3.0, 2.8]))
    assert "no seed that every row" in refused([str(e8), "--equal_cache"], capsys)[0]


def test_the_five_point_edge_the_parameters_and_the_notes(e8):
    # rows at 1.6 and 4.0 points from an incumbent's share join it; rows 5.5 points away join none
    # (a cut-off under 4 or over 5.5 points fails here); each row has its own parameter count
    near = {"lrkv7": ("lrkv", {"lrkv_rank": 7}, 992, 805_888), "lrkv6": ("lrkv", {"lrkv_rank": 6}, 912, 804_000),
            "mla40": ("mla", {"mla_kv_rank": 40}, 430, 806_912), "mla36": ("mla", {"mla_kv_rank": 36}, 399, 806_000)}
    for name, (attn, cfg, kv, params) in near.items():
        for seed, last in enumerate(GQA):
            h = header(attn, f"{name}_s{seed}", seed=seed, kv_bytes_per_token=kv, params=params)
            h["config"].update(cfg)
            write(e8 / h["run"], [h] + step_lines(attn, [4.0, 3.0, last]))
    rows, fams, _ = equal.families(logs.load_runs([str(e8)]))
    assert "LRKV r=7" in [r["name"] for r in fams[0]] and "MLA d_c=40" in [r["name"] for r in fams[1]]
    joined = {r["name"] for f in fams for r in f}
    assert not {"LRKV r=6", "MLA d_c=36"} & joined
    assert plot.main([str(e8), "--equal_cache"]) == 0
    md = (e8 / "equal_cache.md").read_text()
    row = next(l for l in md.splitlines() if "| LRKV r=7 |" in l)
    assert "| 48.4% | 805,888 | 4 |" in row  # the share at full context and the header's parameters
    _, ax = equal.draw(rows, fams)  # MLA d_c=40, 4 points from MQA's share, is drawn among its family
    x = {t.get_text(): c.lines[0].get_xdata()[0] for t, c in zip(ax.texts, ax.containers)}
    assert x["MLA d_c=40"] == pytest.approx(512 / 1.07)  # leftmost of its family's three, about 512
    alone = next(l for l in md.splitlines() if l.startswith("- drawn only (no incumbent within 5 points"))
    assert sorted(alone.split(": ")[1].split(", ")) == ["LRKV r=13", "LRKV r=6", "MLA d_c=36", "Standard MHA kv=4"]


def test_a_seed_not_read_is_named_in_the_notes_and_left_out_of_the_figure(e8):
    os.remove(e8 / "mla_s3" / "log.jsonl")
    assert plot.main([str(e8), "--equal_cache"]) == 0
    md = (e8 / "equal_cache.md").read_text()
    assert "seed(s) 3 not read, in any row or the figure" in md
    rows, _, cut = equal.families(logs.load_runs([str(e8)]))
    assert cut == [3] and {r["name"]: r["n"] for r in rows}["Standard MHA kv=4"] == 3  # drawn on seeds 0-2 too


def test_rows_a_little_apart_in_bytes_are_set_apart_in_the_figure(e8):
    # LRKV r=7's 992 bytes beside GQA's 1,024: 3% apart, their labels overlapped; one family, one x
    for seed, last in enumerate(GQA):
        h = header("lrkv", f"lrkv7_s{seed}", seed=seed, kv_bytes_per_token=992)
        h["config"]["lrkv_rank"] = 7
        write(e8 / h["run"], [h] + step_lines("lrkv", [4.0, 3.0, last]))
    rows, fams, _ = equal.families(logs.load_runs([str(e8)]))
    _, ax = equal.draw(rows, fams)
    x = {t.get_text(): c.lines[0].get_xdata()[0] for t, c in zip(ax.texts, ax.containers)}
    half = sorted(x[r["name"].replace("Standard ", "")] for r in fams[0])
    assert len(half) == 5 and np.diff(np.log(half)) == pytest.approx([np.log(1.07)] * 4)
    assert np.exp(np.mean(np.log(half))) == pytest.approx(1024)  # about the family's largest cache
    assert x["LRKV r=7"] == min(half)  # the smallest cache leftmost


def test_a_run_short_of_the_last_step_cuts_its_seed_and_one_point_draws(e8):
    # its log is there but it never reached the final eval: its seed is read in no row
    h = header("mla", "mla_s3", seed=3, kv_bytes_per_token=MHA_KV // 2)
    h["config"]["mla_kv_rank"] = 112
    write(e8 / "mla_s3", [h] + step_lines("mla", [4.0, 3.0]))
    rows, fams, cut = equal.families(logs.load_runs([str(e8)]))
    assert cut == [3] and {r["n"] for f in fams for r in f} == {3}
    one = dict(rows[0], sd=None, kv=700, kv_pct=rows[0]["share"])  # 700 bytes: no power of 2 near
    _, ax = equal.draw([one])  # a single point with no spread still gets both axes
    assert ax.get_ylim()[0] < ax.get_ylim()[1] and list(ax.get_xticks()) == [512, 1024]


def test_the_committed_e8_table_is_what_its_logs_give(tmp_path, monkeypatch):
    # docs/runs/e8/equal_cache.md and docs/results.md's E8 rows, re-made with the plan's command
    monkeypatch.chdir(os.path.join(os.path.dirname(__file__), ".."))
    e1 = [f"docs/runs/e1/cpu_{a}_s{s}" for a in ("mha", "mla", "lrkv") for s in range(12)]
    assert plot.main(["docs/runs/e8", *e1, "--equal_cache", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "equal_cache.md").read_text()
    assert md == open("docs/runs/e8/equal_cache.md").read()
    page = open("docs/results.md").read().split("## E8.")[1].split("\n## ")[0]
    made = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()
            if line.startswith(("| 50%", "| 25%"))]
    shown = [[c.strip().replace("−", "-") for c in line.strip("|").split("|")] for line in page.splitlines()
             if line.startswith(("| 50%", "| 25%"))]
    assert len(shown) == len(made) == 13
    for new, old in zip(made, shown):  # kind, cache, params, loss; then Δ, CI, Holm, finds, TOST, reads
        assert old[:2] + old[3:6] == new[:2] + [new[3], new[4], new[6]], (old, new)
        if new[1] != "incumbent":
            assert old[6:] == [new[8], new[9], new[11], new[13], new[14], new[15]], (old, new)

"""The verdict table: README's copy is what `plot.py --verdict` prints from the committed logs, and
its cells are the numbers of each experiment's own table."""
import json
import os
import re

import pytest

import plot
from analysis import verdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def table():
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return verdict.verdict()
    finally:
        os.chdir(cwd)


def rows(md):
    """{first cell: the other cells} of the Markdown table rows in md, the first row of each label."""
    out = {}
    for line in md.splitlines():
        if line.startswith("| ") and "---" not in line:
            cells = [x.strip() for x in line.strip("|").split("|")]
            out.setdefault(cells[0], cells[1:])
    return out


def test_readme_and_results_hold_the_verdict_the_logs_give(table):
    short, full, notes = table
    readme, results = (open(os.path.join(ROOT, p)).read() for p in ("README.md", "docs/results.md"))
    assert short in readme, "README's verdict is not `python plot.py --verdict`'s: paste it again"
    assert full in results and notes in results, "docs/results.md's full verdict is not --verdict's: paste it again"
    assert_fits_a_glance(short)


def assert_fits_a_glance(short):
    # a row read at a glance: at most 80 characters; the heads, in plain words, at most 100
    head, _, *body = short.split("\n\n")[0].splitlines()
    assert len(head) <= 100 and max(map(len, body)) <= 80, [line for line in body if len(line) > 80]


def test_the_key_names_every_code_the_heads_leave_out(table):
    short = table[0]
    heads = rows(short)["design"]
    assert not re.search(r"\bE\d", " ".join(heads)), heads  # plain words: a code means nothing to a newcomer
    key = next(line for line in short.splitlines() if line.startswith("Key: "))
    recall = verdict.LEARNING if verdict.learning(os.path.join(ROOT, "docs", "runs")) else verdict.LOOKUP
    codes = [e for e, *_ in verdict.GLANCE] + [recall[0]] + ["E5"]  # E5: the row against GQA
    assert [c for c in codes if not re.search(rf"\b{c}\b", key)] == [], key
    assert len(heads) == len(codes), "a column was added: give its code to the key"
    assert "inconclusive" in short and "not shown" not in short  # an undecided cell reads as one


def test_the_summary_of_results_fits_one_screen():
    # docs/results.md's first section, what the CPU evidence says: at most 350 words
    page = open(os.path.join(ROOT, "docs", "results.md")).read()
    summary = page.split("\n## ")[1].split("\n", 1)[1]
    words = len(re.sub(r"\]\([^)]*\)", "]", summary).split())  # a link's address is no word
    assert 100 < words <= 350, words


def test_e6s_numbers_in_its_prose_are_its_logs_and_its_geometry():
    # the sentences of results.md's E6 section whose numbers no table prints, recomputed
    import glob
    import json
    import subprocess
    import sys
    solved, plateau, window = [], [], []  # the runs that learned the lookup, the others, the window's
    for path in glob.glob(os.path.join(ROOT, "docs", "runs", "e6", "*", "log.jsonl")):
        score = [json.loads(line) for line in open(path) if '"score"' in line][-1]
        (solved if score["test_acc_p32"] >= 0.99 else plateau).append(score)
        if "_w32_" in path:
            window.append(score["test_acc_p4"])
    assert (len(solved), len(plateau)) == (47, 49)
    page = open(os.path.join(ROOT, "docs", "results.md")).read().split("## Recall: E6")[1].split("\n## ")[0]
    # and the rest of its reading, in archive.md's E6 in detail
    page += open(os.path.join(ROOT, "docs", "archive.md")).read().split("### E6 in detail")[1].split("\n### ")[0]
    page = " ".join(page.split())
    low = [s["test_acc_p4"] for s in plateau]
    assert f"at 4 pairs the others stay at {min(low):.2f}–{max(low):.2f}" in page
    assert f"scored at least {min(s['test_acc_p32'] for s in solved):.4f} at 32 pairs" in page
    # the window's reach: the share of answers inside it, from the command the page gives
    out = subprocess.run([sys.executable, "docs/runs/e6/inside.py"], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                         capture_output=True, text=True, check=True).stdout
    share = {int(line.split()[0]): line.split()[2] for line in out.splitlines()}
    at4 = sum(window) / len(window)  # the window at 4 pairs, the mean over its 16 seeds
    assert max(window) < 0.99 and f"(0 of 16; test accuracy {at4:.3f}, about a guess), where {share[4]} of" in page
    assert f"at 32 pairs {share[32]} do" in page


def test_the_glance_says_what_the_full_table_says(table):
    # each glance cell is its full cell's mark, with the estimate where a gap is established
    short, full = rows(table[0]), rows(table[1])
    window = [label for label in short if "window" in label]  # E6's control, once E6 is read
    same = [label for label in short if "against GQA" in label]  # E5, once its logs exist
    e8 = [label for label in short if label.startswith("best way to")]  # E8, once it has ended
    designs = [d.label for d in verdict.DESIGNS.values()]
    assert list(short) == ["design"] + designs + window + same + e8 and len(same) == 1  # MHA: the reference
    word = lambda f: {"equivalent": "= equal", "inconclusive": "inconclusive"}.get(f.split(" ", 3)[-1])
    for label in designs[1:]:
        for g, f in zip(short[label][1:4], (full[label][1], full[label][3], full[label][4])):
            diff, mark = f.split()[0], f.split()[-1]
            assert g == word(f) if mark != "established" else g.startswith(f"{float(diff):+.3f} "), (label, g, f)
    # the E5 row: its cell in the loss column is the full page's E5 sentence, in a word
    e5 = table[1].split("At the same cache (E5): ")[1].split(" (TOST")[0].replace("\n", " ").split(": ")[-1]
    assert short[same[0]][1] == word(e5) and short[same[0]][2:] == ["-"] * 3, (short[same[0]], e5)


def test_verdict_cells_are_the_experiments_own_numbers(table):
    got = rows(table[1])
    for exp, col in (("e1", 1), ("e3b", 3)):  # the committed results.md of each: Δ MHA and its interval
        committed = rows(open(os.path.join(ROOT, "docs", "runs", exp, "results.md")).read())
        for label in ("LRKV", "MLA", "GQA", "MQA"):
            delta, ci, holm, established = committed[label][4], committed[label][5], committed[label][7], \
                committed[label][8]
            assert got[label][col].startswith(f"{delta} {ci.replace('−', '-')} "), (exp, label)
            assert got[label][col].endswith("established") == (established == "yes")
    e2 = open(os.path.join(ROOT, "docs", "runs", "e2", "results.md")).read().split("Against ")[1]
    for label in ("LRKV", "MLA", "GQA", "MQA"):  # the interaction, its interval
        inter = rows(e2)[label]
        assert got[label][4].startswith(f"{inter[3]} {inter[4]} "), label


def test_a_changed_log_changes_the_verdict(tmp_path):
    # the table is computed, not copied: shift one E1 LRKV run's final test loss and its cell moves
    import shutil
    root = tmp_path / "runs"
    for exp in ("e1", "e2", "e3a", "e3b"):
        shutil.copytree(os.path.join(ROOT, "docs", "runs", exp), root / exp)
    log = root / "e1" / "cpu_lrkv_s0" / "log.jsonl"
    text = log.read_text()
    score = re.findall(r'"type": "score".*', text)[-1]
    shifted = re.sub(r'"test_loss": ([0-9.]+)', lambda m: f'"test_loss": {float(m.group(1)) + 0.12}', score)
    log.write_text(text.replace(score, shifted))
    before, after = rows(verdict.verdict(os.path.join(ROOT, "docs", "runs"))[1]), rows(verdict.verdict(str(root))[1])
    assert before["LRKV"][1] != after["LRKV"][1] and before["MLA"][1] == after["MLA"][1]
    assert float(after["LRKV"][1].split()[0]) == pytest.approx(float(before["LRKV"][1].split()[0]) + 0.01, abs=1e-4)


def test_a_design_without_runs_gets_a_row_not_a_keyerror(monkeypatch):
    # a sixth design, added before any experiment ran it: its row says so in every column
    monkeypatch.setitem(verdict.DESIGNS, "toy", verdict.DESIGNS["mha"]._replace(label="Toy"))
    monkeypatch.chdir(ROOT)
    short, full, _ = verdict.verdict()
    assert rows(short)["Toy"][:4] == ["-", "no runs", "no runs", "no runs"]
    assert rows(full)["Toy"] == ["-"] * len(rows(full)["design"])  # every column, E6's too


def test_e5_on_the_page_is_what_its_logs_give(tmp_path):
    # docs/results.md's E5 row and docs/runs/e5/pareto.md, re-made from the logs
    assert plot.main([os.path.join(ROOT, "docs", "runs", "e5"), "--pareto", "--out", str(tmp_path)]) == 0
    made = (tmp_path / "pareto.md").read_text()
    assert made == open(os.path.join(ROOT, "docs", "runs", "e5", "pareto.md")).read()
    row = next(line for line in made.splitlines() if line.startswith("| LRKV r=7 - GQA kv=2 |"))
    page = open(os.path.join(ROOT, "docs", "results.md")).read().split("## E5.")[1].split("\n## ")[0]
    assert row in page


def test_the_readme_answers_in_a_few_words_under_the_figure():
    # the answer within ten seconds: at most ~60 words between the figure and the table, ~120 below
    top = open(os.path.join(ROOT, "README.md")).read().split("(docs/cpu_figure.png)\n")[1].split("\n## ")[0]
    before, table_and_after = top.split("\n| design |")
    after = table_and_after[table_and_after.rindex("|\n") + 2:]
    words = lambda s: len(re.sub(r"\]\([^)]*\)", "]", s).split())  # a link's address is no word
    assert words(before) <= 60 and words(after) <= 120, (words(before), words(after))


def e6_runs(tmp_path, solved, seeds=16):
    """A copy of the committed experiments, and a synthetic E6: each design and the window of 32 with
    `seeds` runs at 8 and 16 pairs, solved[key] of them solving 16 (all solve 8), and 12 validity runs
    of MHA solving both, so 16 pairs is the primary cell."""
    import shutil
    from test_recall_analysis import mix_log
    root = tmp_path / "runs"
    for exp in ("e1", "e2", "e3a", "e3b"):
        shutil.copytree(os.path.join(ROOT, "docs", "runs", exp), root / exp)
    for key, k in solved.items():
        attn, window = key if isinstance(key, tuple) else (key, 0)
        for s in range(seeds):
            final = {8: 1.0, 16: 1.0 if s < k else 0.2}
            mix_log(root / "e6" / f"{attn}_w{window}_s{s}", attn, s, final, {8: 100, 16: 100 if s < k else None},
                    window)
    for s in range(200, 212):
        mix_log(root / "e6b" / f"mha_s{s}", "mha", s, {8: 1.0, 16: 1.0}, {8: 100, 16: 100})
    return root


def test_the_recall_column_is_e6s_primary_family_once_every_run_is_in(tmp_path):
    import scipy.stats
    from analysis.stats import holm
    from test_recall_analysis import mix_log
    solved = {"mha": 16, "lrkv": 15, "mla": 3, "gqa": 16, "mqa": 9, ("mha", 32): 0}
    root = e6_runs(tmp_path, solved)
    for s in range(5):  # a second window, the plan's if budget allows, part-way: the primary is read
        mix_log(root / "e6" / f"mha_w64_s{s}", "mha", s, {8: 1.0, 16: 0.2}, {8: 100, 16: None}, 64)
    short, full, notes = verdict.verdict(str(root))
    # Fisher's exact test of each row's 16 against MHA's 16, Holm over the five (scipy's, not ours)
    tested = [k for k in solved if k != "mha"]
    p = [scipy.stats.fisher_exact([[solved[k], 16 - solved[k]], [16, 0]]).pvalue for k in tested]
    # the glance names the window by what it is, the full table by its settings
    short_label = lambda k: "MHA, sliding window 32 (control)" if isinstance(k, tuple) else verdict.DESIGNS[k].label
    full_label = lambda k: "Standard MHA, window 32" if isinstance(k, tuple) else verdict.DESIGNS[k].label
    glance, table = rows(short), rows(full)
    assert glance["design"][-1] == "learned the lookup" and glance["Standard MHA"][-1] == "16/16"
    for k, p_holm in zip(tested, holm(p)):
        mark = "behind" if p_holm < 0.05 else "inconclusive"
        assert glance[short_label(k)][-1] == f"{solved[k]}/16 {mark}", k
        assert table[full_label(k)][-1] == (f"{solved[k]}/16, {(solved[k] - 16) / 16:+.2f} (Holm p {p_holm:.2g}) "
                                            + ("established" if p_holm < 0.05 else "inconclusive")), k
    # the control row; a window's cache is a share of MHA's at the runs' length (128 in mix_log)
    assert glance["MHA, sliding window 32 (control)"][:5] == ["25% at 128", "-", "-", "-", "0/16 behind"]
    assert "16 pairs" in short.replace("\n", " ") and "it is (the probe passed)" in notes.replace("\n", " ")
    assert "after 200 steps on 128-token sequences" in short.replace("\n", " ")  # mix_log's max_iters
    assert_fits_a_glance(short)


def test_the_recall_column_waits_for_every_run_and_for_the_window_to_fall_behind(tmp_path):
    # one design a run short: E6 is not read, the column keeps saying so
    root = e6_runs(tmp_path, {"mha": 16, "lrkv": 15, "mla": 3, "gqa": 16, "mqa": 9, ("mha", 32): 0})
    import shutil
    shutil.rmtree(root / "e6" / "mla_w0_s15")
    assert {c[-1] for c in list(rows(verdict.verdict(str(root))[0]).values())[1:]} == {verdict.RECALL}
    # every run in, but the window solves as MHA does: the probe failed its check, no design is read
    root = e6_runs(tmp_path / "b", {"mha": 16, "lrkv": 15, "mla": 3, "gqa": 16, "mqa": 9, ("mha", 32): 15})
    short, full, notes = verdict.verdict(str(root))
    assert {c[-1] for c in list(rows(short).values())[1:]} == {"probe failed"}
    assert rows(full)["MLA"][-1].endswith(") probe failed") and rows(full)["Standard MHA"][-1] == "16/16 reference"
    assert "the probe failed its check" in notes.replace("\n", " ")


# E8's rows cloned from E5's GQA logs (one experiment, as the plan's runs are): name: (attn, flags,
# KV bytes a token as the header counts them, shift of the final test loss from GQA's same seed)
E8_ROWS = {"mha_kv": ("mha", {"k_eq_v": True}, 1024, -0.02), "mha_share2": ("mha", {"kv_share": 2}, 1024, 0.0),
           "mla_dc112": ("mla", {"mla_kv_rank": 112}, 1024, 0.03), "mha_w128": ("mha", {"window": 128}, 2048, 0.01),
           "mqa": ("mqa", {}, 512, 0.01), "gqa_kv": ("gqa", {"k_eq_v": True}, 512, 0.02),
           "gqa_share2": ("gqa", {"kv_share": 2}, 512, 0.015), "mha_kv_share2": ("mha", {"k_eq_v": True, "kv_share": 2}, 512, 0.01),
           "mla_dc48": ("mla", {"mla_kv_rank": 48}, 512, 0.04), "lrkv7_share2": ("lrkv", {"lrkv_rank": 7, "kv_share": 2}, 496, 0.012),
           "mha_w64": ("mha", {"window": 64}, 2048, 0.03)}


def e8_runs(tmp_path):
    import shutil
    root = tmp_path / "runs"
    for exp in ("e1", "e2", "e3a", "e3b", "e5"):
        shutil.copytree(os.path.join(ROOT, "docs", "runs", exp), root / exp)
    for name, (attn, flags, kv, shift) in E8_ROWS.items():
        for s in range(12):
            lines = [json.loads(l) for l in open(root / "e5" / f"cpu_gqa_s{s}" / "log.jsonl")]
            for rec in lines:
                if rec["type"] == "header":
                    rec.update(attn=attn, kv_bytes_per_token=kv, run=f"{name}_s{s}")
                    rec["config"].update(attn=attn, **flags)
                if rec["type"] == "score":  # each seed a little apart, so the paired Δ has a spread
                    rec["test_loss"] += shift + 0.001 * (s % 3 - 1)
            os.makedirs(root / "e8" / f"{name}_s{s}")
            with open(root / "e8" / f"{name}_s{s}" / "log.jsonl", "w") as f:
                f.write("".join(json.dumps(rec) + "\n" for rec in lines))
    return root


def test_e8s_rows_give_the_best_way_to_halve_and_quarter_once_every_run_is_in(tmp_path):
    root = e8_runs(tmp_path)
    short, full, notes = verdict.verdict(str(root))
    glance = rows(short)
    assert glance["best way to halve the cache"] == ["50%", "MHA kv=4 K=V -0.020 ahead", "-", "-", "-"]
    # MQA is GQA + 0.01 and every 25% row as far behind or further: none is ahead, one is equal
    assert glance["best way to quarter the cache"] == ["25%", "none ahead of MQA; 1 equal", "-", "-", "-"]
    # which row is equal: the full reading names it, wrapped anywhere
    assert re.search(r"MHA\skv=4\sK=V\sshare\s2\s[+-]0\.0000\s\[[^]]+\]\sequivalent", full)
    assert "the best-way rows are E8, at 12 seeds." in short and "Every way to cut the cache (E8)" in full
    assert re.search(r"incumbent, 12\sseeds, Holm", full)  # the n its intervals stand on
    assert "LRKV r=7 " in full.split("Every way")[1]  # E5's runs stand in for E8's LRKV r=7 and GQA
    assert_fits_a_glance(short)
    os.remove(root / "e8" / "mla_dc48_s11" / "log.jsonl")  # a run short: E8 is not read early
    short, _, unread = verdict.verdict(str(root))
    assert "best way to halve the cache" not in rows(short)
    # E8's 11 tests join the note's one family of every test, once E8 is read
    counted = lambda n: int(re.search(r"all (\d+)\stests", n).group(1))
    assert counted(notes) == counted(unread) + 11
    (root / "e8" / "ENDED").write_text("seeds 0-10 whole\n")  # unless the budget ended it there
    short, full, _ = verdict.verdict(str(root))
    assert "best way to halve the cache" in rows(short) and re.search(r"incumbent, 11\sseeds", full)
    fams = verdict.equal_caches(str(root))  # every row at the 11 whole seeds, E5's GQA and LRKV too
    assert {r["n"] for f in fams for r in f} == {11} and "LRKV r=7" in [r["name"] for r in fams[0]]


@pytest.mark.parametrize("redo", ["gqa", "lrkv", "gqa lrkv"])
def test_e8_reads_e5s_rows_each_unless_e8_ran_it_again(tmp_path, redo):
    # the plan's REDO of E5's rows: E8's runs of a row replace E5's, E5's other row still counts.
    # E8's runs of a row are E5's shifted (GQA +0.05, LRKV +0.03), so the Δs show which were read
    root = e8_runs(tmp_path)
    shift = {"gqa": 0.05, "lrkv": 0.03}
    for attn in redo.split():
        for s in range(12):
            lines = [json.loads(l) for l in open(root / "e5" / f"cpu_{attn}_s{s}" / "log.jsonl")]
            for rec in lines:
                if rec["type"] == "score":
                    rec["test_loss"] += shift[attn]
            os.makedirs(root / "e8" / f"{attn}_s{s}")
            with open(root / "e8" / f"{attn}_s{s}" / "log.jsonl", "w") as f:
                f.write("".join(json.dumps(rec) + "\n" for rec in lines))
    gqa, lrkv = [shift[a] * (a in redo) for a in ("gqa", "lrkv")]
    short, full, _ = verdict.verdict(str(root))
    assert rows(short)["best way to halve the cache"][1] == f"MHA kv=4 K=V {-0.02 - gqa:+.3f} ahead"
    assert f"LRKV r=7 {0.0032 + lrkv - gqa:+.4f}" in full.split("Every way")[1]  # one LRKV r=7 row
    # the 25% family's Δs, against E8's MQA, do not move
    assert rows(short)["best way to quarter the cache"][1] == "none ahead of MQA; 1 equal"


def test_e8_with_a_planned_row_missing_is_not_read_and_says_why(tmp_path, capsys):
    root = e8_runs(tmp_path)
    import shutil
    for s in range(12):  # the window of 64 not run: the 25% family's Holm would be over 5, not 6
        shutil.rmtree(root / "e8" / f"mha_w64_s{s}")
    (root / "e8" / "ENDED").write_text("seeds 0-11 whole\n")
    assert "best way to quarter the cache" not in rows(verdict.verdict(str(root))[0])
    assert "E8 not read: its families have [6, 6] rows, the plan [6, 7]" in capsys.readouterr().err


def e7_log(path, attn, seed, stop, window=0, kv=1024, rising=False, cap=12000):
    """A synthetic E7 part A run: stopped solved at `stop`, or censored at the cap, its curve flat
    on the plateau or still rising there."""
    cfg = dict(dataset="mqar", n_layer=2, n_head=4, n_embd=64, block_size=128, vocab_size=320,
               mqar_pairs=[4, 8, 16, 32], mqar_alpha=0.01, mqar_examples=1024, matrix_lr=0.005,
               seed=seed, max_iters=cap, window=window, stop_acc=0.99, schedule="constant")
    end = stop or cap
    acc = lambda s: 1.0 if stop and s == end else 0.1 + (0.5 * s / cap if rising else 0)  # noqa: E731
    lines = [dict(type="header", run=os.path.basename(path), attn=attn, config=cfg,
                  kv_bytes_per_token=kv, mha_kv_bytes_per_token=1024)]
    lines += [dict(type="step", step=s, tokens=s, flops=0, test_loss=1.0, test_acc=acc(s))
              for s in range(0, end + 1, 500)]
    lines.insert(-1, dict(type="score", step=end, test_loss=0.0, test_acc=acc(end),
                          **({"stopped": True} if stop else {})))
    os.makedirs(path)
    with open(os.path.join(path, "log.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in lines))


def test_e7s_column_takes_e6s_place_once_every_run_is_in(tmp_path):
    import shutil
    root = tmp_path / "runs"
    for exp in ("e1", "e2", "e3a", "e3b", "e5", "e6", "e6b"):
        shutil.copytree(os.path.join(ROOT, "docs", "runs", exp), root / exp)
    arms = {  # (attn, window): (KV bytes, times to solve in thousands of steps, None: censored; rising)
        ("mha", 0): (1024, [1, 1, 1, 1, 1.5, 1.5, 1.5, 1.5, 2, 2, 2, 2, 2.5, 2.5, 3, 3], False),
        ("gqa", 0): (512, [4, 4, 4, 5, 5, 5, 6, 6, 6, 7, 7, 7, 8, 8, 9, 9], False),  # all, later
        ("mqa", 0): (256, [1, 1, 1, 1.5, 1.5, 1.5, 2, 2, 2, 2.5, 2.5, 2.5, 3, 3, 3.5, None], False),
        ("mla", 0): (192, [2, 3, 4, 5] + [None] * 12, False),  # fewer, on the plateau
        ("lrkv", 0): (672, [2, 3, 4, 5, 6, 7] + [None] * 10, True),  # fewer, still rising
        ("mha", 32): (1024, [None] * 16, False)}
    for (attn, w), (kv, times, rising) in arms.items():
        for s, t in enumerate(times):
            e7_log(root / "e7" / "a" / f"{attn}_w{w}_s{s}", attn, 1000 + s, t and int(1000 * t),
                   window=w, kv=kv, rising=rising)
    short, full, notes = verdict.verdict(str(root))
    glance = rows(short)
    assert glance["design"][-1] == "less or only later" and "E7: runs that learned" in notes
    assert [glance[d][-1] for d in ("Standard MHA", "GQA", "MQA", "MLA", "LRKV")] == [
        "reference, 16/16", "later, 16/16", "as often, 15/16", "can't tell, 4/16", "past the cap, 6/16"]
    assert glance["MHA, sliding window 32"] == ["25% at 128", "-", "-", "-", "can't tell, 0/16"]
    assert "(control)" not in short and "E7 by column" in short and "E6" not in short.split("Key:")[1]
    assert_fits_a_glance(short)
    e7 = rows(full)  # in full: runs solved, the median step, log-rank's Holm p, the reading
    assert e7["GQA"][-1].startswith("16/16, median 6,000, Holm p ") and e7["GQA"][-1].endswith(", later")
    assert e7["Standard MHA"][-1] == "16/16, median 1,500, reference"
    assert e7["Standard MHA, window 32"][-1].startswith("0/16, median not reached, Holm p ")
    os.remove(root / "e7" / "a" / "lrkv_w0_s15" / "log.jsonl")  # a run short: E7 is not read early
    glance = rows(verdict.verdict(str(root))[0])
    assert glance["design"][-1] == "learned the lookup" and "MHA, sliding window 32 (control)" in glance

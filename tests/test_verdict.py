"""The verdict table: README's copy is what `plot.py --verdict` prints from the committed logs, and
its cells are the numbers of each experiment's own table."""
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


def test_readme_holds_the_verdict_the_logs_give(table):
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert table[0] in readme, "README's verdict table is not `python plot.py --verdict`'s: paste it again"
    assert table[1] in readme


def test_verdict_cells_are_the_experiments_own_numbers(table):
    got = rows(table[0])
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
    before, after = rows(verdict.verdict(os.path.join(ROOT, "docs", "runs"))[0]), rows(verdict.verdict(str(root))[0])
    assert before["LRKV"][1] != after["LRKV"][1] and before["MLA"][1] == after["MLA"][1]
    assert float(after["LRKV"][1].split()[0]) == pytest.approx(float(before["LRKV"][1].split()[0]) + 0.01, abs=1e-4)


def test_e5_on_the_page_is_what_its_logs_give(tmp_path):
    # docs/results.md's E5 row and docs/runs/e5/pareto.md, re-made from the logs
    assert plot.main([os.path.join(ROOT, "docs", "runs", "e5"), "--pareto", "--out", str(tmp_path)]) == 0
    made = (tmp_path / "pareto.md").read_text()
    assert made == open(os.path.join(ROOT, "docs", "runs", "e5", "pareto.md")).read()
    row = next(line for line in made.splitlines() if line.startswith("| LRKV r=7 - GQA kv=2 |"))
    page = open(os.path.join(ROOT, "docs", "results.md")).read().split("## E5.")[1].split("\n## ")[0]
    assert row in page


def test_recall_column_waits_for_the_whole_grid_then_averages_its_cells(tmp_path):
    from test_recall import mqar_log
    # one cell, 3 seeds: MHA solves; MQA 0.6, 0.589, 0.578 behind (established), the rest equal MHA
    for s in range(3):
        for attn in verdict.DESIGNS:
            acc = 0.4 + 0.01 * s if attn == "mqa" else 1.0 - 0.001 * s
            mqar_log(tmp_path / f"{attn}_s{s}", attn, 32, 8, 0.02, s, [0.0, acc], 0.9, 64)
    e4 = verdict.recall_column(str(tmp_path))
    assert e4["mqa"] == "-0.589 mean over 1 cells; behind in 1, ahead in 0 (established)"
    assert e4["gqa"] == "+0.000 mean over 1 cells; behind in 0, ahead in 0 (established)"
    (tmp_path / "gqa_s2" / "log.jsonl").unlink()  # a seed still running: no half table
    os.rmdir(tmp_path / "gqa_s2")
    assert verdict.recall_column(str(tmp_path)) == {}
    assert verdict.recall_column(str(tmp_path / "none")) == {}

"""docs/runs/e8/runs.sh lists the plan's runs (docs/plan.md, E8) seed by seed, so that the budget's
end leaves whole seeds of every row; REDO adds E5's rows; an unknown stage is one line."""
import os
import subprocess

ROWS = ["mqa", "mha_kv", "mha_share2", "mla_dc112", "mha_w128", "gqa_kv", "gqa_share2", "mha_kv_share2",
        "mla_dc48", "lrkv7_share2", "mha_w64"]  # a seed's runs, in order, unless REDO
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def listed(stage, **env):
    p = subprocess.run(["bash", "docs/runs/e8/runs.sh", stage], cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "DRY": "1", **env}, timeout=60)
    return p, [line.split() for line in p.stdout.splitlines()]


def test_every_row_seed_by_seed():
    ended = os.path.join(ROOT, "docs", "runs", "e8", "ENDED")
    before = open(ended).read() if os.path.exists(ended) else None  # E8's own, once its budget ended
    _, runs = listed("runs")
    assert len(runs) == 11 * 12 and len({r[1] for r in runs}) == len(runs)
    seeds = [int(r[-1].split("=")[1]) for r in runs]
    assert seeds == sorted(seeds) and set(seeds) == set(range(12))  # a whole seed before the next
    first = {r[1].rsplit("_s", 1)[0]: r[2:-1] for r in runs[:11]}
    assert first["mqa"] == ["--attn=mqa"] and "gqa" not in first and "lrkv7" not in first
    assert first["mha_kv_share2"] == ["--attn=mha", "--k_eq_v=True", "--kv_share=2"]
    assert first["mha_w64"] == ["--attn=mha", "--window=64"]
    assert (open(ended).read() if os.path.exists(ended) else None) == before  # a listing ends nothing


def test_a_failed_check_runs_e5s_rows_again_in_every_seed():
    _, runs = listed("runs", REDO="gqa lrkv7")
    assert len(runs) == 13 * 12
    assert [r[1] for r in runs[:2]] == ["gqa_s0", "mqa_s0"]
    assert ["--attn=lrkv", "--lrkv_rank=7", "--seed=11"] in [r[2:] for r in runs[-13:]]


def test_an_unknown_stage_is_one_line():
    p, _ = listed("half")
    assert p.returncode == 2 and p.stderr.startswith("error: stage half") and p.stderr.count("\n") == 1


FAKE = """#!/usr/bin/env bash
# for train.py: note the run, and write a finished log (or fail, for the run named in FAIL)
name=$(printf '%s\\n' "$@" | sed -n 's/^--run_name=//p'); out=$(printf '%s\\n' "$@" | sed -n 's/^--out_dir=//p')
echo "$name" >> trained.txt; [ "$name" = "${{FAIL:-}}" ] && exit 1; mkdir -p "$out/$name"
printf '%s\\n' '{{"type": "header"}}' '{{"type": "score"}}' > "$out/$name/log.jsonl"
"""


def budget(tmp_path, whole, hours, **env):
    # DONE holds seeds 0 to whole-1 of every row, and the minutes they took; then `runs`
    done = tmp_path / "done"
    _, rows = listed("runs")
    for _, name, *_ in rows[:11 * whole]:
        (done / "e8" / name).mkdir(parents=True)
        (done / "e8" / name / "log.jsonl").write_text('{"type": "score"}\n')
    (done / "e8").mkdir(parents=True, exist_ok=True)
    (done / "e8" / "minutes").write_text("T\n" * round(60 * whole * hours))
    fake = tmp_path / "py"
    fake.write_text(FAKE.format())
    fake.chmod(0o755)
    p = subprocess.run(["bash", os.path.join(ROOT, "docs/runs/e8/runs.sh"), "runs"], cwd=tmp_path,
                       env={**os.environ, "DONE": str(done), "PY": str(fake), **env},
                       capture_output=True, text=True, timeout=120)
    trained = (tmp_path / "trained.txt").read_text().split() if (tmp_path / "trained.txt").exists() else []
    ended = done / "e8" / "ENDED"
    return p, trained, ended.read_text() if ended.exists() else None


def test_a_seed_that_would_pass_the_budget_is_not_started(tmp_path):
    p, trained, ended = budget(tmp_path, 2, 1.8)  # two seeds of 1.8 hours: a third passes 5
    assert p.returncode == 0, p.stderr
    assert trained == []
    assert ended == "seeds 0-1 whole in 3.60 machine hours; seed 2 would pass 5\n"
    assert "out" not in os.listdir(tmp_path)  # nothing begun


def test_seeds_go_on_while_they_fit_and_each_log_is_copied(tmp_path):
    p, trained, ended = budget(tmp_path, 1, 0.1)
    assert p.returncode == 0, p.stderr
    _, rows = listed("runs")
    assert sorted(trained) == sorted(r[1] for r in rows[11:]) and len(trained) == 121
    assert [int(t.rsplit("_s", 1)[1]) for t in trained[::11]] == list(range(1, 12))  # seed by seed
    assert (tmp_path / "done" / "e8" / "mha_w64_s11" / "log.jsonl").exists()
    assert ended == "every seed whole in 0.10 machine hours\n"


def test_a_seed_begun_before_a_kill_is_finished_past_the_budget(tmp_path):
    (tmp_path / "out" / "e8" / "mqa_s2").mkdir(parents=True)  # seed 2 had begun when it was killed
    p, trained, ended = budget(tmp_path, 2, 1.95)  # 3.9 hours: neither seed 2 nor 3 would fit
    assert p.returncode == 0 and sorted(trained) == sorted(f"{r}_s2" for r in ROWS)
    assert ended == "seeds 0-2 whole in 3.90 machine hours; seed 3 would pass 5\n"


def test_a_failed_run_stops_before_the_next_seed_and_ends_nothing(tmp_path):
    p, trained, ended = budget(tmp_path, 1, 0.1, FAIL="mla_dc48_s1")
    assert p.returncode == 1 and p.stderr == ("error: seed 1 is not whole: mla_dc48_s1; see "
                                              "out/e8.err, then run again\n")
    assert sorted(trained) == sorted(f"{r}_s1" for r in ROWS) and ended is None
    assert "mla_dc48_s1 failed" in (tmp_path / "out" / "e8.err").read_text()

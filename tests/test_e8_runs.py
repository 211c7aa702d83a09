"""docs/runs/e8/runs.sh lists the plan's runs (docs/plan.md, E8) seed by seed, so that the budget's
end leaves whole seeds of every row; REDO adds E5's rows; an unknown stage is one line."""
import json
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
    _, runs = listed("runs")
    assert len(runs) == 11 * 12 and len({r[1] for r in runs}) == len(runs)
    seeds = [int(r[-1].split("=")[1]) for r in runs]
    assert seeds == sorted(seeds) and set(seeds) == set(range(12))  # a whole seed before the next
    first = {r[1].rsplit("_s", 1)[0]: r[2:-1] for r in runs[:11]}
    assert first["mqa"] == ["--attn=mqa"] and "gqa" not in first and "lrkv7" not in first
    assert first["mha_kv_share2"] == ["--attn=mha", "--k_eq_v=True", "--kv_share=2"]
    assert first["mha_w64"] == ["--attn=mha", "--window=64"]
    assert not os.path.exists(os.path.join(ROOT, "docs", "runs", "e8", "ENDED"))  # a listing ends nothing


def test_a_failed_check_runs_e5s_rows_again_in_every_seed():
    _, runs = listed("runs", REDO="gqa lrkv7")
    assert len(runs) == 13 * 12
    assert [r[1] for r in runs[:2]] == ["gqa_s0", "mqa_s0"]
    assert ["--attn=lrkv", "--lrkv_rank=7", "--seed=11"] in [r[2:] for r in runs[-13:]]


def test_an_unknown_stage_is_one_line():
    p, _ = listed("half")
    assert p.returncode == 2 and p.stderr.startswith("error: stage half") and p.stderr.count("\n") == 1


FAKE = """#!/usr/bin/env bash
# python for runs.sh's own -c; for train.py: note the run, and write a finished log
[ "$1" = -c ] && exec {python} "$@"
name=$(printf '%s\\n' "$@" | sed -n 's/^--run_name=//p'); out=$(printf '%s\\n' "$@" | sed -n 's/^--out_dir=//p')
echo "$name" >> trained.txt; mkdir -p "$out/$name"
printf '%s\\n' '{log}' > "$out/$name/log.jsonl"
"""


def finished(dt):
    # a header, one step standing for 10 (dt seconds each), and a score line
    recs = [{"type": "header", "config": {"log_interval": 10}}, {"type": "step", "step": 10, "dt": dt},
            {"type": "score", "step": 10}]
    return "\n".join(json.dumps(r) for r in recs)


def budget(tmp_path, whole, dt, new_dt=1.0):
    # DONE holds seeds 0 to whole-1, every row, each log 10 steps of dt seconds; then `runs`, whose
    # train.py writes logs of new_dt
    import sys
    done = tmp_path / "done"
    _, rows = listed("runs")
    for _, name, *_ in rows[:11 * whole]:
        (done / "e8" / name).mkdir(parents=True)
        (done / "e8" / name / "log.jsonl").write_text(finished(dt) + "\n")
    fake = tmp_path / "py"
    fake.write_text(FAKE.format(python=sys.executable, log=finished(new_dt)))
    fake.chmod(0o755)
    p = subprocess.run(["bash", os.path.join(ROOT, "docs/runs/e8/runs.sh"), "runs"], cwd=tmp_path,
                       env={**os.environ, "DONE": str(done), "PY": str(fake)}, capture_output=True,
                       text=True, timeout=120)
    trained = (tmp_path / "trained.txt").read_text().split() if (tmp_path / "trained.txt").exists() else []
    return p, trained, (done / "e8" / "ENDED").read_text()


def test_a_seed_that_would_pass_the_budget_is_not_started(tmp_path):
    # two whole seeds at 1.8 machine hours each (11 runs x 10 steps x dt / 2): a third passes 5
    p, trained, ended = budget(tmp_path, 2, 1.8 * 3600 * 2 / 11 / 10)
    assert p.returncode == 0, p.stderr
    assert trained == []
    assert ended == "seeds 0-1 whole in 3.60 machine hours; seed 2 would pass 5\n"
    assert "out" not in os.listdir(tmp_path)  # nothing begun


def test_seeds_go_on_while_they_fit_and_each_log_is_copied(tmp_path):
    p, trained, ended = budget(tmp_path, 1, 1.0)  # seed 0 whole, in seconds
    assert p.returncode == 0, p.stderr
    _, rows = listed("runs")
    assert sorted(trained) == sorted(r[1] for r in rows[11:]) and len(trained) == 121
    assert [int(t.rsplit("_s", 1)[1]) for t in trained[::11]] == list(range(1, 12))  # seed by seed
    assert (tmp_path / "done" / "e8" / "mha_w64_s11" / "log.jsonl").exists()
    assert ended.startswith("every seed whole in ")


def test_a_seed_begun_before_a_kill_is_finished_past_the_budget(tmp_path):
    (tmp_path / "out" / "e8" / "mqa_s2").mkdir(parents=True)  # seed 2 had begun when it was killed
    dt = 1.8 * 3600 * 2 / 11 / 10
    p, trained, ended = budget(tmp_path, 2, dt, new_dt=dt)
    assert p.returncode == 0 and sorted(trained) == sorted(f"{r}_s2" for r in ROWS)
    assert ended == "seeds 0-2 whole in 5.40 machine hours; seed 3 would pass 5\n"

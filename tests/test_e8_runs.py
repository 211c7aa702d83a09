"""docs/runs/e8/runs.sh lists the plan's runs (docs/plan.md, E8) seed by seed, so that the budget's
end leaves whole seeds of every row; REDO adds E5's rows; an unknown stage is one line."""
import os
import subprocess

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


def test_a_failed_check_runs_e5s_rows_again_in_every_seed():
    _, runs = listed("runs", REDO="gqa lrkv7")
    assert len(runs) == 13 * 12
    assert [r[1] for r in runs[:2]] == ["gqa_s0", "mqa_s0"]
    assert ["--attn=lrkv", "--lrkv_rank=7", "--seed=11"] in [r[2:] for r in runs[-13:]]


def test_an_unknown_stage_is_one_line():
    p, _ = listed("half")
    assert p.returncode == 2 and p.stderr.startswith("error: stage half") and p.stderr.count("\n") == 1

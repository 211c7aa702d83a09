"""docs/runs/e7/runs.sh lists the plan's runs (docs/plan.md, E7): part A's six arms seed by seed,
part B's cache walk, and refuses a stage it does not know in one line."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def listed(stage):
    p = subprocess.run(["bash", "docs/runs/e7/runs.sh", stage], cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "DRY": "1"}, timeout=60)
    return p, [line.split() for line in p.stdout.splitlines()]


def test_part_a_is_six_arms_by_sixteen_fresh_seeds_seed_by_seed():
    _, runs = listed("a")
    assert len(runs) == 96 and len({r[1] for r in runs}) == 96
    arms = ["mha", "gqa", "mqa", "mla", "lrkv", "mha_w32"]
    assert [r[1] for r in runs[:6]] == [f"{a}_s1000" for a in arms]  # a whole seed first
    seeds = {int(r[-1].split("=")[1]) for r in runs}
    assert seeds == set(range(1000, 1016)) and not seeds & set(range(0, 232))  # none of E6's
    assert runs[5][2:] == ["--attn=mha", "--window=32", "--seed=1000"]


def test_part_b_walks_each_cache_down_narrowest_first():
    _, runs = listed("b")
    assert len(runs) == 24
    assert [r[1] for r in runs[:3]] == ["lrkv_r1_s2000", "lrkv_r2_s2000", "lrkv_r4_s2000"]
    assert {r[-1] for r in runs} == {"--seed=2000", "--seed=2001", "--seed=2002"}


def test_an_unknown_stage_is_one_line():
    p, _ = listed("c")
    assert p.returncode == 2 and p.stderr.startswith("error: stage c") and p.stderr.count("\n") == 1

#!/usr/bin/env bash
# E8's runs (docs/plan.md), two at a time on one thread each, resumable: the same command finishes
# what a kill left. From the repository root, in the plan's order:
#   bash docs/runs/e8/runs.sh check   # GQA and LRKV r=7 seed 0, 50 steps: losses at 10-30 against E5's -> out/e8check
#   bash docs/runs/e8/runs.sh runs    # every row, seed by seed (REDO="gqa lrkv7" if the check failed)
#   bash docs/runs/e8/runs.sh spent   # machine hours so far (each log's steps' dt, two runs at a time)
#   DRY=1 ...                         # print the runs only
# Seed by seed, so that the budget's end leaves whole seeds of every row (docs/plan.md, E8's order).
# A run whose log with a score is committed under $DONE (docs/runs) is skipped. All of E8's runs are
# made at one commit: git worktree add ../e8 COMMIT, then from there
#   DONE=$PWD/docs/runs bash $PWD/docs/runs/e8/runs.sh runs   ($PWD: this checkout)
set -euo pipefail
stage=${1:?usage: bash docs/runs/e8/runs.sh check|runs|spent}
redo() { [[ " ${REDO:-} " == *" $1 "* ]]; }
seed() {  # one seed of every row: the incumbents, then the 50% family, then the 25% family
  local s=$1
  redo gqa && echo "e8 gqa_s$s --attn=gqa --seed=$s"
  echo "e8 mqa_s$s --attn=mqa --seed=$s"
  echo "e8 mha_kv_s$s --attn=mha --k_eq_v=True --seed=$s"
  echo "e8 mha_share2_s$s --attn=mha --kv_share=2 --seed=$s"
  echo "e8 mla_dc112_s$s --attn=mla --mla_kv_rank=112 --seed=$s"
  redo lrkv7 && echo "e8 lrkv7_s$s --attn=lrkv --lrkv_rank=7 --seed=$s"
  echo "e8 mha_w128_s$s --attn=mha --window=128 --seed=$s"
  echo "e8 gqa_kv_s$s --attn=gqa --k_eq_v=True --seed=$s"
  echo "e8 gqa_share2_s$s --attn=gqa --kv_share=2 --seed=$s"
  echo "e8 mha_kv_share2_s$s --attn=mha --k_eq_v=True --kv_share=2 --seed=$s"
  echo "e8 mla_dc48_s$s --attn=mla --mla_kv_rank=48 --seed=$s"
  echo "e8 lrkv7_share2_s$s --attn=lrkv --lrkv_rank=7 --kv_share=2 --seed=$s"
  echo "e8 mha_w64_s$s --attn=mha --window=64 --seed=$s"
}
runs() {
  case $stage in
    check) echo "e8check gqa_s0 --attn=gqa --seed=0 --max_iters=50 --eval_interval=10"
           echo "e8check lrkv7_s0 --attn=lrkv --lrkv_rank=7 --seed=0 --max_iters=50 --eval_interval=10" ;;
    runs) for s in $(seq 0 11); do seed "$s"; done ;;
    spent) ;;
    *) echo "error: stage $stage is not check, runs or spent" >&2; exit 2 ;;
  esac
}
runs > /dev/null  # an unknown stage stops here, before anything runs
export DONE=${DONE:-docs/runs} PY=${PY:-python}
if [ "$stage" = spent ]; then  # a step's dt includes its evals; logged every log_interval steps
  exec "$PY" -c 'import glob, json, sys
s = 0.0
for f in glob.glob(sys.argv[1] + "/e8/*/log.jsonl"):
    recs = [json.loads(line) for line in open(f)]
    every = recs[0]["config"]["log_interval"]
    s += sum(r.get("dt", 0.0) * every for r in recs if r["type"] == "step")
print(f"{s / 3600 / 2:.2f} machine hours (two runs at a time)")' "$DONE"
fi
if [ -n "${DRY:-}" ]; then runs; exit 0; fi
mkdir -p out
runs | OMP_NUM_THREADS=1 xargs -P 2 -L 1 bash -c \
  'grep -qs "\"score\"" "$DONE/$0/$1/log.jsonl" && exit 0  # finished and committed: skip it
   r=; [ -e out/$0/$1/log.jsonl ] && r=--resume  # a kill left it: finish it
   "$PY" train.py --out_dir=out/$0 --run_name=$1 $r "${@:2}" > /dev/null 2>> out/$0.err ||
     echo "$1 failed" >> out/$0.err'

#!/usr/bin/env bash
# E8's runs (docs/plan.md), two at a time on one thread each, resumable: the same command finishes
# what a kill left. From the repository root, in the plan's order:
#   bash docs/runs/e8/runs.sh check   # GQA and LRKV r=7 seed 0, 50 steps: losses at 10-30 against E5's -> out/e8check
#   bash docs/runs/e8/runs.sh half    # the 50% family's new rows (and GQA, LRKV r=7 if the check failed: REDO="gqa lrkv7")
#   bash docs/runs/e8/runs.sh quarter # MQA again, then the 25% family's rows
#   DRY=1 ...                         # print the commands only
# A run whose log with a score is committed under $DONE (docs/runs) is skipped. All of E8's runs are
# made at one commit: git worktree add ../e8 COMMIT, then from there
#   DONE=$PWD/docs/runs bash $PWD/docs/runs/e8/runs.sh half   ($PWD: this checkout)
set -euo pipefail
stage=${1:?usage: bash docs/runs/e8/runs.sh check|half|quarter}
seeds=$(seq 0 11)
row() {  # name, then its flags: the row's runs, seed by seed
  local name=$1; shift
  for s in $seeds; do echo "e8 ${name}_s$s $* --seed=$s"; done
}
runs() {
  case $stage in
    check) echo "e8check gqa_s0 --attn=gqa --seed=0 --max_iters=50 --eval_interval=10"
           echo "e8check lrkv7_s0 --attn=lrkv --lrkv_rank=7 --seed=0 --max_iters=50 --eval_interval=10" ;;
    half) [[ " ${REDO:-} " == *" gqa "* ]] && row gqa --attn=gqa
          row mha_kv --attn=mha --k_eq_v=True
          row mha_share2 --attn=mha --kv_share=2
          row mla_dc112 --attn=mla --mla_kv_rank=112
          [[ " ${REDO:-} " == *" lrkv7 "* ]] && row lrkv7 --attn=lrkv --lrkv_rank=7
          row mha_w128 --attn=mha --window=128 ;;
    quarter) row mqa --attn=mqa
             row gqa_kv --attn=gqa --k_eq_v=True
             row gqa_share2 --attn=gqa --kv_share=2
             row mha_kv_share2 --attn=mha --k_eq_v=True --kv_share=2
             row mla_dc48 --attn=mla --mla_kv_rank=48
             row lrkv7_share2 --attn=lrkv --lrkv_rank=7 --kv_share=2
             row mha_w64 --attn=mha --window=64 ;;
    *) echo "error: stage $stage is not check, half or quarter" >&2; exit 2 ;;
  esac
}
if [ -n "${DRY:-}" ]; then runs; exit 0; fi
mkdir -p out
export DONE=${DONE:-docs/runs}
runs | OMP_NUM_THREADS=1 xargs -P 2 -L 1 bash -c \
  'grep -qs "\"score\"" "$DONE/$0/$1/log.jsonl" && exit 0  # finished and committed: skip it
   r=; [ -e out/$0/$1/log.jsonl ] && r=--resume  # a kill left it: finish it
   python train.py --out_dir=out/$0 --run_name=$1 $r "${@:2}" > /dev/null 2>> out/$0.err ||
     echo "$1 failed" >> out/$0.err'

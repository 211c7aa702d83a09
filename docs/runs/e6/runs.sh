#!/usr/bin/env bash
# E6's runs (docs/plan.md), two at a time on one thread each, resumable: the same command finishes
# what a kill left. From the repository root:
#   bash docs/runs/e6/runs.sh pilot       # stage A: MHA at three rates, seeds 100-101 -> out/e6a
#   LR=0.005 bash docs/runs/e6/runs.sh validity  # stage B: MHA at the chosen rate, seeds 200-211 -> out/e6b
#   LR=0.005 bash docs/runs/e6/runs.sh main      # the designs and the window, seeds 0-15 -> out/e6
#   LR=0.005 bash docs/runs/e6/runs.sh window64  # the plan's second window, if the budget allows -> out/e6
#   DRY=1 ...                             # print the commands only
# A run whose log with a score is committed under $DONE (docs/runs) is skipped. E6's runs are all
# made at e6b7670: git worktree add ../e6 e6b7670, then from there
#   LR=0.005 DONE=$PWD/docs/runs bash $PWD/docs/runs/e6/runs.sh main   ($PWD: this checkout)
# The table and figure: python plot.py docs/runs/e6 --recall --reference docs/runs/e6b
set -euo pipefail
stage=${1:?usage: bash docs/runs/e6/runs.sh pilot|validity|main|window64}
runs() {
  case $stage in
    pilot) for s in 100 101; do for lr in 0.005 0.01 0.02; do
             echo "e6a mha_lr${lr}_s$s --attn=mha --matrix_lr=$lr --seed=$s"; done; done ;;
    validity) for s in $(seq 200 211); do echo "e6b mha_s$s --attn=mha --matrix_lr=${LR:?} --seed=$s"; done ;;
    main) for s in $(seq 0 15); do
            for a in mha gqa mqa mla lrkv; do echo "e6 ${a}_s$s --attn=$a --matrix_lr=${LR:?} --seed=$s"; done
            echo "e6 mha_w32_s$s --attn=mha --window=32 --matrix_lr=$LR --seed=$s"; done ;;
    window64) for s in $(seq 0 15); do echo "e6 mha_w64_s$s --attn=mha --window=64 --matrix_lr=${LR:?} --seed=$s"; done ;;
    *) echo "error: stage $stage is not pilot, validity, main or window64" >&2; exit 2 ;;
  esac
}
if [ -n "${DRY:-}" ]; then runs; exit 0; fi
mkdir -p out
export DONE=${DONE:-docs/runs}  # where committed logs live: from a worktree pinned at another commit,
                                # DONE=/path/to/main/docs/runs
runs | OMP_NUM_THREADS=1 xargs -P 2 -L 1 bash -c \
  'grep -qs "\"score\"" "$DONE/$0/$1/log.jsonl" && exit 0  # finished and committed: skip it
   r=; [ -e out/$0/$1/log.jsonl ] && r=--resume  # a kill left it: finish it
   python train.py config/mqar.py --out_dir=out/$0 --run_name=$1 $r "${@:2}" > /dev/null 2>> out/$0.err ||
     echo "$1 failed" >> out/$0.err'

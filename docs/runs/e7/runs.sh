#!/usr/bin/env bash
# E7's runs (docs/plan.md), two at a time on one thread each, resumable: the same command finishes
# what a kill left, and skips a run whose finished log is already under $DONE. From the root:
#   bash docs/runs/e7/runs.sh part0    # MHA, seeds 3000-3003, to their solve -> out/e7/part0
#   bash docs/runs/e7/runs.sh windows  # part 0's check: each solved run through windows 16, 32, 64
#   bash docs/runs/e7/runs.sh a        # part A: six arms, seeds 1000-1015, seed by seed
#   bash docs/runs/e7/runs.sh b        # part B: the caches walked down, seeds 2000-2002
#   DRY=1 ...                          # print the runs only
# From a worktree pinned at the plan's commit, DONE=/path/to/checkout/docs/runs: each finished
# log is copied there, to be committed. The table: python plot.py docs/runs/e7/a --recall
set -euo pipefail
stage=${1:?usage: bash docs/runs/e7/runs.sh part0|windows|a|b}
# E6's task and rate (config/mqar.py), E7's schedule, cap and solve rule
E7="--schedule=constant --max_iters=12000 --stop_acc=0.99"
runs() {
  case $stage in
    part0) for s in 3000 3001 3002 3003; do echo "part0 mha_s$s --attn=mha --seed=$s"; done ;;
    a) for s in $(seq 1000 1015); do
         for a in mha gqa mqa mla lrkv; do echo "a ${a}_s$s --attn=$a --seed=$s"; done
         echo "a mha_w32_s$s --attn=mha --window=32 --seed=$s"; done ;;
    b) for s in 2000 2001 2002; do  # narrowest first within a seed
         for r in 1 2 4; do echo "b lrkv_r${r}_s$s --attn=lrkv --lrkv_rank=$r --seed=$s"; done
         for c in 2 4 8; do echo "b mla_c${c}_s$s --attn=mla --mla_kv_rank=$c --seed=$s"; done
         for w in 16 64; do echo "b mha_w${w}_s$s --attn=mha --window=$w --seed=$s"; done; done ;;
    windows) ;;
    *) echo "error: stage $stage is not part0, windows, a or b" >&2; exit 2 ;;
  esac
}
export DONE=${DONE:-docs/runs} OUT=${OUT:-out/e7} PY=${PY:-python}
if [ "$stage" = windows ]; then  # part 0's check, on the checkpoints part0 kept
  for ckpt in "$OUT"/part0/*/ckpt.pt; do
    run=$(basename "$(dirname "$ckpt")")
    for w in 16 32 64; do
      # at the training length only: the check reads no other (2T and 4T took minutes an eval)
      OMP_NUM_THREADS=1 "$PY" eval.py "$ckpt" --recall --window=$w --examples=1024 --length=128 \
        > "$OUT/part0/$run/window_$w.md"
      mkdir -p "$DONE/e7/part0/$run" && cp "$OUT/part0/$run/window_$w.md" "$DONE/e7/part0/$run/"
    done
  done
  exit 0
fi
if [ -n "${DRY:-}" ]; then runs; exit 0; fi
mkdir -p "$OUT"
runs | OMP_NUM_THREADS=1 E7="$E7" xargs -P 2 -L 1 bash -c \
  'grep -qs "\"score\"" "$DONE/e7/$0/$1/log.jsonl" && exit 0  # finished and copied: skip it
   r=; [ -e $OUT/$0/$1/log.jsonl ] && r=--resume  # a kill left it: finish it
   "$PY" train.py config/mqar.py $E7 --out_dir=$OUT/$0 --run_name=$1 $r "${@:2}" \
     > /dev/null 2>> $OUT/$0.err || { echo "$1 failed" >> $OUT/$0.err; exit 0; }
   mkdir -p "$DONE/e7/$0/$1" && cp "$OUT/$0/$1/log.jsonl" "$DONE/e7/$0/$1/"'

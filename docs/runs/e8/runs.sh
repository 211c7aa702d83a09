#!/usr/bin/env bash
# E8's runs (docs/plan.md), two at a time on one thread each, resumable: the same command finishes
# what a kill left. From the repository root, in the plan's order:
#   bash docs/runs/e8/runs.sh check   # GQA and LRKV r=7 seed 0, 50 steps: losses at 10-30 against E5's -> out/e8check
#   bash docs/runs/e8/runs.sh runs    # every row, seed by seed (REDO="gqa lrkv7" if the check failed)
#   bash docs/runs/e8/runs.sh spent   # machine hours so far: the minutes `runs` has been running
#   DRY=1 ...                         # print the runs only
# Seed by seed: a seed starts only while the hours spent and one more seed's (their mean so far) fit
# in the plan's 5, so the budget's end leaves whole seeds of every row; then $DONE/e8/ENDED says so.
# The hours are wall-clock: while `runs` runs, it adds a line a minute to $DONE/e8/minutes (a kill
# loses under a minute; train.py's dt leaves out evals and start-up, so it would undercount).
# All of E8's runs are made at one commit, from a worktree (git worktree add --detach ../e8 COMMIT):
#   cd ../e8 && DONE=$OLDPWD/docs/runs PY=$OLDPWD/.venv/bin/python bash docs/runs/e8/runs.sh runs
# Each finished log is copied to $DONE/e8, to be committed; a run whose log there has a score is skipped.
set -euo pipefail
stage=${1:?usage: bash docs/runs/e8/runs.sh check|runs|spent}
HOURS=5
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
case $stage in check|runs|spent) ;; *) echo "error: stage $stage is not check, runs or spent" >&2; exit 2 ;; esac
export DONE=${DONE:-docs/runs} PY=${PY:-python}
spent() {  # hours of the machine: a line of $DONE/e8/minutes for each minute `runs` ran
  awk 'END { printf "%.2f\n", NR / 60 }' "$DONE/e8/minutes" 2> /dev/null || echo 0.00
}
run() {  # the lines on stdin, two at a time
  mkdir -p out
  OMP_NUM_THREADS=1 xargs -P 2 -L 1 bash -c \
    'grep -qs "\"score\"" "$DONE/$0/$1/log.jsonl" && exit 0  # finished and copied: skip it
     r=; [ -e out/$0/$1/log.jsonl ] && r=--resume  # a kill left it: finish it
     "$PY" train.py --out_dir=out/$0 --run_name=$1 $r "${@:2}" > /dev/null 2>> out/$0.err ||
       { echo "$1 failed" >> out/$0.err; exit 0; }
     mkdir -p "$DONE/$0/$1" && cp "out/$0/$1/log.jsonl" "$DONE/$0/$1/.log" &&
       mv "$DONE/$0/$1/.log" "$DONE/$0/$1/log.jsonl"  # whole or not there: a kill mid-copy'
}
missing() {  # the runs of seed $1 without a finished log under $DONE
  seed "$1" | while read -r d name _; do grep -qs '"score"' "$DONE/$d/$name/log.jsonl" || echo "$name"; done
}
case $stage in
  spent) echo "$(spent) machine hours (two runs at a time)" ;;
  check) lines="e8check gqa_s0 --attn=gqa --seed=0 --max_iters=50 --eval_interval=10
e8check lrkv7_s0 --attn=lrkv --lrkv_rank=7 --seed=0 --max_iters=50 --eval_interval=10"
         if [ -n "${DRY:-}" ]; then echo "$lines"; else echo "$lines" | run; fi ;;
  runs) if [ -n "${DRY:-}" ]; then for s in $(seq 0 11); do seed "$s"; done; exit 0; fi
        mkdir -p "$DONE/e8"
        while sleep 60 && kill -0 $$; do date -u +%FT%TZ >> "$DONE/e8/minutes"; done > /dev/null 2>&1 &
        trap 'kill $! 2> /dev/null' EXIT
        for s in $(seq 0 11); do
          left=$(missing "$s")
          [ -z "$left" ] && continue  # whole already
          h=$(spent)  # seeds 0 to s-1 are whole; a seed begun (a kill's) is finished, not gated
          begun=$(seed "$s" | while read -r d name _; do [ ! -e "out/$d/$name" ] || echo "$name"; done)
          if [ "$left" = "$(seed "$s" | awk '{ print $2 }')" ] && [ -z "$begun" ] &&
             awk -v h="$h" -v s="$s" -v max=$HOURS 'BEGIN { exit !(s > 0 && h + h / s > max) }'; then
            echo "seeds 0-$((s - 1)) whole in $h machine hours; seed $s would pass $HOURS" > "$DONE/e8/ENDED"
            exit 0
          fi
          seed "$s" | run
          left=$(missing "$s")
          if [ -n "$left" ]; then  # a failed run (out/e8.err says why): no seed after it is whole
            echo "error: seed $s is not whole: $(echo $left); see out/e8.err, then run again" >&2
            exit 1
          fi
        done
        echo "every seed whole in $(spent) machine hours" > "$DONE/e8/ENDED" ;;
esac

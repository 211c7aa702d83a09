#!/usr/bin/env bash
# The paper's figure, small: set up, train the five designs on the CPU preset (embedded corpus),
# two runs side by side on one thread each (the fifth alone on both), then draw the figure. The
# time it takes is in docs/performance.md (Wall time).
#   bash reproduce.sh                  # seed 0 into out/reproduce/, figure in out/reproduce/figure_tokens.png
#   SEEDS="0 1 2" bash reproduce.sh    # three seeds (seed 0 reused if done); plot.py reports mean, spread, paired gaps
#   SWEEP=pareto bash reproduce.sh     # loss against KV-cache size: 12 settings x 3 seeds, 300 steps, into out/pareto/
#   SWEEP=lr bash reproduce.sh         # each design at Muon rates x0.5 x0.7 x1 x1.4 x2 of the paper's, 3 seeds, into out/lr/
#   LRS="0.5 2" SWEEP=lr bash reproduce.sh   # some of the rates (multiples of the paper's matrix_lr)
#   OUT=out/matched DESIGNS="lrkv mla gqa mqa" bash reproduce.sh --match_params   # at MHA's parameter count
#   OUT=out/mine bash reproduce.sh     # another folder (runs there are the reproduction's alone)
#   DESIGNS="mha lrkv" JOBS=1 PYTHON=python bash reproduce.sh   # some designs, one at a time, an existing Python
#   SWEEP=recall bash reproduce.sh    # MQAR recall as E6 runs it (config/mqar.py): the designs and MHA with a window of
#                                     # 32 (E6's control), into out/recall/
#   WIDTHS="32" PAIRS="8 16" LRS="0.5 1" SEEDS="0 1 2" SWEEP=recall bash reproduce.sh   # a grid: d_model, one pair
#                                     # count a run (default: the mixture), rates x the paper's (default: the config's)
#   DRY=1 SWEEP=pareto bash reproduce.sh   # print the train.py commands, run nothing
# Extra arguments go to every train.py run, e.g. bash reproduce.sh --max_iters=300 (then use another OUT).
# Interrupted? Run the same command again: every run continues where it stopped (train.py --resume),
# finished runs are not redone.
set -euo pipefail
cd "$(dirname "$0")"
fail() { echo "error: $1" >&2; exit 2; }  # bad input: one line and status 2, as every script here
PY=${PYTHON:-.venv/bin/python}
JOBS=${JOBS:-2}  # runs at once, cores/JOBS threads each (on 2 cores about as fast as one run on both)
[[ ${SWEEP:-} =~ ^(pareto|lr|recall)?$ ]] || fail "SWEEP=$SWEEP is not a sweep; use SWEEP=pareto, lr, recall, or none"
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || fail "JOBS=$JOBS: give the number of runs at once, e.g. JOBS=2"
for s in ${SEEDS:-}; do [[ $s =~ ^[0-9]+$ ]] || fail "SEEDS: $s is not a seed; e.g. SEEDS=\"0 1 2\""; done
for m in ${LRS:-}; do [[ $m =~ ^[0-9]*\.?[0-9]+$ ]] || fail "LRS: $m is not a number; e.g. LRS=\"0.5 2\""; done
for n in ${WIDTHS:-} ${PAIRS:-}; do [[ $n =~ ^[1-9][0-9]*$ ]] || fail "WIDTHS, PAIRS: $n is not a count; e.g. PAIRS=\"8 16\""; done
CORES=$(nproc)
if [ -z "${PYTHON:-}" ] && [ ! -x .venv/bin/python ] && [ -z "${DRY:-}" ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -r requirements.txt
fi
export MPLBACKEND=Agg
ALL=$(python3 -c 'import common; print(*common.DESIGNS)')  # from common.py's table
DESIGNS=${DESIGNS:-$ALL}
for a in $DESIGNS; do [[ " $ALL " == *" $a "* ]] || fail "DESIGNS: $a is not a design; use some of $ALL"; done

# the runs, one "name train.py-arguments" per line
if [ "${SWEEP:-}" = pareto ]; then
  OUT=${OUT:-out/pareto}
  settings=$(python3 -c 'import common; print(common.budget_runs())')  # each row's budget
  runs() {  # 300 steps, half the figure's, and evals only at 0, 150, 300
    for s in ${SEEDS:-0 1 2}; do
      while read -r name flags; do echo "${name}_s$s $flags"; done <<< "$settings"
    done | sed "s/$/ --max_iters=300 --eval_interval=150/"
  }
  plot=--pareto
elif [ "${SWEEP:-}" = lr ]; then
  OUT=${OUT:-out/lr}
  runs() {  # the figure's runs at several Muon rates; the AdamW rates stay the paper's. Only the final
    # loss is compared, so they evaluate only at the end (the batches, and so the losses, are the same)
    for s in ${SEEDS:-0 1 2}; do
      for attn in $DESIGNS; do
        for m in ${LRS:-0.5 0.7 1 1.4 2}; do
          echo "${attn}_lr${m}_s$s --attn=$attn --matrix_lr=$(awk -v m="$m" 'BEGIN { print 0.02 * m }')"  # muon.MATRIX_LR
        done
      done
    done | sed "s/$/ --eval_interval=600 --ckpt_interval=100/"
  }
  plot=--lr
elif [ "${SWEEP:-}" = recall ]; then
  OUT=${OUT:-out/recall}
  runs() {  # config/mqar.py at each width (d_model, 4 heads), pair count and Muon rate; '-': the config's
    controls=; [[ " $DESIGNS " == *" mha "* ]] && controls=mha_w32  # E6's control, beside MHA
    for s in ${SEEDS:-0}; do
      for attn in $DESIGNS $controls; do
        for w in ${WIDTHS:-64}; do
          for p in ${PAIRS:--}; do
            for m in ${LRS:--}; do
              name=${attn}_d$w flags="--attn=${attn%_w32} --n_embd=$w"
              [ "$attn" = mha_w32 ] && flags+=" --window=32"
              [ "$p" = - ] || { name+=_p$p; flags+=" --mqar_pairs=$p"; }
              [ "$m" = - ] || { name+=_lr$m; flags+=" --matrix_lr=$(awk -v m="$m" 'BEGIN { print 0.02 * m }')"; }
              echo "${name}_s$s config/mqar.py $flags"  # muon.MATRIX_LR above: the paper's rate
            done
          done
        done
      done
    done
  }
  plot=--recall
else
  OUT=${OUT:-out/reproduce}
  runs() {
    for s in ${SEEDS:-0}; do
      for attn in $DESIGNS; do echo "cpu_${attn}_s$s --attn=$attn"; done
    done
  }
  plot=""
fi

if [ -n "${DRY:-}" ]; then
  runs | while read -r run args; do echo "train.py $args --seed=${run##*_s} --out_dir=$OUT --run_name=$run $*"; done
  exit 0
fi
# bad input is said once, here, not by every run: the first run's flags checked (train.py --check)
read -r run args < <(runs)
# shellcheck disable=SC2086  # $args is a list of flags
"$PY" train.py $args --out_dir="$OUT" --run_name="$run" "$@" --check || exit $?
# the runs that failed, a name a line: not wait's pids, which go stale in a long reproduction once
# the kernel hands a finished run's pid to another child (bash then forgets its status)
failed=$(mktemp)
trap 'rm -f "$failed"' EXIT
left=$(runs | wc -l)
threads=$(( CORES / JOBS > 0 ? CORES / JOBS : 1 ))
tail=0
while read -r run args; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  if [ "$left" -lt "$JOBS" ] && [ "$tail" = 0 ]; then
    # fewer runs left than slots (the fifth of five): wait for the others, then share all the cores
    # (a run's thread count changes its reduction order: last-digit noise, not a bias)
    tail=1
    while [ "$(jobs -rp | wc -l)" -gt 0 ]; do sleep 1; done
    threads=$(( CORES / left > 0 ? CORES / left : 1 ))
  fi
  left=$((left - 1))
  resume=""
  [ -d "$OUT/$run" ] && resume="--resume"  # started before: continue it (a finished run does nothing)
  # shellcheck disable=SC2086  # $args is a list of flags
  ( OMP_NUM_THREADS=$threads "$PY" train.py $args --seed="${run##*_s}" --out_dir="$OUT" --run_name="$run" $resume "$@" 2>&1 \
      | sed -u "s/^/$run  /" || echo "$run" >> "$failed" ) &
done < <(runs)
wait
if [ -s "$failed" ]; then
  echo "reproduce.sh: $(sort "$failed" | paste -sd ' ') failed (their lines above say why);" \
    "run the same command again to continue" >&2
  exit 1
fi
"$PY" plot.py "$OUT" $plot

#!/usr/bin/env bash
# The paper's figure, small: set up, prepare the embedded corpus, train the five designs on the
# CPU preset one after another, draw the figure. About 40 minutes on a 2-core AVX2 CPU (8 a design).
#   bash reproduce.sh            # seed 0 into out/reproduce/, figure in out/reproduce/figure_tokens.png
#   SEED=1 bash reproduce.sh     # another seed beside it; plot.py averages seeds and reports their spread
#   OUT=out/mine bash reproduce.sh   # another folder (runs there are the reproduction's alone)
#   DESIGNS="mha lrkv" PYTHON=python bash reproduce.sh   # some designs, with an existing Python
# Extra arguments go to every train.py run, e.g. bash reproduce.sh --max_iters=300 (then use another OUT).
# Interrupted? Run the same command again: every run continues where it stopped (train.py --resume).
set -euo pipefail
cd "$(dirname "$0")"
SEED=${SEED:-0}
OUT=${OUT:-out/reproduce}
PY=${PYTHON:-.venv/bin/python}
if [ -z "${PYTHON:-}" ] && [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -r requirements.txt
fi
export MPLBACKEND=Agg
for attn in ${DESIGNS:-mha lrkv mla gqa mqa}; do
  run="cpu_${attn}_s${SEED}"
  resume=""
  [ -d "$OUT/$run" ] && resume="--resume"  # started before: continue it (a finished run does nothing)
  "$PY" train.py --attn="$attn" --seed="$SEED" --out_dir="$OUT" --run_name="$run" $resume "$@"
done
"$PY" plot.py "$OUT"

#!/usr/bin/env bash
# The paper's figure, small: set up, prepare the embedded corpus, train the five designs on the
# CPU preset one after another, draw the figure. About 25 minutes on a 2-core CPU.
#   bash reproduce.sh            # seed 0 into out/
#   SEED=1 bash reproduce.sh     # another seed beside it; plot.py averages seeds and reports their spread
# Extra arguments go to every train.py run, e.g. bash reproduce.sh --max_iters=300
set -euo pipefail
cd "$(dirname "$0")"
SEED=${SEED:-0}
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -r requirements.txt
fi
export MPLBACKEND=Agg
for attn in mha lrkv mla gqa mqa; do
  run="cpu_${attn}_s${SEED}"
  resume=""
  [ -f "out/$run/ckpt.pt" ] && resume="--resume"  # finished or interrupted runs continue, not restart
  .venv/bin/python train.py --attn="$attn" --seed="$SEED" --run_name="$run" $resume "$@"
done
.venv/bin/python plot.py out

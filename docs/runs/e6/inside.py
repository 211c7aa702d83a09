"""E6's test examples at each count (config/mqar.py: 128 tokens, vocabulary 320, alpha 0.01; the
test seeds train.py scores): the share of answers whose pair's value lies inside a window of 32
that ends at the query, so that one attention step of the window-32 control could reach it.
From the repository root: PYTHONPATH=. python docs/runs/e6/inside.py"""
import numpy as np

from recall import IGNORE, mqar, split_seed

for N in (4, 8, 16, 32):
    x, y = mqar(1024, 128, N, 320, (*split_seed("test"), N), 0.01)
    reach = []
    for xi, yi in zip(x.numpy(), y.numpy()):
        value_at = {v: t for t, v in enumerate(xi[:2 * N]) if t % 2}  # pair i's value sits at 2i + 1
        reach += [q - value_at[yi[q]] for q in np.nonzero(yi != IGNORE)[0]]  # the query sits at q
    print(f"{N} pairs: {np.mean(np.array(reach) < 32):.1%} of {len(reach)} answers inside the window")

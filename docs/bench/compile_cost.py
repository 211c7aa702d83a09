"""
The CPU side of gpu_check.py's cold compiles: dynamo and AOTAutograd alone (backend "aot_eager",
no inductor, no Triton), per design, for the two graphs its phases compile: a training micro-step
of the 128m preset at 4 layers (the designs phase), and a decode step of 2 layers at an 8K cache
(the decode phases). The GPU side (inductor's lowering and Triton's kernel builds) comes on top.
Each process pays torch's first-compile start-up once; the first design's row carries it.

    OMP_NUM_THREADS=2 python docs/bench/compile_cost.py
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import torch  # noqa: E402

from common import DESIGNS  # noqa: E402
from model import GPT, preset  # noqa: E402

torch._dynamo.config.cache_size_limit = 64
print(f"{'design':6} {'train fwd+bwd s':>16} {'decode step s':>14}")
for attn in DESIGNS:
    torch.manual_seed(0)
    model = GPT(preset("128m", attn=attn, n_layer=4, block_size=256))
    x = torch.randint(0, 50304, (1, 256))
    t0 = time.perf_counter()
    torch.compile(model, backend="aot_eager")(x, x)[1].backward()
    train = time.perf_counter() - t0
    model = GPT(preset("128m", attn=attn, n_layer=2, block_size=8192)).eval()
    caches = model.new_caches(8192)
    with torch.no_grad():
        model(x[:, :16], caches=caches)
        step = torch.compile(model, backend="aot_eager", fullgraph=True)
        t0 = time.perf_counter()
        step(x[:, :1], caches=caches, pos=torch.tensor([16]))
    print(f"{attn:6} {train:16.1f} {time.perf_counter() - t0:14.1f}")

"""
A sliding window in training: SDPA with a banded boolean mask against flex_attention with a
block mask, forward + backward, side by side in one run (the causal kernel as the yardstick).
attention.attend uses the faster on the CPU. Shapes: MQAR's (B 32, H 4, T 128, d_h 16, W 32)
and the cpu preset's (B 16, H 4, T 256, d_h 32, W 64).

    OMP_NUM_THREADS=1 python docs/bench/window_mask.py
"""
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from attention import band  # noqa: E402


def clock(f, *args, reps=20):
    for _ in range(3):
        f(*args)
    t = time.perf_counter()
    for _ in range(reps):
        f(*args)
    return (time.perf_counter() - t) / reps


def fwd_bwd(attn):
    def run(q, k, v):
        attn(q, k, v).sum().backward()
    return run


def ms_or_refusal(attn, *args):
    try:
        return f"{1e3 * clock(fwd_bwd(attn), *args):.2f}"
    except Exception as e:  # flex_attention has no CPU backward in torch 2.13
        return "refused"


compiled_flex = torch.compile(flex_attention)
print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); ms per forward + backward")
print(f"{'B':>3} {'H':>2} {'T':>4} {'d':>3} {'W':>3} {'causal':>7} {'SDPA+band':>9} {'flex eager':>10} "
      f"{'flex compiled':>13} {'band/causal':>11}")
for B, H, T, d, W in [(32, 4, 128, 16, 32), (16, 4, 256, 32, 64)]:
    q, k, v = (torch.randn(B, H, T, d, requires_grad=True) for _ in range(3))
    mask = band(T, W)
    block = create_block_mask(lambda b, h, i, j: (j <= i) & (j > i - W), None, None, T, T, device="cpu")
    causal, banded = (1e3 * clock(fwd_bwd(f), q, k, v) for f in (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mask)))
    flex = [ms_or_refusal(f, q, k, v) for f in (lambda q, k, v: flex_attention(q, k, v, block_mask=block),
                                                 lambda q, k, v: compiled_flex(q, k, v, block_mask=block))]
    print(f"{B:3} {H:2} {T:4} {d:3} {W:3} {causal:7.2f} {banded:9.2f} {flex[0]:>10} {flex[1]:>13} "
          f"{banded / causal:11.2f}")

"""One decode token's attention over 4 layers of a batch-32 cache: PyTorch's fused SDPA (its CPU
flash kernel takes the mask) against attention.attend's matmuls, eager and compiled.

4 query heads of width 32 over 4,096 cached tokens; MQA (one K/V head: the heads folded into the
query length, or SDPA's enable_gqa) and MHA (four). Prints median ms of 10 steps. The numbers are
in docs/performance.md, "Decode speed", "Why MQA, MLA and the exact LRKV miss".

Run from the repository root:

    OMP_NUM_THREADS=2 python docs/bench/sdpa_vs_attend.py
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
import time, torch, torch.nn.functional as F
from attention import attend
B, H, T, D = 32, 4, 4096, 32
mask = torch.ones(1, T, dtype=torch.bool)  # the new token sees every cached slot
def ms(f, n=10):
    f(), f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return 1e3 * sorted(ts)[n // 2]
for design, Hkv in (("MQA", 1), ("MHA", 4)):
    ks, vs = [[torch.randn(B, Hkv, T, D) for _ in range(4)] for _ in "kv"]
    q = torch.randn(B, H, 1, D)
    forms = {"attend (matmuls)": lambda k, v: attend(q, k, v, mask=mask)}
    if Hkv == 1:  # the 4 query heads folded into the query length, or SDPA's own GQA
        forms["SDPA, heads folded"] = lambda k, v: F.scaled_dot_product_attention(
            q.view(B, 1, H, D), k, v, attn_mask=mask.expand(H, T))
        forms["SDPA, enable_gqa"] = lambda k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=True)
    else:
        forms["SDPA"] = lambda k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for name, f in forms.items():
        step = lambda f=f: [f(k, v) for k, v in zip(ks, vs)]
        print(design, name, f"eager {ms(step):.1f} ms, compiled {ms(torch.compile(step)):.1f} ms")

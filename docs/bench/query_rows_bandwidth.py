"""G query rows against one head's cached keys: GB/s of keys read, by how the product is laid out.

4 layers of (32, 4,096, 32) keys (67 MB), batched matmuls, median of 9, for G = 1, 2, 4, 8 query
rows (MHA has one a head; MQA and MLA four in docs/performance.md's batch-32 shape): `q @ K^T` (as
decode does it), `q @ KT` (the cache stored (D, T)), `K @ q^T` and `a @ V`; first a `sum` over the
same bytes, the machine's read rate. The numbers are in docs/performance.md, "Decode speed", "Why
MQA, MLA and the exact LRKV miss".

Run from the repository root:

    OMP_NUM_THREADS=2 python docs/bench/query_rows_bandwidth.py
"""
import time, torch
B, T, D, L = 32, 4096, 32, 4
def s(f, n=9):
    f(), f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[n // 2]
K = [torch.randn(B, T, D) for _ in range(L)]  # (B, T, D), a head's cache as it is stored
KT = [k.transpose(1, 2).contiguous() for k in K]  # (B, D, T), stored the other way
x = torch.randn(L * B * T * D)
print(f"sum: {x.numel() * 4 / s(x.sum) / 1e9:.1f} GB/s")
for G in (1, 2, 4, 8):
    q, a = torch.randn(B, G, D), torch.randn(B, G, T)
    forms = {"q @ K^T": lambda: [q @ k.transpose(1, 2) for k in K],
             "q @ KT": lambda: [q @ k for k in KT],
             "K @ q^T": lambda: [k @ q.transpose(1, 2) for k in K],
             "a @ V": lambda: [a @ k for k in K]}
    print(f"G={G}:", *(f"{n} {x.numel() * 4 / s(f) / 1e9:.1f}" for n, f in forms.items()), "GB/s")

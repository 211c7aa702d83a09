"""MQA's attention over one K/V head in three forms, compiled.

4 query rows against one key/value head, batch 32, 4,096 cached tokens of width 32, over 4 layers'
keys and values (134 MB): the batched matmuls, the keys broadcast over the query rows, and products
and sums that inductor fuses. Prints each form's median ms of 10 steps. The numbers are in
docs/performance.md, "Decode speed", batch 32.

Run from the repository root:

    OMP_NUM_THREADS=2 python docs/bench/mqa_attention_forms.py
"""
import time, torch
B, G, T, D = 32, 4, 4096, 32  # 4 query rows against one head; 4 layers' keys and values, 134 MB
ks, vs = [torch.randn(B, 1, T, D) for _ in range(4)], [torch.randn(B, 1, T, D) for _ in range(4)]
q = torch.randn(B, 1, G, D)
forms = {
    "bmm": lambda k, v: (q @ k.transpose(-2, -1)).softmax(-1) @ v,
    "broadcast": lambda k, v: (q.view(B, 1, G, 1, D) @ k.unsqueeze(2).transpose(-2, -1)).softmax(-1)
                              @ v.unsqueeze(2),
    "mul-sum": lambda k, v: ((q.unsqueeze(-2) * k.unsqueeze(2)).sum(-1).softmax(-1).unsqueeze(-1)
                             * v.unsqueeze(2)).sum(-2)}
for name, f in forms.items():
    step = torch.compile(lambda f=f: sum(f(k, v).sum() for k, v in zip(ks, vs)))
    step(), step()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(name, f"{1e3 * sorted(times)[5]:.1f} ms")

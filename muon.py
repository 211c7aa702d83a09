"""
Muon (Jordan et al., 2024): momentum, then the update is orthogonalised by a Newton-Schulz
iteration. The same algorithm and defaults as torch.optim.Muon (equal to it in bf16, tested), with
three things it lacks:

- ns_dtype: torch runs Newton-Schulz in bf16, the paper's choice and fast on GPUs. A CPU without
  bf16 instructions (AVX2 only) runs a bf16 matmul ~30x slower than fp32, which made the optimiser
  two thirds of a CPU training step; there we run it in fp32.
- heads: a weight that is a block-diagonal map stored as H blocks stacked along its rows (LRKV's
  B_k: head h's latent R_h -> head h's key residual only) is orthogonalised block by block. The
  polar factor of a block-diagonal matrix is the block-diagonal of its blocks' polar factors, so
  this is Muon applied to the map the model actually uses; orthogonalising the stack as one
  (H·d_h, r) matrix would mix heads and scale the step by √(H·d_h/r) instead of √(d_h/r).
- sharing across ranks: under torch.distributed every rank holds the same gradients (DDP) or a
  shard of them (FSDP2), and orthogonalising every matrix on every rank repeats the optimiser's
  most expensive part world times over. Each matrix has one owner rank, which orthogonalises it
  exactly as one process would and broadcasts the result: the step is bit-identical to the
  unshared one. A sharded (DTensor) parameter's gradient is gathered whole first, and each rank
  applies its own shard of the update.

    torchrun --standalone --nproc_per_node=2 muon.py [preset]   # median Muon step, shared and not
"""
import math
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate

A, B, C = 3.4445, -4.7750, 2.0315  # the quintic's coefficients (torch's, Keller Jordan's)


def orthogonalise(G, steps=5, dtype=torch.bfloat16, eps=1e-7):
    # G (n, rows, cols) -> about U Vᵀ of each G[i] (singular values pushed into ~[0.7, 1.2])
    X = G.to(dtype)
    tall = G.size(1) > G.size(2)
    if tall:  # iterate on the wide side: X Xᵀ is the smaller Gram matrix
        X = X.mT
    X = X / X.norm(dim=(1, 2), keepdim=True).clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    for _ in range(steps):
        gram = X @ X.mT  # (n, rows, rows)
        poly = torch.baddbmm(gram, gram, gram, beta=B, alpha=C)  # b·XXᵀ + c·(XXᵀ)²
        X = torch.baddbmm(X, poly, X, beta=A)  # a·X + (b·XXᵀ + c·(XXᵀ)²)·X
    return X.mT if tall else X


def ns_flops(rows, cols, heads=1, steps=5):
    """FLOPs of orthogonalising a (rows, cols) matrix stored as `heads` row blocks. On the wide
    side X is m×n, m <= n: per iteration X Xᵀ is 2·m·m·n, its square 2·m·m·m, times X 2·m·m·n."""
    m, n = sorted((rows // heads, cols))
    return heads * steps * (4 * m * m * n + 2 * m * m * m)


class Muon(torch.optim.Optimizer):
    """For 2-D weights. A parameter with an attribute `heads` = H is H stacked row blocks,
    orthogonalised one by one. lr is scaled by √max(1, rows/cols) of each (block) matrix."""

    def __init__(self, params, lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_steps=5, ns_dtype=torch.bfloat16):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, ns_steps=ns_steps))
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None, share=True):
        jobs = [(p, group) for group in self.param_groups for p in group["params"] if p.grad is not None]
        shared = share and dist.is_initialized() and dist.get_world_size() > 1
        rank, world = (dist.get_rank(), dist.get_world_size()) if shared else (0, 1)
        # largest first, `world` matrices at a time, the k-th of each chunk orthogonalised by rank k:
        # same-shape matrices fall into the same chunks, which balances the ranks' work; and only one
        # chunk of whole (gathered) matrices is held at a time, which keeps FSDP2's memory sharded
        jobs.sort(key=lambda j: -ns_flops(*j[0].shape, getattr(j[0], "heads", 1)))  # stable: the same order on every rank
        for c in range(0, len(jobs), world):
            chunk, updates = [], []
            for k, (p, group) in enumerate(jobs[c:c + world]):
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))  # sharded like p
                buf.lerp_(p.grad, 1 - group["momentum"])
                g = p.grad.lerp(buf, group["momentum"]) if group["nesterov"] else buf
                g = g.full_tensor() if isinstance(g, DTensor) else g  # whole: orthogonalisation is not elementwise
                if k == rank:
                    u = orthogonalise(g.view(getattr(p, "heads", 1), -1, g.size(1)), group["ns_steps"], self.ns_dtype)
                    u = u.reshape(g.shape).contiguous()  # a tall matrix's is a transposed view: not sendable
                else:
                    u = torch.empty(g.shape, dtype=self.ns_dtype, device=g.device)
                chunk.append((p, group, g.shape))
                updates.append(u)
            if shared:
                for w in [dist.broadcast(u, k, async_op=True) for k, u in enumerate(updates)]:
                    w.wait()
            for (p, group, (rows, cols)), u in zip(chunk, updates):
                if isinstance(p, DTensor):  # this rank's shard of the whole update: a local slice, no traffic
                    u = DTensor.from_local(u, p.device_mesh, [Replicate()], run_check=False).redistribute(
                        p.device_mesh, p.placements)
                lr, H = group["lr"], getattr(p, "heads", 1)
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(u, alpha=-lr * math.sqrt(max(1.0, rows / H / cols)))


def newton_schulz_dtype(choice, gpu):
    # --muon_dtype: auto is bf16 on GPUs (the paper's) and fp32 on CPUs, where bf16 matmuls can be ~30x slower
    if choice not in ("auto", "bf16", "fp32"):
        raise ValueError(f"--muon_dtype={choice!r} is unknown; use auto, bf16 or fp32")
    return torch.bfloat16 if choice == "bf16" or (choice == "auto" and gpu) else torch.float32


def optimizers(model, matrix_lr, embed_lr, head_lr, weight_decay, betas, ns_dtype):
    """The paper's split: Muon for every hidden weight matrix, each the map it is (K and V are
    separate weights in every design; LRKV's block-diagonal B per head); AdamW for the embedding,
    the head and any gain (MLA's kv_norm weight with mla_deepseek). Neither the embedding nor a
    gain is decayed: decoupled decay at lr 0.2 would shrink the embedding 2% a step."""
    hidden = [p for n, p in model.named_parameters() if n.startswith("h.")]
    matrices, gains = [p for p in hidden if p.ndim == 2], [p for p in hidden if p.ndim < 2]
    return [Muon(matrices, lr=matrix_lr, weight_decay=weight_decay, ns_dtype=ns_dtype),
            torch.optim.AdamW([dict(params=[model.wte.weight], lr=embed_lr, weight_decay=0.0),
                               dict(params=[model.lm_head.weight], lr=head_lr),
                               dict(params=gains, lr=head_lr, weight_decay=0.0)],
                              betas=betas, weight_decay=weight_decay)]


if __name__ == "__main__":  # median time of a Muon step on a preset's matrices: every rank alone vs shared
    from model import GPT, preset
    if "RANK" in __import__("os").environ:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = GPT(preset(sys.argv[1] if len(sys.argv) > 1 else "cpu"))
    opt = optimizers(model, 0.02, 0.2, 0.004, 0.1, (0.9, 0.95), torch.float32)[0]
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    times = {False: [], True: []}
    for share in (False, True) * 10:
        if dist.is_initialized():
            dist.barrier()
        t0 = time.perf_counter()
        opt.step(share=share)
        times[share].append(time.perf_counter() - t0)
    if not dist.is_initialized() or dist.get_rank() == 0:
        for share, ts in times.items():
            print(f"{'shared' if share else 'alone'} Muon step: median {1e3 * sorted(ts)[len(ts) // 2]:.1f} ms")

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

    torchrun --standalone --nproc_per_node=2 muon.py [preset] [batch]   # the optimisers' share of a step,
                                                                         # shared and not; estimated on 8 GPUs
"""
import itertools
import math
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate

BATCH = 2**22  # numbers a rank orthogonalises in one batch: small matrices go together, large ones alone
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
        shared = share and dist.is_initialized() and dist.get_world_size() > 1
        rank, world = (dist.get_rank(), dist.get_world_size()) if shared else (0, 1)
        jobs = [(p, group, gi) for gi, group in enumerate(self.param_groups) for p in group["params"] if p.grad is not None]
        # largest first, and matrices of one shape (and group) together: they are orthogonalised as one
        # batch, n to a rank (as many as fit in BATCH numbers, at least one), a chunk of n·world at a
        # time, slice k by rank k and broadcast from there. Every rank has the same list in the same
        # order (a stable sort); same-shape slices balance the ranks' work; and at most two chunks of
        # whole (gathered) matrices are held at a time, which keeps FSDP2's memory sharded
        def key(job):
            p, _, gi = job
            return -ns_flops(*p.shape, heads(p)), tuple(p.shape), heads(p), gi
        jobs.sort(key=key)
        pending = []  # the previous chunk: its broadcasts travel while this chunk is orthogonalised
        for _, run in itertools.groupby(jobs, key):
            run = [(p, group) for p, group, _ in run]
            (rows, cols), H, group = run[0][0].shape, heads(run[0][0]), run[0][1]
            n = max(1, min(math.ceil(len(run) / world), BATCH // (rows * cols)))
            for c in range(0, len(run), n * world):
                chunk, mine = run[c:c + n * world], []
                for i, (p, _) in enumerate(chunk):  # one group: its momentum, Nesterov and steps
                    buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))  # sharded like p
                    buf.lerp_(p.grad, 1 - group["momentum"])
                    g = p.grad.lerp(buf, group["momentum"]) if group["nesterov"] else buf
                    g = g.full_tensor() if isinstance(g, DTensor) else g  # whole: orthogonalisation is not elementwise
                    if i // n == rank:
                        mine.append(g)
                updates = []  # slice k: (m, rows, cols), m <= n
                for k in range(0, len(chunk), n):
                    m = len(chunk[k:k + n])
                    if k // n == rank:  # (m, rows, cols) -> (m·H, rows/H, cols): each head block alone
                        u = orthogonalise(torch.stack(mine).view(m * H, -1, cols), group["ns_steps"], self.ns_dtype)
                        u = u.reshape(m, rows, cols).contiguous()  # a tall matrix's is a transposed view: not sendable
                    else:
                        u = torch.empty(m, rows, cols, dtype=self.ns_dtype, device=g.device)
                    updates.append(u)
                works = [dist.broadcast(u, k, async_op=True) for k, u in enumerate(updates)] if shared else []
                self._apply(*pending)
                pending = chunk, [u_i for u in updates for u_i in u], works
        self._apply(*pending)

    @staticmethod
    def _apply(chunk=(), updates=(), works=()):
        for w in works:
            w.wait()
        for (p, group), u in zip(chunk, updates):
            if isinstance(p, DTensor):  # this rank's shard of the whole update: a local slice, no traffic
                u = DTensor.from_local(u, p.device_mesh, [Replicate()], run_check=False).redistribute(
                    p.device_mesh, p.placements)
            lr, (rows, cols) = group["lr"], p.shape
            p.mul_(1 - lr * group["weight_decay"])
            p.add_(u, alpha=-lr * math.sqrt(max(1.0, rows / heads(p) / cols)))


def heads(p):
    # a weight stored as H stacked row blocks, each its own matrix (LRKV's B_k, B_v), or 1
    return getattr(p, "heads", 1)


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


def step_flops(cfg, tokens):
    """(forward + backward FLOPs of a training step of `tokens` tokens, Newton-Schulz FLOPs of one
    unshared Muon step) for a model config, from shapes alone (the model is built on the meta device)."""
    from flops import train_flops_per_token
    from model import GPT
    with torch.device("meta"):
        model = GPT(cfg)
    muon = optimizers(model, 0.02, 0.2, 0.004, 0.1, (0.9, 0.95), torch.float32)[0]
    ns = sum(ns_flops(*p.shape, heads(p)) for g in muon.param_groups for p in g["params"])
    return train_flops_per_token(cfg) * tokens, ns


if __name__ == "__main__":
    # torchrun --standalone --nproc_per_node=2 muon.py [preset] [batch]: the optimisers' share of a
    # training step (DDP over gloo) with Muon alone on every rank and shared; then the same from FLOPs
    # for each GPU preset on 8 GPUs, at the paper's global batch of 32,768 tokens
    import os
    from torch.nn.parallel import DistributedDataParallel as DDP
    from model import GPT, PRESETS, preset
    name, batch = (sys.argv[1:] + ["cpu"])[0], int((sys.argv[2:] + ["16"])[0])
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    world = dist.get_world_size() if dist.is_initialized() else 1
    torch.manual_seed(0)
    cfg = preset(name)
    model = GPT(cfg)
    run = DDP(model, forward_sync_buffers=False) if world > 1 else model
    opts = optimizers(model, 0.02, 0.2, 0.004, 0.1, (0.9, 0.95), torch.float32)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size))
    times = {False: [], True: []}  # share -> (forward + backward, optimiser) seconds
    for i, share in enumerate((False, True) * 7):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        run(x, x)[1].backward()
        t1 = time.perf_counter()
        opts[0].step(share=share)
        opts[1].step()
        model.zero_grad(set_to_none=True)
        if i >= 4:  # two warm-up steps of each
            times[share].append((t1 - t0, time.perf_counter() - t1))
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(f"{name}, {world} rank(s), {torch.get_num_threads()} thread(s) each, {batch}x{cfg.block_size} tokens a rank, "
              f"Newton-Schulz in fp32; medians of {len(times[True])} steps on rank 0")
        for share, ts in times.items():
            fb, opt = (sorted(t[j] for t in ts)[len(ts) // 2] for j in (0, 1))
            print(f"  Muon {'shared' if share else 'alone '}: forward+backward {1e3 * fb:7.1f} ms, optimisers "
                  f"{1e3 * opt:6.1f} ms, {100 * opt / (fb + opt):4.1f}% of the step")
        print("from FLOPs, 8 GPUs, 4,096 tokens each (Newton-Schulz at the training's FLOP rate):")
        for p in PRESETS:
            if p != "cpu":
                train, ns = step_flops(preset(p), 4096)
                print(f"  {p:8} forward+backward {train / 1e12:5.1f} TFLOP, Newton-Schulz {ns / 1e12:5.2f} TFLOP: "
                      f"{100 * ns / (train + ns):4.1f}% of the step alone, {100 * ns / 8 / (train + ns / 8):4.1f}% shared")
    if dist.is_initialized():
        dist.destroy_process_group()

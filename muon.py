"""
Muon (Jordan et al., 2024) for the hidden weight matrices, AdamW for the rest: the paper's split.
Muon takes momentum, then orthogonalises the update by a Newton-Schulz iteration. The same
algorithm and defaults as torch.optim.Muon (equal to it in bf16, tested), with three additions:

- ns_dtype: torch runs Newton-Schulz in bf16, the paper's choice and fast on GPUs. A CPU without
  bf16 instructions runs bf16 matmuls far slower than fp32, so there we run it in fp32.
- heads: the weights of a parameter group with heads = H are block-diagonal maps stored as H
  blocks stacked along their rows (LRKV's B_k: head h's latent R_h -> head h's key residual only;
  a design names such weights in its class's `per_head`), orthogonalised block by block. The
  polar factor of a block-diagonal matrix is the block-diagonal of its blocks' polar factors, so
  this is Muon applied to the map the model uses; orthogonalising the stack as one (H·d_h, r)
  matrix would mix heads and scale the step by √(H·d_h/r) instead of √(d_h/r).
- DistMuon: the same step shared across ranks (DDP's replicated gradients or FSDP2's shards),
  each matrix orthogonalised once, by one rank, instead of once on every rank.
"""
import itertools
import math

import torch
import torch.distributed as dist

# the paper's optimiser: Muon's lr for hidden matrices, AdamW's for the embedding and the head
MATRIX_LR, EMBED_LR, HEAD_LR, WEIGHT_DECAY, BETAS = 0.02, 0.2, 0.004, 0.1, (0.9, 0.95)
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
    """For 2-D weights. A parameter group with heads = H holds stacks of H row blocks, each
    orthogonalised alone. lr is scaled by √max(1, rows/cols) of each (block) matrix."""

    def __init__(self, params, lr=MATRIX_LR, weight_decay=WEIGHT_DECAY, momentum=0.95, nesterov=True,
                 ns_steps=5, ns_dtype=torch.bfloat16, heads=1):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, ns_steps=ns_steps, heads=heads))
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):  # closure: the Optimizer interface (DCP calls step to make the state)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    g = self.momentum(p, group)
                    self.update(p, group, self.orthogonalise(g[None], group["heads"], group)[0])

    def momentum(self, p, group):
        # the momentum buffer, then Nesterov's look-ahead: what is orthogonalised
        buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
        buf.lerp_(p.grad, 1 - group["momentum"])
        return p.grad.lerp(buf, group["momentum"]) if group["nesterov"] else buf

    def orthogonalise(self, g, H, group):
        # g (n, rows, cols) -> (n·H, rows/H, cols): each head block alone -> back to (n, rows, cols)
        n, rows, cols = g.shape
        return orthogonalise(g.reshape(n * H, rows // H, cols), group["ns_steps"], self.ns_dtype).reshape(n, rows, cols)

    @staticmethod
    def update(p, group, u):
        # decoupled weight decay, then the step, scaled to the (block) matrix's shape
        lr, (rows, cols) = group["lr"], p.shape
        p.mul_(1 - lr * group["weight_decay"])
        p.add_(u, alpha=-lr * math.sqrt(max(1.0, rows / group["heads"] / cols)))


class DistMuon(Muon):
    """Muon's step shared across the ranks of torch.distributed: each matrix has one owner rank,
    which orthogonalises it exactly as Muon would and broadcasts the update, so the step is
    bit-identical to Muon's on one process. Under FSDP2 a parameter is a DTensor sharded on dim 0:
    one all_to_all sends each rank's shards of the momentum to the matrices' owners only, and
    another sends each rank its shard of every update, so no rank gathers a matrix it does not own.

    The plan: matrices largest first, those of one shape (and group) together, dealt out n to a
    rank (as many as fit in BATCH numbers) and orthogonalised as one batch, a chunk of n·world at
    a time. Every rank makes the same plan (a stable sort); while one chunk's broadcasts travel,
    the next is orthogonalised; at most two chunks of whole matrices are held, which keeps FSDP2's
    memory sharded."""

    BATCH = 2**22  # numbers a rank orthogonalises in one batch

    @torch.no_grad()
    def step(self, closure=None):
        from torch.distributed.tensor import DTensor  # here: only several ranks pay its import
        rank, world = dist.get_rank(), dist.get_world_size()
        jobs = [(p, group, gi) for gi, group in enumerate(self.param_groups) for p in group["params"] if p.grad is not None]

        def key(job):
            p, group, gi = job
            return -ns_flops(*p.shape, group["heads"]), tuple(p.shape), gi
        jobs.sort(key=key)
        pending = ()  # the previous chunk: (its parameters, their updates, the broadcasts in flight)
        for _, run in itertools.groupby(jobs, key):
            run = [(p, group) for p, group, _ in run]
            (rows, cols), group = run[0][0].shape, run[0][1]
            H = group["heads"]
            n = max(1, min(math.ceil(len(run) / world), self.BATCH // (rows * cols)))
            for c in range(0, len(run), n * world):
                chunk = run[c:c + n * world]
                gs = [self.momentum(p, group) for p, _ in chunk]  # every rank: the momentum of its shard
                if isinstance(gs[0], DTensor):  # FSDP2: to the owners, orthogonalised, back as shards
                    mine = self.to_owners(gs, n, rank, world)
                    mine = self.orthogonalise(mine, H, group) if len(mine) else mine.to(self.ns_dtype)  # owning none
                    shards, work = self.from_owner(mine, len(chunk), n, rank, world)
                    self.apply(*pending)
                    pending = chunk, shards, [work]
                    continue
                updates = []  # slice k, (m, rows, cols) with m <= n, is rank k's to orthogonalise
                for k in range(0, len(chunk), n):
                    if k // n == rank:
                        u = self.orthogonalise(torch.stack(gs[k:k + n]), H, group).contiguous()  # sendable
                    else:
                        u = torch.empty(len(chunk[k:k + n]), rows, cols, dtype=self.ns_dtype, device=gs[0].device)
                    updates.append(u)
                works = [dist.broadcast(u, k, async_op=True) for k, u in enumerate(updates)]
                self.apply(*pending)
                pending = chunk, [u_i for u in updates for u_i in u], works
        self.apply(*pending)

    @staticmethod
    def counts(rows, world, m, n):
        # the rows of each rank's dim-0 shard (torch.chunk's split, as FSDP2's: some may be 0), and
        # how many of a chunk's m matrices each rank owns (n each, in order)
        size = -(-rows // world)
        return [max(0, min(size, rows - k * size)) for k in range(world)], [max(0, min(n, m - k * n)) for k in range(world)]

    def to_owners(self, gs, n, rank, world):
        """The momenta of a chunk of same-shape DTensor matrices, gs[j] owned by rank j // n: each
        rank sends its shard of each to its owner, zero-padded to one size -> this rank's matrices
        whole, (m, rows, cols)."""
        rows, cols = gs[0].shape
        part, owned = self.counts(rows, world, len(gs), n)
        send = gs[0].to_local().new_zeros(len(gs), part[0], cols)  # (m, size, cols)
        for j, g in enumerate(gs):
            send[j, :part[rank]] = g.to_local()
        recv = send.new_empty(world * owned[rank], part[0], cols)  # (world · mine, size, cols)
        dist.all_to_all_single(recv, send, [owned[rank]] * world, owned)
        recv = recv.view(world, owned[rank], part[0], cols)
        return torch.cat([recv[k, :, :part[k]] for k in range(world)], dim=1)  # (mine, rows, cols)

    def from_owner(self, mine, m, n, rank, world):
        """The owner's updates (mine, rows, cols) cut into every rank's shard, and this rank's shard
        of each of the chunk's m updates -> (their list, the all_to_all's work, in flight)."""
        _, rows, cols = mine.shape
        part, owned = self.counts(rows, world, m, n)
        send = mine.new_zeros(world, len(mine), part[0], cols)  # (world, mine, size, cols)
        for k, start in enumerate(range(0, rows, part[0])):
            send[k, :, :part[k]] = mine[:, start:start + part[k]]
        recv = mine.new_empty(m, part[0], cols)
        work = dist.all_to_all_single(recv, send.view(-1, part[0], cols), owned, [len(mine)] * world, async_op=True)
        return [u[:part[rank]] for u in recv], work

    def apply(self, chunk=(), updates=(), works=()):
        from torch.distributed.tensor import DTensor
        for w in works:
            w.wait()
        for (p, group), u in zip(chunk, updates):
            if isinstance(p, DTensor):  # this rank's shard of the update, as a DTensor of p's layout
                u = DTensor.from_local(u, p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride())
            self.update(p, group, u)


def newton_schulz_dtype(choice, gpu):
    # --muon_dtype: auto is bf16 on GPUs with native bf16 (the paper's; gpu says so) and fp32 elsewhere
    if choice not in ("auto", "bf16", "fp32"):
        raise ValueError(f"--muon_dtype={choice!r} is unknown; use auto, bf16 or fp32")
    return torch.bfloat16 if choice == "bf16" or (choice == "auto" and gpu) else torch.float32


def optimizers(model, ns_dtype, matrix_lr=MATRIX_LR, embed_lr=EMBED_LR, head_lr=HEAD_LR,
               weight_decay=WEIGHT_DECAY, betas=BETAS, shared=None):
    """The paper's split: Muon for every hidden weight matrix, each the map it is (K and V are
    separate weights in every design; the weights a design's class names in `per_head`, LRKV's
    block-diagonal B_k and B_v, a head at a time, in a group of their own); AdamW for the embedding,
    the head and any gain (MLA's kv_norm weight with mla_deepseek). Neither the embedding nor a
    gain is decayed: decoupled decay at lr 0.2 would shrink the embedding 2% a step. shared
    (default: under torch.distributed with several ranks) picks DistMuon."""
    if shared is None:
        shared = dist.is_initialized() and dist.get_world_size() > 1
    hidden = [p for n, p in model.named_parameters() if n.startswith("h.")]
    # after fully_shard too; a later layer of a kv_share group has none of its class's own
    stacked = [getattr(m, n) for m in model.modules() for n in getattr(m, "per_head", ()) if hasattr(m, n)]
    matrices = [p for p in hidden if p.ndim == 2 and all(p is not s for s in stacked)]
    gains = [p for p in hidden if p.ndim < 2]
    groups = [dict(params=matrices)] + ([dict(params=stacked, heads=model.cfg.n_head)] if stacked else [])
    return [(DistMuon if shared else Muon)(groups, lr=matrix_lr, weight_decay=weight_decay, ns_dtype=ns_dtype),
            torch.optim.AdamW([dict(params=[model.wte.weight], lr=embed_lr, weight_decay=0.0),
                               dict(params=[model.lm_head.weight], lr=head_lr),
                               dict(params=gains, lr=head_lr, weight_decay=0.0)],
                              betas=betas, weight_decay=weight_decay)]


def adamw_only(model, lr, weight_decay=WEIGHT_DECAY, betas=BETAS):
    # --optimizer=adamw, a plain baseline: AdamW for everything, decay on every matrix but the embedding
    decay = [p for n, p in model.named_parameters() if p.ndim == 2 and n != "wte.weight"]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or n == "wte.weight"]
    return [torch.optim.AdamW([dict(params=decay), dict(params=no_decay, weight_decay=0.0)],
                              lr=lr, betas=betas, weight_decay=weight_decay)]


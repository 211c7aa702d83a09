"""
Muon (Jordan et al., 2024): momentum, then the update is orthogonalised by a Newton-Schulz
iteration. The same algorithm and defaults as torch.optim.Muon (equal to it in bf16, tested), with
two things it lacks:

- ns_dtype: torch runs Newton-Schulz in bf16, the paper's choice and fast on GPUs. A CPU without
  bf16 instructions (AVX2 only) runs a bf16 matmul ~30x slower than fp32, which made the optimiser
  two thirds of a CPU training step; there we run it in fp32.
- heads: a weight that is a block-diagonal map stored as H blocks stacked along its rows (LRKV's
  B_k: head h's latent R_h -> head h's key residual only) is orthogonalised block by block. The
  polar factor of a block-diagonal matrix is the block-diagonal of its blocks' polar factors, so
  this is Muon applied to the map the model actually uses; orthogonalising the stack as one
  (H·d_h, r) matrix would mix heads and scale the step by √(H·d_h/r) instead of √(d_h/r).
"""
import math

import torch

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


class Muon(torch.optim.Optimizer):
    """For 2-D weights. A parameter with an attribute `heads` = H is H stacked row blocks,
    orthogonalised one by one. lr is scaled by √max(1, rows/cols) of each (block) matrix."""

    def __init__(self, params, lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_steps=5, ns_dtype=torch.bfloat16):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, ns_steps=ns_steps))
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, mu = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.lerp_(p.grad, 1 - mu)
                g = p.grad.lerp(buf, mu) if group["nesterov"] else buf
                H = getattr(p, "heads", 1)
                g = g.view(H, p.size(0) // H, p.size(1))  # (H, rows per block, cols)
                update = orthogonalise(g, group["ns_steps"], self.ns_dtype).reshape(p.shape)
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update, alpha=-lr * math.sqrt(max(1.0, g.size(1) / g.size(2))))


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

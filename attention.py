"""
The five KV-cache designs, one class each, side by side.

Every class takes x (B, T, C) and returns (B, T, C). H query heads of size d_h always;
what differs is how keys and values are made and what a KV cache must keep per token:

    mha / gqa / mqa  GroupedQueryAttention  n_kv_head full K/V heads          2·n_kv·d_h
                     with k_eq_v            one tensor, keys made at reading  n_kv·d_h
    mla              MLA                    latent c_kv and one RoPE key k_pe  d_c + d_r
    lrkv             LRKV                   shared K/V, rank-r latents, norms  2·d_h + 2·H·r + H

forward(x, cos, sin, cache=None, pos=None, mask=None, kv=None) -> (y, kv), cos/sin the RoPE tables
of every position, kv what the layer attends over (its keys and values, or its cache): kv_share
layers in a group read their first layer's, passed in, and have no K/V weights of their own.
No cache: training, tokens at 0..T-1. A KVCache and pos None: a prefill, the training path, and the
cache stores what the design keeps. pos, a (T,) tensor: decoding, the tokens written there attend
over the whole cache under a mask, so one compiled step serves every position. Only a left-padded
batch (GPT.forward) brings a mask (B, 1, T, positions) and each row's tables (B, positions, d/2).
Each class reads in that order: its training path (the paper's equations), then its decode path.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


EPS = torch.finfo(torch.float32).eps


def rms_inv(x):
    # 1 / rms(x) over the last dim, in fp32 -> (..., 1)
    mean_sq = torch.linalg.vector_norm(x.float(), dim=-1, keepdim=True).square() / x.size(-1)
    return torch.rsqrt(mean_sq + EPS)


class RMSNorm(torch.autograd.Function):
    """Parameter-free RMSNorm over the last dim (nanochat's), y = x / rms(x), its gradient written
    out, dx = (g - y·mean(g·y)) / rms(x): one pass, where F.rms_norm's CPU backward is many ops.
    In fp32 (as CUDA's autocast runs rms_norm), returned in x's dtype: cached keys stay bf16."""

    @staticmethod
    def forward(ctx, x):
        inv = rms_inv(x)  # (..., 1)
        y = x.float() * inv
        if y.dtype != x.dtype:  # skip a no-op .type_as(x): torch 2.11's compile zeroes its grad
            y = y.to(x.dtype)
        ctx.save_for_backward(y, inv)
        return y

    @staticmethod
    def backward(ctx, g):
        y, inv = ctx.saved_tensors
        g32, y32 = g.float(), y.float()
        mean_gy = torch.linalg.vecdot(g32, y32).unsqueeze(-1) / y.size(-1)  # (..., 1)
        return torch.addcmul(g32, y32, mean_gy, value=-1).mul_(inv).type_as(g)


norm = RMSNorm.apply


def rope(x, cos, sin):
    # x (B, T, H, D), cos/sin (T, D/2) or each row's (B, T, D/2) -> RoPE(x): the halves [x1, x2] of
    # each head turned by their position's angles, [x1 cos + x2 sin, x2 cos - x1 sin] =
    # x·[cos, cos] + [x2, x1]·[sin, -sin]: three whole-width passes, none on a strided half
    cos2 = torch.cat([cos, cos], dim=-1).unsqueeze(-2).to(x.dtype)  # (T, 1, D) or (B, T, 1, D)
    sin2 = torch.cat([sin, -sin], dim=-1).unsqueeze(-2).to(x.dtype)
    return torch.addcmul(x * cos2, x.roll(x.size(-1) // 2, dims=-1), sin2)


def band(T, window, device=None):
    # (T, T): query i sees keys i - window < j <= i, the last `window` positions (a sliding window)
    i = torch.arange(T, device=device)
    return (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)


def padded(q, k, pad, window=0):
    # (B, 1, len(q), len(k)): which key positions k each query position q sees in a batch whose
    # row b starts with pad[b] pads: the causal ones (a window's last `window`) that are no pad; a
    # pad sees itself, so that no row of the softmax is empty (a NaN)
    q, k = q[:, None], k[None, :]
    see = (k <= q) & (k > q - window) if window else k <= q  # (len(q), len(k))
    return (see & ((k >= pad[:, None, None]) | (k == q)))[:, None]


def attend(q, k, v, scale=None, mask=None, window=0):
    # q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv) with Hkv dividing H -> (B, H, Tq, Dv)
    (B, H, Tq, D), Hkv = q.shape, k.size(1)
    if mask is None:  # training, or a prefill: causal, and the fused kernels take GQA
        if window and Tq > window:  # a banded mask (docs/performance.md: faster than flex here)
            return F.scaled_dot_product_attention(q, k, v, band(Tq, window, q.device), scale=scale,
                                                  enable_gqa=Hkv != H)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                              enable_gqa=Hkv != H)
    # mask (Tq, Tk), or a padded batch's (B, 1, Tq, Tk): the slots each token sees. Two matmuls, as
    # LRKV's decode: a fused kernel gives batch-1 decode one GPU thread block per K/V head (one for
    # MQA and MLA), each reading the whole cache; a matmul spreads over it. The G = H/Hkv query
    # heads of a group read one K/V head: fold them into the query length.
    G = H // Hkv
    q = q.reshape(B, Hkv, G * Tq, D)
    scale = scale if scale is not None else 1 / math.sqrt(D)
    att = (q @ k.transpose(-2, -1)) * scale  # (B, Hkv, G·Tq, Tk)
    att = att.masked_fill(~torch.cat([mask] * G, dim=-2), float("-inf")).softmax(dim=-1)
    return (att @ v).view(B, H, Tq, -1)  # (B, H, Tq, Dv)


class KVCache:
    """One layer's cache: zeroed head-major buffers (B, heads, slots, d) of what a design keeps per
    token (a slot not yet written is masked, and must not hold a NaN). Head-major: each head's
    tokens are one block, which decode's batched matmuls read in place ((B, slots, heads, d) was
    copied whole every step). max_len tokens, or with a sliding window a ring of slots =
    min(max_len, window), position p in slot p % slots. write() stores the new tokens, each
    (B, heads, T, d), and returns every buffer whole with the mask (T, slots) of what each may
    attend to (visible); a prefill's mask as given (None: fused causal). n counts the tokens the
    plain calls of GPT.forward cached; a call with positions (compiled decode) leaves it alone."""

    def __init__(self, max_len, window=0):
        self.max_len, self.window, self.n, self.buf = max_len, window, 0, {}
        self.slots = min(max_len, window) if window else max_len

    def held(self, last):
        # (slots,): the position each slot holds once position `last` (a (1,) tensor) is written,
        # the latest q <= last with q = slot mod slots; negative: never written
        j = torch.arange(self.slots, device=last.device)
        return last - (last - j).remainder(self.slots)

    def write(self, pos, mask=None, **new):
        for name, x in new.items():
            if name not in self.buf:
                self.buf[name] = x.new_zeros(*x.shape[:2], self.slots, x.size(3))
                # one address for the cache's life: a decode step compiled as a CUDA graph
                # (reduce-overhead) writes it in place, not copied in and out
                if not torch.compiler.is_compiling():
                    torch._dynamo.mark_static_address(self.buf[name])
            if pos is None and x.size(2) <= self.slots:  # a prefill at positions 0..T-1
                self.buf[name][:, :, :x.size(2)] = x
            elif pos is None:  # a prefill longer than the ring: its last `slots` tokens, wrapped
                at = torch.arange(x.size(2) - self.slots, x.size(2), device=x.device) % self.slots
                self.buf[name].index_copy_(2, at, x[:, :, -self.slots:])
            else:
                self.buf[name].index_copy_(2, pos % self.slots, x)
        return self.buf, mask if pos is None else self.visible(pos, mask)

    def visible(self, pos, mask=None):
        # (T, slots): the slots each new token at pos may attend to, those holding a position q with
        # p - window < q <= p; or (B, 1, T, slots), where a padded batch's mask says which
        # positions (B, 1, T, positions) each row's tokens see
        q, p = self.held(pos[-1:]), pos[:, None]  # (slots,), (T, 1)
        see = (q >= 0) & (q <= p)
        see = see & (q > p - self.window) if self.window else see
        return see if mask is None else see & mask[..., q.clamp(min=0)]

    def nbytes(self):
        return sum(b.numel() * b.element_size() for b in self.buf.values())


class GroupedQueryAttention(nn.Module):
    """MHA (n_kv_head = H), GQA (a divisor of H) and MQA (1). Eq. 1 of the paper:
    O_h = softmax(Q_h K_g(h)ᵀ / √d_h) V_g(h), query heads of group g sharing one K/V head.
    k_eq_v: one projection c_kv makes both, V = X W_kv and K = QK-norm(RoPE(X W_kv)); the cache
    holds X W_kv alone, Hkv·d_h a token, and decode turns it into keys where it reads them."""

    rope = "head_dim"  # the GPTConfig field of the width RoPE rotates: GPT's tables are so wide
    no_k_eq_v = no_kv_share = ""  # why cfg.k_eq_v, cfg.kv_share cannot be built; "": they can

    def __init__(self, cfg, makes_kv=True):
        super().__init__()
        self.H, self.Hkv, self.d_h, self.window = cfg.n_head, cfg.kv_heads, cfg.head_dim, cfg.window
        self.scale = cfg.attn_scale / math.sqrt(self.d_h)  # QK-normed: |logit| ≤ attn_scale·√d_h
        self.k_eq_v, C, kv = cfg.k_eq_v, cfg.n_embd, self.Hkv * self.d_h
        self.c_q = nn.Linear(C, self.H * self.d_h, bias=False)
        if makes_kv and cfg.k_eq_v:
            self.c_kv = nn.Linear(C, kv, bias=False)
        elif makes_kv:  # (a later layer of a kv_share group reads its first layer's K and V)
            self.c_k = nn.Linear(C, kv, bias=False)
            self.c_v = nn.Linear(C, kv, bias=False)
        self.c_proj = nn.Linear(self.H * self.d_h, C, bias=False)

    def forward(self, x, cos, sin, cache=None, pos=None, mask=None, kv=None):
        # kv: (k, v, mask) as attend reads them; given, this layer makes none (kv_share)
        B, T, C = x.size()
        at = slice(T) if pos is None else pos  # the new tokens' angles
        cos_t, sin_t = cos[..., at, :], sin[..., at, :]
        q = self.c_q(x).view(B, T, self.H, self.d_h)  # (B, T, H, d_h)
        if kv is None:
            kv = self.keys_values(x, cos, sin, cos_t, sin_t, cache, pos, mask)
        q = norm(rope(q, cos_t, sin_t)).transpose(1, 2)  # RoPE then QK-norm: (B, H, T, d_h)
        y = attend(q, kv[0], kv[1], self.scale, kv[2], self.window)  # (B, H, T, d_h)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, self.H * self.d_h)), kv

    def keys_values(self, x, cos, sin, cos_t, sin_t, cache, pos, mask):
        # (k, v, mask): the new tokens' (B, Hkv, T, d_h), or a decode step's whole cache
        B, T, C = x.size()
        if self.k_eq_v:  # one tensor, the value and the key before RoPE and QK-norm
            k = v = self.c_kv(x).view(B, T, self.Hkv, self.d_h)  # (B, T, Hkv, d_h)
        else:
            k, v = (f(x).view(B, T, self.Hkv, self.d_h) for f in (self.c_k, self.c_v))
        k, v = norm(rope(k, cos_t, sin_t)).transpose(1, 2), v.transpose(1, 2)  # (B, Hkv, T, d_h)
        if cache is not None:  # the rotated, normalised keys and the values: 2·Hkv·d_h a token
            c, mask = cache.write(pos, mask, **(dict(kv=v) if self.k_eq_v else dict(k=k, v=v)))
            if pos is not None and self.k_eq_v:  # K=V's Hkv·d_h: keys made at each slot's position
                held = cache.held(pos[-1:]).clamp(min=0)
                v = c["kv"]  # (B, Hkv, max_len, d_h), read in place; its keys made head-major too
                cs = (t[..., held, :].unsqueeze(-3) for t in (cos, sin))  # (B, 1, max_len, d_h/2)
                k = norm(rope(v.unsqueeze(-2), *cs)).squeeze(-2)  # (B, Hkv, max_len, d_h)
            elif pos is not None:
                k, v = c["k"], c["v"]  # (B, Hkv, max_len, d_h), read in place
        return k, v, mask


class MLA(nn.Module):
    """Multi-head latent attention (DeepSeek-V2 §2.1, decoupled RoPE), in DeepSeek's names:
    c_kv = kv_norm(x W_dkv) and k_pe = RoPE(x W_kr), both shared by all heads;
    k_nope_h = c_kv W_uk_h, v_h = c_kv W_uv_h;
    q_h = [q_nope_h, RoPE(q_pe_h)], k_h = [k_nope_h, k_pe].
    Widths: equal (d_n = d_h - d_r, so q, k and v are all d_h wide) or DeepSeek's (cfg.mla_deepseek:
    d_n = d_h, q/k d_h + d_r wide, v d_h, and a learnable kv_norm weight). No QK-norm: it would
    block absorption, so cfg.attn_scale does not apply and the scale is 1/√(d_n + d_r).
    Training and prefill build full K and V (fused causal attention). The cache holds c_kv and k_pe,
    d_c + d_r per token; decoding absorbs W_uk into the query and W_uv after attention (decode)."""

    rope = "mla_rope_dim"  # only the decoupled d_r-wide part rotates
    no_k_eq_v = ("its one latent c_kv already makes both keys and values (decode reads c_kv as "
                 "the value): K=V adds nothing to share")
    no_kv_share = ""

    def __init__(self, cfg, makes_kv=True):
        super().__init__()
        self.H, self.d_c, self.d_r = cfg.n_head, cfg.mla_kv_rank, cfg.mla_rope_dim
        self.d_v, self.window = cfg.head_dim, cfg.window
        self.d_n = cfg.head_dim if cfg.mla_deepseek else cfg.head_dim - self.d_r
        C, H, dq = cfg.n_embd, self.H, self.d_n + self.d_r
        if cfg.mla_q_rank:  # optional query compression: x -> c_q (q_rank) -> q
            self.W_dq = nn.Linear(C, cfg.mla_q_rank, bias=False)
            self.W_uq = nn.Linear(cfg.mla_q_rank, H * dq, bias=False)
        else:
            self.c_q = nn.Linear(C, H * dq, bias=False)
        if makes_kv:  # (a later layer of a kv_share group reads its first layer's latent)
            self.W_dkv = nn.Linear(C, self.d_c, bias=False)  # x -> c_kv, the K and V latent
            self.W_kr = nn.Linear(C, self.d_r, bias=False)  # x -> k_pe, the shared RoPE key
            self.W_uk = nn.Linear(self.d_c, H * self.d_n, bias=False)  # c_kv -> every head's k_nope
            self.W_uv = nn.Linear(self.d_c, H * self.d_v, bias=False)  # c_kv -> every head's v
            self.kv_norm = nn.RMSNorm(self.d_c, elementwise_affine=cfg.mla_deepseek)
        self.c_proj = nn.Linear(H * self.d_v, C, bias=False)
        self.scale = 1.0 / math.sqrt(dq)

    def forward(self, x, cos, sin, cache=None, pos=None, mask=None, kv=None):
        # kv: full keys and values (k, v, mask), or a decode step's cache (ckv_pe, mask, the layer
        # whose W_uk and W_uv read it); given, this layer makes none (kv_share)
        B, T, C = x.size()
        at = slice(T) if pos is None else pos  # the new tokens' angles
        cos, sin = cos[..., at, :], sin[..., at, :]
        q = self.W_uq(norm(self.W_dq(x))) if hasattr(self, "W_dq") else self.c_q(x)
        q_nope, q_pe = q.view(B, T, self.H, -1).split([self.d_n, self.d_r], dim=-1)
        kv = self.latent(x, cos, sin, cache, pos, mask) if kv is None else kv
        q_pe = rope(q_pe, cos, sin)  # (B, T, H, d_r)
        if pos is not None:
            return self.decode(q_nope, q_pe, *kv), kv
        q = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)  # (B, H, T, d_n + d_r)
        y = attend(q, kv[0], kv[1], self.scale, kv[2], self.window)  # (B, H, T, d_v)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, self.H * self.d_v)), kv

    def latent(self, x, cos, sin, cache, pos, mask):
        # x (B, T, C) -> c_kv (B, T, d_c) and k_pe (B, T, d_r), cached as d_c + d_r a token; then
        # full keys and values, up-projected (naive: fused causal attention), or the cache
        B, T, C = x.size()
        H, d_n, d_r = self.H, self.d_n, self.d_r
        c_kv = self.W_dkv(x)
        c_kv = self.kv_norm(c_kv).type_as(c_kv)  # its dtype, as norm()
        k_pe = rope(self.W_kr(x).unsqueeze(2), cos, sin).squeeze(2)  # one RoPE key for all heads
        if cache is not None:  # what a token leaves in the cache
            ckv_pe = torch.cat([c_kv, k_pe], dim=-1).unsqueeze(1)  # (B, 1, T, d_c + d_r)
            c, mask = cache.write(pos, mask, ckv_pe=ckv_pe)
            if pos is not None:
                return c["ckv_pe"], mask, self
        k_nope = self.W_uk(c_kv).view(B, T, H, d_n)  # (B, T, H, d_n)
        v = self.W_uv(c_kv).view(B, T, H, self.d_v)  # (B, T, H, d_v)
        k = torch.cat([k_nope, k_pe.unsqueeze(2).expand(B, T, H, d_r)], -1)  # (B, T, H, d_n + d_r)
        return k.transpose(1, 2), v.transpose(1, 2), mask  # (B, H, T, d)

    def decode(self, q_nope, q_pe, kv, mask, src):
        """Absorbed, from the cache alone: q_nope·k_nope = q_nope·(W_uk_h c) = (W_uk_hᵀ q_nope)·c,
        so attention runs in the latent space as MQA with one (d_c + d_r)-wide key [c_kv, k_pe] and
        one d_c-wide value c_kv, and W_uv is applied after attention. It never builds K or V.
        kv (B, 1, max_len, d_c + d_r) the cache; src the layer that made it (W_uk, W_uv)."""
        B, T, H, d_n = q_nope.shape
        d_c, d_v = self.d_c, self.d_v
        W_uk = src.W_uk.weight.view(H, d_n, d_c)  # (H, d_n, d_c)
        W_uv = src.W_uv.weight.view(H, d_v, d_c)  # (H, d_v, d_c)
        q_c = torch.einsum("bthn,hnc->bthc", q_nope, W_uk)  # (B, T, H, d_c)
        q = torch.cat([q_c, q_pe], dim=-1).transpose(1, 2)  # (B, H, T, d_c + d_r)
        # the key is [c_kv, k_pe]; its first d_c, c_kv, is the value
        y = attend(q, kv, kv[..., :d_c], self.scale, mask)  # (B, H, T, d_c): weighted latents
        y = torch.einsum("bhtc,hvc->bthv", y, W_uv)  # (B, T, H, d_v)
        return self.c_proj(y.reshape(B, T, H * d_v))


class LRKV(nn.Module):
    """Low-rank key-value attention (arXiv 2601.11471 §3). Per layer a shared K/V head W_s and
    per head rank-r residuals: K_h = X W_s^K + (X U_h^K) B_h^Kᵀ (Eq. 2), V_h likewise (Eq. 3).
    Training materialises full K_h, V_h, then RoPE and QK-norm as MHA. The cache holds X W_s^K
    (rotated), X W_s^V, the latents R_h = X U_h and each head's key norm: 2·d_h + 2·H·r + H (the
    paper counts 2·d_h + 2·H·r; the H norms save decode from rebuilding every key).
    lrkv_factored (beyond the paper): RoPE on the shared key only, K_h = RoPE(K_s) + R_h B_hᵀ, so
    q·K_h = q·RoPE(K_s) + (q B_h)·R_h exactly (the paper's Eq. 6, made true): decode absorbs B_h
    into the query and reads only the small cache, as MLA does with its decoupled k_pe.
    K and V are separate weights, as in MHA; B_k, B_v stack the per-head B_h, (H·d_h, r), and are
    block-diagonal maps (head h's latent to head h's residual only): Muon treats them per head."""

    per_head = ("B_k", "B_v")  # stacks of H matrices: Muon orthogonalises each alone (muon.py)
    rope = "head_dim"
    no_k_eq_v = ("its decode reads the shared key rotated and the value not, from two tensors; "
                 "one would be rotated at every read, which is not built")
    no_kv_share = ""

    def __init__(self, cfg, makes_kv=True):
        super().__init__()
        self.H, self.d_h, self.r = cfg.n_head, cfg.head_dim, cfg.lrkv_rank
        self.factored, self.window, self.makes_kv = cfg.lrkv_factored, cfg.window, makes_kv
        C, H, r, d_h = cfg.n_embd, self.H, self.r, self.d_h
        self.scale = cfg.attn_scale / math.sqrt(d_h)  # as MHA: logits bounded by attn_scale·√d_h
        self.c_q = nn.Linear(C, H * d_h, bias=False)  # queries stay full rank per head
        if makes_kv:  # (a later layer of a kv_share group reads its first layer's keys and values)
            self.W_sk = nn.Linear(C, d_h, bias=False)  # W_s^K, shared by all heads
            self.W_sv = nn.Linear(C, d_h, bias=False)  # W_s^V
            self.U_k = nn.Linear(C, H * r, bias=False)  # [U_1^K .. U_H^K]
            self.U_v = nn.Linear(C, H * r, bias=False)  # [U_1^V .. U_H^V]
            self.B_k = nn.Parameter(torch.empty(H * d_h, r))  # [B_1^K; ..; B_H^K]
            self.B_v = nn.Parameter(torch.empty(H * d_h, r))
        self.c_proj = nn.Linear(H * d_h, C, bias=False)

    @torch.no_grad()
    def init_residuals(self, ratio=0.1):
        # paper §3: U, B small random, so ‖U_h B_hᵀ‖_F ≈ 0.1·‖W_s‖_F for each head, K and V apart
        if not self.makes_kv:  # a later layer of a kv_share group: no K/V weights of its own
            return
        H, r, d_h = self.H, self.r, self.d_h
        for W_s, U, B in ((self.W_sk, self.U_k, self.B_k), (self.W_sv, self.U_v, self.B_v)):
            U, B = U.weight.view(H, r, -1), B.view(H, d_h, r)  # (H, r, C), (H, d_h, r)
            nn.init.normal_(U, std=1 / math.sqrt(r))
            nn.init.normal_(B, std=1 / math.sqrt(r))
            UB = B @ U  # (H, d_h, C): each head's (U_h B_hᵀ)ᵀ
            # (H,): the scale each head needs, split over its two factors
            s = (ratio * W_s.weight.norm() / UB.flatten(1).norm(dim=1)).sqrt()
            U.mul_(s.view(H, 1, 1))
            B.mul_(s.view(H, 1, 1))

    def forward(self, x, cos, sin, cache=None, pos=None, mask=None, kv=None):
        # kv: full keys and values (k, v, mask), or a decode step's (cache, mask, its slots' cos
        # and sin, the layer whose B_h read it); given, this layer makes none (kv_share)
        B, T, C = x.size()
        H, d_h = self.H, self.d_h
        at = slice(T) if pos is None else pos  # the new tokens' angles
        cos_t, sin_t = cos[..., at, :], sin[..., at, :]
        q = norm(rope(self.c_q(x).view(B, T, H, d_h), cos_t, sin_t))  # (B, T, H, d_h)
        if kv is None:
            kv = self.keys_values(x, cos, sin, cos_t, sin_t, cache, pos, mask)
        y = (self.decode(q, *kv) if pos is not None  # (B, H, T, d_h)
             else attend(q.transpose(1, 2), kv[0], kv[1], self.scale, kv[2], self.window))
        return self.c_proj(y.transpose(1, 2).reshape(B, T, H * d_h)), kv

    def keys_values(self, x, cos, sin, cos_t, sin_t, cache, pos, mask):
        B, T, C = x.size()
        H, r, d_h = self.H, self.r, self.d_h
        k_s, v_s = self.W_sk(x), self.W_sv(x)  # X W_s^K, X W_s^V: (B, T, d_h)
        r_k, r_v = self.U_k(x).view(B, T, H, r), self.U_v(x).view(B, T, H, r)  # R_h = X U_h
        B_k, B_v = self.B_k.view(H, d_h, r), self.B_v.view(H, d_h, r)  # (H, d_h, r): B_h
        cached = cache is not None  # factored keys and the cache take the shared key rotated alone
        k_s_rot = rope(k_s[:, :, None], cos_t, sin_t)[:, :, 0] if self.factored or cached else None
        # every head's key and value, (B, T, H, d_h): K_h = X W_s^K + R_h^K B_h^Kᵀ (Eq. 2;
        # factored: RoPE(X W_s^K) + R_h^K B_h^Kᵀ) and V_h = X W_s^V + R_h^V B_h^Vᵀ (Eq. 3).
        # Decoding needs only the new keys' norms: it reads the values' parts from the cache (Eq. 7)
        k_shared = (k_s_rot if self.factored else k_s).unsqueeze(2)
        k = k_shared + torch.einsum("bthr,hdr->bthd", r_k, B_k)
        v = v_s.unsqueeze(2) + torch.einsum("bthr,hdr->bthd", r_v, B_v) if pos is None else None
        if cached:
            # the small cache, 2·d_h + 2·H·r + H: the shared key already rotated (RoPE is linear),
            # the latents, and each head's 1/rms (QK-norm's divisor), so decode never rebuilds a key
            k_inv = rms_inv(k).type_as(k)  # (B, T, H, 1), as norm()
            c, mask = cache.write(pos, mask, k_s=k_s_rot.unsqueeze(1), v_s=v_s.unsqueeze(1),
                                  k_inv=k_inv.transpose(1, 2), r_k=r_k.transpose(1, 2),
                                  r_v=r_v.transpose(1, 2))  # (B, heads, T, d)
            if pos is not None:  # RoPE's tables at the positions the slots hold
                held = cache.held(pos[-1:]).clamp(min=0)
                return c, mask, cos[..., held, :], sin[..., held, :], self
        # training and prefill: RoPE and QK-norm of the full keys, then attention as MHA's
        k = norm(k if self.factored else rope(k, cos_t, sin_t))
        return k.transpose(1, 2), v.transpose(1, 2), mask  # (B, H, T, d_h)

    def decode(self, q, c, mask, cos, sin, src):
        """Exactly, from the small cache c alone: the scores q·K_h / rms(K_h) as (shared part +
        residual part) · k_inv, and the values by Eq. 7; no K_h or V_h of a cached token is rebuilt.
        q (B, T, H, d_h) normed and rotated; cos/sin the tables of each slot's position; src the
        layer that made the cache (its B_h) -> (B, H, T, d_h)."""
        B, T, H, d_h = q.shape
        B_k, B_v = src.B_k.view(H, d_h, self.r), src.B_v.view(H, d_h, self.r)
        Tk = c["k_s"].size(2)
        q = q.transpose(1, 2)  # (B, H, T, d_h)
        # q·RoPE_s(K_s), every head against the one shared key: the heads fold into the query
        # length, so the matmul reads the (B, 1, Tk, d_h) cache in place, not expanded H times
        att = (q.reshape(B, 1, H * T, d_h) @ c["k_s"].transpose(-2, -1)).view(B, H, T, Tk)
        if self.factored:  # the residual is not rotated: B_h moves into the query, Eq. 6
            qB = torch.einsum("bhtd,hdr->bhtr", q, B_k)  # (B, H, T, r): q B_h
            att = att + qB @ c["r_k"].transpose(-2, -1)  # (B, H, T, Tk): + (q B_h)·R_s
        else:
            att = att + self.rotated_residual_scores(q, B_k, cos, sin, c["r_k"])
        att = att * c["k_inv"].transpose(-2, -1) * self.scale  # the keys' QK-norm (B, H, 1, Tk)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        # values never need rebuilding, Eq. 7: a V_h = a V_s + (a R_h^V) B_h^Vᵀ
        y = (att.reshape(B, 1, H * T, Tk) @ c["v_s"]).view(B, H, T, d_h)  # a V_s, the shared head
        a_r = att @ c["r_v"]  # (B, H, T, r): a R_h^V
        return y + torch.einsum("bhtr,hdr->bhtd", a_r, B_v)  # (B, H, T, d_h)

    @staticmethod
    def rotated_residual_scores(q, B_k, cos, sin, r_k):
        """The paper's keys: RoPE rotates the whole key RoPE_s(K_s + R_s B_hᵀ) by its position s, so
        Eq. 6's shortcut RoPE(K_s) + RoPE(R) B_hᵀ is not the key. But a rotation moves to the query:
        q·RoPE_s(R_s B_hᵀ) = (B_hᵀ RoPE_s⁻¹ q)·R_s, and with halves q1, q2 and angles (cos_s, sin_s)
        per frequency f, RoPE_s⁻¹ q = [q1 cos_s - q2 sin_s, q1 sin_s + q2 cos_s], so
        (B_hᵀ RoPE_s⁻¹ q)_j = Σ_f cos_sf·(B1 q1 + B2 q2)_fj + sin_sf·(B2 q1 - B1 q2)_fj: one
        (B·H·T·r, d_h) x (d_h, Tk) product with the RoPE table, no (Tk, H, d_h) keys in memory.
        q (B, H, T, d_h), B_k (H, d_h, r), cos/sin (Tk, d_h/2) or each row's (B, Tk, d_h/2),
        r_k (B, H, Tk, r) -> (B, H, T, Tk)."""
        d = q.size(-1) // 2
        q1, q2 = q[..., None, :d], q[..., None, d:]  # (B, H, T, 1, d/2)
        Bt = B_k.transpose(1, 2)[:, None]  # (H, 1, r, d_h): B_hᵀ
        B1, B2 = Bt[..., :d], Bt[..., d:]  # (H, 1, r, d/2)
        P = torch.cat([q1 * B1 + q2 * B2, q1 * B2 - q2 * B1], dim=-1)  # (B, H, T, r, d_h)
        trig = torch.cat([cos, sin], dim=-1).to(q.dtype).mT  # (d_h, Tk), or (B, d_h, Tk) per row
        # (B, H, T, r, Tk): B_hᵀ RoPE_s⁻¹(q) at every s
        qB = P @ (trig if trig.dim() == 2 else trig[:, None, None])
        return torch.linalg.vecdot(qB, r_k.transpose(-2, -1).unsqueeze(2), dim=-2)  # (B, H, T, Tk)


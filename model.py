"""
A small GPT in the paper's (nanochat-style) base: RoPE, QK-norm, parameter-free RMSNorm,
ReLU² MLP, untied embedding and head, no biases. The attention is chosen by cfg.attn.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import attention
from attention import KVCache, norm
from loss import LinearCrossEntropy
from common import DESIGNS


@dataclass
class GPTConfig:
    attn: str = "mha"  # a row of common.DESIGNS: mha, gqa, mqa, mla, lrkv
    n_layer: int = 12
    n_head: int = 6  # query heads H
    n_embd: int = 768  # d_model; head_dim d_h = n_embd / n_head
    block_size: int = 2048  # context T
    vocab_size: int = 50304  # GPT-2's 50,257 padded to a multiple of 64
    n_kv_head: int = None  # GQA's K/V heads; None = a divisor of H near H/4 (MHA: H, MQA: 1)
    lrkv_rank: int = None  # LRKV's r; None = round(0.4·d_h), the paper's r ≈ 0.36-0.43·d_h
    lrkv_factored: bool = False  # True: keys RoPE(K_s) + R B_hᵀ, not the paper's RoPE(K_s + R B_hᵀ)
    mla_kv_rank: int = None  # MLA's latent d_c; None = d_h (the paper's 128M ratio)
    mla_rope_dim: int = None  # MLA's decoupled RoPE dim d_r; None = d_h/2 (DeepSeek-V2)
    mla_q_rank: int = 0  # MLA's optional query compression rank; 0 = off
    mla_deepseek: bool = False  # True: DeepSeek's d_n = d_h, kv_norm weight; else d_n = d_h - d_r
    window: int = 0  # sliding-window attention over the last `window` tokens, any design; 0 = all
    attn_scale: float = 1.0  # times the softmax scale 1/√d_h of the QK-normed designs (not MLA)
    rope_base: float = 10000.0
    mlp_hidden: int = None  # the MLP's width; None = 4·n_embd (--match_params: MHA's parameters)
    k_eq_v: bool = False  # keys and values from one projection, one cached tensor (MHA, GQA, MQA)
    kv_share: int = 1  # layers a K/V group: its first makes the K/V the others read (CLA)

    def __post_init__(self):
        # the chosen design's defaults made concrete, so a saved config says exactly what ran; other
        # designs' fields stay as given: dataclasses.replace(cfg, attn=...) keeps cfg's setting
        bad = self._refuse
        if self.attn not in DESIGNS:
            bad("attn", f"unknown attention; use one of {', '.join(DESIGNS)}")
        for field in ("n_layer", "block_size", "vocab_size"):
            if getattr(self, field) < 1:
                bad(field, "must be at least 1")
        if not isinstance(self.window, int) or self.window < 0:
            bad("window", "must be a count of tokens >= 0 (0: attend to every token)")
        if self.n_head < 1 or self.n_embd % self.n_head:
            bad("n_embd", f"must be divisible by n_head={self.n_head}; pick n_embd = n_head·d_h")
        if self.head_dim % 2:
            bad("n_embd", f"head_dim n_embd/n_head = {self.head_dim} must be even for RoPE")
        H, d_h = self.n_head, self.head_dim
        if self.attn == "gqa" and self.n_kv_head is None:
            gs = [g for g in range(2, H) if H % g == 0] or [1]  # not 1 (MQA), H (MHA) if H allows
            self.n_kv_head = min(gs, key=lambda g: (abs(g - H / 4), -g))
        if self.attn == "lrkv":
            self.lrkv_rank = max(1, round(0.4 * d_h)) if self.lrkv_rank is None else self.lrkv_rank
            if not 0 < self.lrkv_rank <= d_h:
                bad("lrkv_rank", f"must be in 1..head_dim={d_h} (r = 0 is MQA: use --attn=mqa)")
        if self.attn == "mla":
            self.mla_kv_rank = d_h if self.mla_kv_rank is None else self.mla_kv_rank
            self.mla_rope_dim = d_h // 2 if self.mla_rope_dim is None else self.mla_rope_dim
            if self.mla_kv_rank < 1:
                bad("mla_kv_rank", "the latent size d_c must be at least 1")
            top = d_h if self.mla_deepseek else d_h - 2  # equal widths split d_h into d_n + d_r
            if not 0 < self.mla_rope_dim <= top or self.mla_rope_dim % 2:
                bad("mla_rope_dim", f"must be even and in 2..{top} (head_dim={d_h}"
                    f"{'' if self.mla_deepseek else ' = d_n + d_r'})")
            if self.mla_q_rank < 0:
                bad("mla_q_rank", "must be 0 (off) or a positive rank")
        # by what the design is, not its name: a design whose branch above is missing fails here
        for field in (f for f in DESIGNS[self.attn].settings if getattr(self, f) is None):
            bad(field, f"--attn={self.attn} leaves it unset: give it a default in __post_init__")
        kind = getattr(attention, DESIGNS[self.attn].cls, None)
        if kind is None:
            bad("attn", f"its row's class {DESIGNS[self.attn].cls} is not in attention.py")
        Hkv = self.kv_heads if issubclass(kind, attention.GroupedQueryAttention) else H
        if not (isinstance(Hkv, int) and 0 < Hkv <= H and H % Hkv == 0):
            divisors = [g for g in range(1, H + 1) if H % g == 0]
            bad("n_kv_head", f"K/V heads must divide n_head={H}; use one of {divisors}")
        self._check_sharing(kind)
        self.mlp_hidden = 4 * self.n_embd if self.mlp_hidden is None else self.mlp_hidden
        if self.mlp_hidden < 1:
            bad("mlp_hidden", "the MLP's width must be at least 1 (None: 4·n_embd)")
        if not self.attn_scale > 0:
            bad("attn_scale", "must be > 0, a factor on the softmax scale 1/√d_h (1: the paper's)")

    def _refuse(self, field, msg):
        raise ValueError(f"{field}={getattr(self, field)!r}: {msg}")

    def _check_sharing(self, kind):
        # a class says why it cannot share (no_k_eq_v, no_kv_share; "" where it can); one that
        # says nothing is refused, not run as if it shared
        for field, off, why in (("k_eq_v", False, "no_k_eq_v"), ("kv_share", 1, "no_kv_share")):
            said = getattr(kind, why, f"{kind.__name__} does not say it can ({why})")
            if getattr(self, field) != off and said:
                self._refuse(field, f"not with --attn={self.attn}: {said}")
        if not isinstance(self.kv_share, int) or self.kv_share < 1 or self.n_layer % self.kv_share:
            self._refuse("kv_share", f"must divide n_layer={self.n_layer}: each group of kv_share "
                         "layers shares one layer's keys and values")

    @property
    def kv_groups(self):
        # the layers that make keys and values, one a kv_share group: the caches a model holds
        return self.n_layer // self.kv_share

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    @property
    def kv_heads(self):
        # the K/V heads of GroupedQueryAttention: H for mha, n_kv_head for gqa, 1 for mqa
        heads = {"mha": self.n_head, "gqa": self.n_kv_head, "mqa": 1}
        if self.attn not in heads:
            raise ValueError(f"attn={self.attn!r}: add its K/V heads to GPTConfig.kv_heads")
        return heads[self.attn]


class ReLU2(torch.autograd.Function):
    """relu(x)², the MLP's activation, with its gradient 2·relu(x)·g from the one tensor it saves
    (autograd's own runs pow's backward, then relu's)."""

    @staticmethod
    def forward(ctx, x):
        r = F.relu(x)
        ctx.save_for_backward(r)
        return r * r

    @staticmethod
    def backward(ctx, g):
        r, = ctx.saved_tensors
        return (g * r).mul_(2)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.mlp_hidden, bias=False)
        self.c_proj = nn.Linear(cfg.mlp_hidden, cfg.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(ReLU2.apply(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg, makes_kv=True):
        super().__init__()
        self.attn = getattr(attention, DESIGNS[cfg.attn].cls)(cfg, makes_kv)  # the design's class
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache=None, pos=None, mask=None, kv=None):
        # kv: the keys and values of this layer's kv_share group, made by its first layer (None:
        # this layer makes them); returned for the group's next layer
        y, kv = self.attn(norm(x), cos, sin, cache, pos, mask, kv)
        x = x + y
        return x + self.mlp(norm(x)), kv


def rope_tables(cfg):
    # RoPE's cos and sin at every position, (T, d/2), d the width the design rotates (MLA: d_r)
    d = getattr(cfg, getattr(attention, DESIGNS[cfg.attn].cls).rope)
    inv_freq = cfg.rope_base ** -(torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(cfg.block_size, dtype=torch.float32), inv_freq)  # (T, d/2)
    return angles.cos(), angles.sin()


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        # with kv_share N, layers 0, N, 2N, ... make keys and values; the N - 1 after each read them
        self.h = nn.ModuleList(Block(cfg, i % cfg.kv_share == 0) for i in range(cfg.n_layer))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init_weights)
        nn.init.normal_(self.lm_head.weight, std=0.001)  # near-uniform logits: loss ≈ ln V

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            # std 1/√fan_in, every input projection (Kaiming, gain 1): a key or value starts at one
            # scale, be its weight MHA's, GQA's, W_s or W_dkv; output projections at 0 (below)
            nn.init.normal_(m.weight, std=1 / math.sqrt(m.weight.size(1)))
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=1.0)
        elif isinstance(m, Block):  # residual branches start as identity
            nn.init.zeros_(m.attn.c_proj.weight)
            nn.init.zeros_(m.mlp.c_proj.weight)
        elif hasattr(m, "init_residuals"):  # a design's own weights (LRKV's B_h); children (LRKV's
            m.init_residuals()  # W_s) are initialised first, so the 0.1 ratio is to W_s

    def forward(self, idx, targets=None, caches=None, pos=None, last=False, pad=None):
        """idx (B, T), or embeddings (B, T, C) (transformers' inputs_embeds) -> logits (B, T, V) and
        the loss if targets (training, with gradients: the loss alone, logits None). With caches
        (one KVCache a K/V group: a layer, or kv_share layers) the tokens follow the caches[0].n
        cached, and n advances; with pos, a (T,) tensor of positions, they are written there, n
        left alone: the decode step torch.compile makes one graph for every position. last: the
        last position's logits only, (B, 1, V). pad (B,): a left-padded batch, row b starting with
        pad[b] pads (generate.left_pads): its token i at position i - pad[b], as alone; none
        attends to a pad. Without pad: fused causal SDPA."""
        B, T = idx.shape[:2]
        if caches and pos is None:
            t0, c = caches[0].n, caches[0]
            if t0 + T > c.max_len:
                raise ValueError(f"{t0 + T} tokens exceed the KV cache's max_len={c.max_len}")
            if t0 and 1 < T and t0 + T > c.slots:  # a chunk would overwrite slots it needs itself
                raise ValueError(f"a window's cache of {c.slots} slots, once full, takes one token "
                                 f"a call after the prefill, not {T}")
            pos = torch.arange(t0, t0 + T, device=idx.device) if t0 else None  # None: from 0
            for c in caches:
                c.n = t0 + T
        elif T > self.cfg.block_size:
            raise ValueError(f"{T} tokens exceed the context block_size={self.cfg.block_size}")
        cos, sin, mask = self.cos, self.sin, None
        if pad is not None:  # each row its RoPE tables, shifted by its padding, and what it sees
            p = torch.arange(self.cfg.block_size, device=pad.device)
            at = (p - pad[:, None]).clamp(min=0)  # (B, block_size): each index's place in its row
            cos, sin = cos[at], sin[at]  # (B, block_size, d/2)
            q, k = (p[:T], p[:T]) if pos is None else (pos, p)  # decoding: every position's key
            mask = attention.padded(q, k, pad, self.cfg.window)  # (B, 1, T, len(k))
        x = norm(idx if idx.is_floating_point() else self.wte(idx))  # (B, T, C)
        N, kv = self.cfg.kv_share, None
        for i, block in enumerate(self.h):  # a K/V group's layers share its one cache
            x, kv = block(x, cos, sin, caches[i // N] if caches else None, pos, mask,
                          kv if i % N else None)
        x = norm(x)
        if targets is not None and torch.is_grad_enabled():  # training: the loss, no whole logits
            return None, LinearCrossEntropy.apply(x.flatten(0, 1), self.lm_head.weight,
                                                  targets.reshape(-1))
        logits = self.lm_head(x[:, -1:] if last else x).float()  # (B, T, V)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.reshape(-1))

    def new_caches(self, max_len=None):
        if (max_len or 0) > self.cfg.block_size:
            raise ValueError(f"a KV cache of {max_len} tokens exceeds the context "
                             f"block_size={self.cfg.block_size}")
        return [KVCache(max_len or self.cfg.block_size, self.cfg.window)
                for _ in range(self.cfg.kv_groups)]

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, **kwargs):
        """generate.generate(self, ...): decoding lives in generate.py."""
        from generate import generate  # generate.py imports nothing of this file's
        return generate(self, idx, max_new_tokens, temperature, top_k, **kwargs)


# The paper's configurations (its Tables 5-7; 2.5B with the 36 layers its own numbers imply),
# with each design's paper setting (GQA K/V heads, MLA d_c, LRKV r), and one CPU-sized model.
PRESETS = {
    "128m": dict(n_layer=12, n_head=6, n_embd=768, block_size=2048,
                 n_kv_head=3, mla_kv_rank=128, lrkv_rank=46),
    "512m-8k": dict(n_layer=24, n_head=12, n_embd=1536, block_size=8192,
                    n_kv_head=4, mla_kv_rank=256, lrkv_rank=51),
    "1.2b": dict(n_layer=24, n_head=12, n_embd=1536, block_size=2048,
                 n_kv_head=4, mla_kv_rank=256, lrkv_rank=51),
    "2.5b": dict(n_layer=36, n_head=18, n_embd=2304, block_size=2048,
                 n_kv_head=6, mla_kv_rank=384, lrkv_rank=55),
    "6.3b": dict(n_layer=32, n_head=32, n_embd=4096, block_size=2048,
                 n_kv_head=2, mla_kv_rank=1024, lrkv_rank=54),
    "cpu": dict(n_layer=4, n_head=4, n_embd=128, block_size=256, vocab_size=320,
                n_kv_head=2, mla_kv_rank=32, lrkv_rank=13, attn_scale=2.0),
    # MQAR (config/mqar.py): each design at the width's default (an --n_embd sweep keeps them ∝ d_h)
    "mqar": dict(n_layer=2, n_head=4, n_embd=64, block_size=128, vocab_size=320, attn_scale=2.0),
}


def preset(name, **overrides):
    if name not in PRESETS:
        raise ValueError(f"preset={name!r} is unknown; use one of {', '.join(PRESETS)}")
    return GPTConfig(**{**PRESETS[name], **overrides})

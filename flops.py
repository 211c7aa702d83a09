"""
Parameters, training FLOPs, KV-cache bytes and memory of each design, from formulas alone.
The tests check every number here against the built model, its caches and torch's FLOP counter.

    python flops.py [preset]      # table of the five designs; default: the figure's 512m-8k
                                  # and their memory per GPU, DDP vs FSDP2 on 8 GPUs
"""
import os
import runpy
import sys
from dataclasses import replace

from common import DESIGNS, fail, setting
from loss import LOSS_CHUNK
from model import PRESETS, preset


def attention_counts(cfg):
    """What the formulas below need of a design's attention, one layer, by its class in attention.py:
        q, kv     weights that make the queries, and the keys and values (kv: in the first layer
                  of each kv_share group only, the layer that makes them)
        gains     learnable norm weights among them (AdamW's, multiplied elementwise: no FLOPs)
        d_qk      query/key width per head (the value is d_h wide in every design)
        cache     elements one token adds to the KV cache (attention.py's table), a K/V group
        decode    FLOPs of the decode step's attention per cached token, as its code computes it
        decode_w  weights the decode step multiplies beyond the layer's own (2 FLOPs each)
        read      of kv, the weights every layer of a group multiplies to read the cache in decode
        decode_kv FLOPs per cached token a group spends making keys of its cache in decode (K=V's
                  RoPE and QK-norm: elementwise, which torch's FLOP counter does not see)"""
    d, H, d_h, kind = cfg.n_embd, cfg.n_head, cfg.head_dim, DESIGNS[cfg.attn].cls
    if kind == "GroupedQueryAttention":  # mha, gqa, mqa: kv_heads full K/V heads, scores and values
        # K=V: one projection and one cached tensor; decode makes each cached token a key again:
        # RoPE (a product and a multiply-add) and QK-norm (a square-sum and a scale), 6 an element
        Hkv, n = cfg.kv_heads, 1 if cfg.k_eq_v else 2
        return dict(q=d * H * d_h, kv=n * Hkv * d * d_h, gains=0, d_qk=d_h, cache=n * Hkv * d_h,
                    decode=4 * H * d_h, decode_w=0, read=0,
                    decode_kv=6 * Hkv * d_h if cfg.k_eq_v else 0)
    if kind == "MLA":
        # W_dkv: d -> c_kv, W_kr: d -> k_pe; W_uk, W_uv: c_kv -> k_nope, v per head. d_n: DeepSeek's
        # widths keep the content key d_h wide, equal widths make d_n + d_r = d_h. The cache: c_kv
        # and the shared rotated k_pe. Absorbed decode works in the latent space: scores
        # 2·H·(d_c + d_r), values 2·H·d_c per cached token
        d_c, d_r, q_rank = cfg.mla_kv_rank, cfg.mla_rope_dim, cfg.mla_q_rank
        d_qk = (d_h if cfg.mla_deepseek else d_h - d_r) + d_r
        gains = d_c if cfg.mla_deepseek else 0  # kv_norm's weight
        return dict(q=d * q_rank + q_rank * H * d_qk if q_rank else d * H * d_qk,
                    kv=d * (d_c + d_r) + d_c * H * (d_qk - d_r + d_h) + gains, gains=gains, d_qk=d_qk,
                    cache=d_c + d_r, decode=2 * H * (d_c + d_r) + 2 * H * d_c, decode_w=0,
                    read=d_c * H * (d_qk - d_r + d_h), decode_kv=0)  # read: W_uk, W_uv, absorbed
    if kind == "LRKV":
        # Eq. 10: shared W_s^{K,V} plus per-head U_h, B_h for K and V. The cache: X W_s^{K,V} and
        # R_h^{K,V} of every head (the paper's 2·d_h + 2·H·r) and each head's key norm (H). Decode:
        # shared scores and values 4·H·d_h, B_hᵀ RoPE_s⁻¹ q at every position 2·H·r·d_h, its dot
        # with R_h^K and the value latents 4·H·r. Factored: 4·H·(d_h + r), and B_k twice more
        # (the new key's norm, and q B_h once)
        r = cfg.lrkv_rank
        decode = 4 * H * (d_h + r) if cfg.lrkv_factored else 4 * H * d_h + 2 * H * r * d_h + 4 * H * r
        return dict(q=d * H * d_h, kv=2 * d * d_h + 2 * H * r * (d + d_h), gains=0, d_qk=d_h,
                    cache=2 * d_h + 2 * H * r + H, decode=decode,
                    decode_w=H * d_h * r if cfg.lrkv_factored else 0, read=H * d_h * r,
                    decode_kv=0)  # read: B_v, after attention (Eq. 7)
    raise ValueError(f"flops.py has no formulas for {kind} (--attn={cfg.attn}): "
                     "add them to flops.attention_counts")


def d_qk(cfg):
    return attention_counts(cfg)["d_qk"]


def standard_mha(cfg):
    # the reference a design is measured against: MHA at cfg's shape, no K/V sharing of any kind
    return replace(cfg, attn="mha", k_eq_v=False, kv_share=1)


def params(cfg):
    """Every parameter: embedding, per layer (q, output, MLP), per K/V group (K/V path), head."""
    d = cfg.n_embd
    a = attention_counts(cfg)
    layer = a["q"] + d * d + 2 * d * cfg.mlp_hidden
    return 2 * cfg.vocab_size * d + cfg.n_layer * layer + cfg.kv_groups * a["kv"]


def match_params(cfg):
    """cfg with the MLP width that gives it standard MHA's parameter count at the same shape. The
    attention is left as it is; each unit of MLP width is 2·d parameters per layer, so the nearest
    width leaves the two counts under n_layer·d apart."""
    mha = params(replace(standard_mha(cfg), mlp_hidden=None))
    own = params(replace(cfg, mlp_hidden=4 * cfg.n_embd))
    return replace(cfg, mlp_hidden=4 * cfg.n_embd + round((mha - own) / (2 * cfg.n_embd * cfg.n_layer)))


def kv_params(cfg):
    return cfg.kv_groups * attention_counts(cfg)["kv"]


def train_flops_per_token(cfg):
    """Forward + backward FLOPs per token: 6 × every weight multiplied once per token
    (all but the embedding lookup, which is free) + the attention core 6·L·T·H·(d_qk + d_v), with
    no causal discount, nor a sliding window's: its banded mask runs through the same dense kernel
    (flex_attention's block-sparse one has no backward on a CPU: docs/bench/window_mask.py).
    LRKV multiplies X by W_s, U and then B (it never forms the full d×d_h per-head weight), so its
    count is lower than MHA's: exactly its parameters. A norm's gain multiplies elementwise, not
    in a matmul, and is not counted (nor by torch's counter)."""
    gains = cfg.kv_groups * attention_counts(cfg)["gains"]
    matmul_weights = params(cfg) - cfg.vocab_size * cfg.n_embd - gains
    return 6 * matmul_weights + 6 * cfg.n_layer * cfg.block_size * cfg.n_head * (d_qk(cfg) + cfg.head_dim)


def decode_flops_per_token(cfg, T):
    """Forward FLOPs to generate one token that attends over T cached tokens (itself included):
    2 × every weight multiplied (absorbed MLA and LRKV's decode multiply the same weights, in
    another order) plus each design's attention over the cache as its decode step computes it
    (attention_counts); with a sliding window, over the last min(T, window). This is the math's
    count at context T; a static cache of max_len slots computes over all of them."""
    a, L, G = attention_counts(cfg), cfg.n_layer, cfg.kv_groups
    # a later layer of a K/V group reads its first layer's cache with that layer's read weights
    weights = params(cfg) - cfg.vocab_size * cfg.n_embd - G * a["gains"] + L * a["decode_w"]
    weights += (L - G) * a["read"]
    return 2 * weights + (L * a["decode"] + G * a["decode_kv"]) * held(cfg, T)


def paper_flops_per_token(cfg):
    """The paper's convention for its figure: 6·N, N all parameters (153.6 EF = 6·512M·50B)."""
    return 6 * params(cfg)


def decode_bytes(cfg, T, batch=1, bytes_per_elem=2):
    """The least one decode step at context T must read from memory: every weight it multiplies
    (the layers' and the head's; of the embedding only a row a sequence, left out), once for the
    whole batch, and the KV cache of every sequence, once for each layer that reads it: a kv_share
    group's cache is read by each of its layers, one after another, so a step reads as many cache
    bytes as without sharing (what sharing cuts is the memory a cache holds, cache_bytes)."""
    weights = params(cfg) - cfg.vocab_size * cfg.n_embd
    return weights * bytes_per_elem + cfg.kv_share * cache_bytes(cfg, T, batch, bytes_per_elem)


def held(cfg, T):
    # the tokens a cache holds at context T: all of them, or a sliding window's last `window`
    return min(T, cfg.window) if cfg.window else T


def kv_cache_bytes_per_token(cfg, bytes_per_elem=2):
    return cfg.kv_groups * attention_counts(cfg)["cache"] * bytes_per_elem


def cache_bytes(cfg, T, batch=1, bytes_per_elem=2):
    """The KV cache of batch sequences at context T: min(T, window) tokens each with a window."""
    return batch * held(cfg, T) * kv_cache_bytes_per_token(cfg, bytes_per_elem)


def activation_bytes_per_token(cfg, checkpointing=False):
    """Bytes autograd keeps per token of a micro-batch, under bf16 autocast: 64·d per layer (the
    five designs' blocks save 52-65·d, measured with saved_tensors_hooks at d = 256: the fp32
    residual, bf16 normed inputs, q, k, v, the attention output, and the MLP's 4·d-wide hidden,
    ReLU² and its input), 12·d for the embedding and final norm, and 4·d for the loss head's fp32
    gradient dx (loss.LinearCrossEntropy: the logits are never whole; memory_per_gpu adds its chunk).
    With activation checkpointing each block keeps only its fp32 input (4·d), and one block at a
    time is recomputed (64·d)."""
    d = cfg.n_embd
    block = 64 * d + 6 * (cfg.mlp_hidden - 4 * d)  # the MLP's three saved tensors are 6 bytes per unit of width
    blocks = cfg.n_layer * 4 * d + block if checkpointing else cfg.n_layer * block
    return blocks + 16 * d


def memory_per_gpu(cfg, batch_size, world, fsdp, checkpointing=False):
    """Estimated peak bytes on each GPU of a train.py run (Muon + AdamW, bf16 autocast).
    DDP, every rank whole: fp32 weights 4P, fp32 gradients 4P (DDP's buckets are the gradients:
    gradient_as_bucket_view), Muon's momentum 4M (M: the hidden matrices), AdamW's two states 8A
    (A: embedding, head, gains), and the bf16 copies of the weights that autocast makes and the
    matmuls keep for backward, 2P. FSDP2: the first four divided by the world size; no autocast
    copies, but bf16 gathers of two blocks (the one computing and the one prefetched), fp32 gathers
    of the embedding and head (the root's weights stay gathered and fp32, as under DDP), one
    block's fp32 gradient before its reduce-scatter (every micro-step's is reduce-scattered, so no
    whole gradient waits for the last), and Muon's whole matrices in flight (two chunks of `world`
    bf16 updates and a gathered fp32 gradient: under 8 bytes x world x the largest matrix).
    Plus activations, batch_size · block_size · activation_bytes_per_token, and the loss head's
    chunk of logits (bf16, fp32 and their gradient, 12 bytes each) and its weight gradient dW."""
    P, d, V = params(cfg), cfg.n_embd, cfg.vocab_size
    A = 2 * V * d + cfg.kv_groups * attention_counts(cfg)["gains"]
    M, block = P - A, (P - A) // cfg.n_layer  # hidden matrices; one block's
    states = 4 * P + 4 * P + 4 * M + 8 * A
    if fsdp:
        largest = max(cfg.mlp_hidden * d, block // 8)  # an MLP matrix, or any larger one
        weights = states / world + 2 * 2 * block + 4 * 2 * V * d + 4 * block + world * 8 * largest
    else:
        weights = states + 2 * P
    tokens = batch_size * cfg.block_size
    head = 12 * min(tokens, LOSS_CHUNK // V) * V + 4 * V * d
    return weights + tokens * activation_bytes_per_token(cfg, checkpointing) + head


def accounting(cfg):
    """What a run's log header records of its model, counted by the formulas above."""
    mha = standard_mha(cfg)
    return dict(params=params(cfg), kv_params=kv_params(cfg), flops_per_token=train_flops_per_token(cfg),
                paper_flops_per_token=paper_flops_per_token(cfg), kv_bytes_per_token=kv_cache_bytes_per_token(cfg),
                mha_kv_bytes_per_token=kv_cache_bytes_per_token(mha))


def memory_refusal(cfg, batch_size, world, fsdp, checkpointing, limit):
    """None if a run's estimate fits in limit bytes per rank, else a one-line refusal that names
    the changes which would fit, alone."""
    need = memory_per_gpu(cfg, batch_size, world, fsdp, checkpointing)
    if need <= limit:
        return None
    options = {"--fsdp": (batch_size, True, checkpointing) if world > 1 and not fsdp else None,
               "--activation_checkpointing": (batch_size, fsdp, True) if not checkpointing else None,
               "--batch_size=1": (1, fsdp, checkpointing) if batch_size > 1 else None}
    fits = [k for k, o in options.items() if o and memory_per_gpu(cfg, o[0], world, o[1], o[2]) <= limit]
    fits = " or ".join(fits) or "none of --fsdp, --activation_checkpointing, --batch_size=1 alone: combine them, or use more or larger GPUs"
    return (f"this run needs about {need / 2**30:.3g} GiB per rank (flops.memory_per_gpu) and {limit / 2**30:.3g} "
            f"GiB are there; what fits: {fits}")


def memory_table(name, world=8):
    """GiB per GPU of each design at a preset's config batch (config/<name>.py), DDP and FSDP2."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config", name.replace("-", "_") + ".py")
    batch = runpy.run_path(path).get("batch_size", 1) if os.path.exists(path) else 1
    rows = [f"memory per GPU at batch_size={batch} x {preset(name).block_size} tokens, {world} GPUs (GiB, estimate):",
            f"{'design':6} {'DDP':>7} {'FSDP2':>7} {'DDP+ckpt':>9} {'FSDP2+ckpt':>10}"]
    for a in DESIGNS:
        cfg = preset(name, attn=a)
        gib = [memory_per_gpu(cfg, batch, world, f, c) / 2**30 for c in (False, True) for f in (False, True)]
        rows.append(f"{a:6} {gib[0]:7.1f} {gib[1]:7.1f} {gib[2]:9.1f} {gib[3]:10.1f}")
    return rows


# dense bf16 tensor-core peaks (FLOP/s); the first name contained in the device's wins: an H100 SXM
# (named like "NVIDIA H100 80GB HBM3") is 989, its PCIe and NVL versions are slower
PEAK_FLOPS = {"H100 PCIe": 756e12, "H100 NVL": 835e12, "H200 NVL": 835e12, "H100": 989e12, "H200": 989e12,
              "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "RTX 4090": 165e12, "RTX 3090": 71e12}


# memory bandwidth, bytes/s, the vendors' figures: what a decode step's bytes are set against on a GPU
PEAK_BANDWIDTH = {"H100 PCIe": 2.0e12, "H100 NVL": 3.9e12, "H200 NVL": 4.8e12, "H100": 3.35e12, "H200": 4.8e12,
                  "A100-SXM4-80GB": 2.04e12, "A100": 1.555e12, "L40S": 0.864e12, "A10G": 0.6e12,
                  "RTX 4090": 1.008e12, "RTX 3090": 0.936e12}


def peak_flops(device_name):
    """For MFU: the peak of a GPU named like torch.cuda.get_device_name's answer, or None."""
    return next((v for k, v in PEAK_FLOPS.items() if k in device_name), None)


def peak_bandwidth(device_name):
    """The memory bandwidth of a GPU named as peak_flops takes it, or None."""
    return next((v for k, v in PEAK_BANDWIDTH.items() if k in device_name), None)


def table(name):
    """Rows of the five designs at one preset, as printable strings."""
    cfgs = {a: preset(name, attn=a) for a in DESIGNS}
    mha_cache, mha_kvp = kv_cache_bytes_per_token(cfgs["mha"]), kv_params(cfgs["mha"])
    rows = [f"{'design':6} {'setting':>10} {'params':>9} {'K/V params':>10} {'% MHA':>6} {'train GFLOP/tok':>15} "
            f"{'6N GFLOP/tok':>12} {'KV KiB/tok':>10} {'KV % MHA':>8} {'decode GFLOP/tok':>16}"]
    for a, cfg in cfgs.items():
        cache = kv_cache_bytes_per_token(cfg)
        rows.append(f"{a:6} {setting(cfg):>10} {params(cfg) / 1e6:8.1f}M "
                    f"{kv_params(cfg) / 1e6:9.1f}M {100 * kv_params(cfg) / mha_kvp:5.1f}% "
                    f"{train_flops_per_token(cfg) / 1e9:15.3f} {paper_flops_per_token(cfg) / 1e9:12.3f} "
                    f"{cache / 1024:10.1f} {100 * cache / mha_cache:7.1f}% "
                    f"{decode_flops_per_token(cfg, cfg.block_size) / 1e9:16.3f}")
    return rows


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "512m-8k"
    if name not in PRESETS or len(sys.argv) > 2:
        fail(f"usage: python flops.py [preset]; the presets are {', '.join(PRESETS)}")
    c = preset(name)
    print(f"preset {name}: {c.n_layer} layers, {c.n_head} heads, d_model {c.n_embd}, "
          f"d_h {c.head_dim}, context {c.block_size}, vocab {c.vocab_size}; KV cache in bf16; "
          f"decode: one token generated after a full context")
    print("\n".join(table(name)))
    print("\n".join([""] + memory_table(name)))

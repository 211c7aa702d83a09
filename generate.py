"""
Decoding, apart from the model as gpt-fast keeps it: generate() continues prompts one token a
step through each design's KV cache (attention.py's KVCache: MLA's c_kv and k_pe, LRKV's shared
and per-head parts), the caches kept from one call to the next, the decode step compiled by
torch.compile (one graph for every position) and, on CUDA, replayed as a CUDA graph.

    from generate import generate
    out = generate(model, idx, max_new_tokens=100, temperature=0)   # or model.generate(idx, 100, 0)

Prompts of different lengths go as one batch padded on the left, with an attention_mask of 0s
(padding) then 1s, as a tokenizer with padding_side="left" makes them: each row continues as it
would alone.
"""
import torch

from common import warn

GRAPH_MIN_TOKENS = 256  # generate()'s default: a CUDA graph from this many new tokens (compiling costs seconds)
LIMIT_WARNED = []  # decoder()'s fallback to eager has warned in this process


def left_pads(attention_mask):
    """(B,) how many pads each row of a left-padded batch starts with, from its attention_mask (B, T)
    of 0s then 1s; None where no row is padded (the fused causal path). ValueError otherwise."""
    real = attention_mask.bool()
    pad = (~real).sum(-1)  # (B,)
    if not torch.equal(real, torch.arange(real.size(1), device=real.device) >= pad[:, None]):
        raise ValueError("attention_mask must pad on the left, each row 0s then 1s (a tokenizer's padding_side='left')")
    if (pad == real.size(1)).any():
        raise ValueError("attention_mask: a row is all padding; every row needs a token")
    return pad if pad.any() else None


def kept_caches(model, batch, length):
    """Caches for generate(), one set kept for each batch size, kind of activation and
    power-of-two bucket of lengths (at least 64, at most the context): a call that returns to a
    bucket writes the same buffers at the same addresses, and its compiled step (static shapes,
    decoder) runs the graph compiled for that bucket, so the CUDA graph recorded for it replays.
    What an earlier call left in them is never read: every slot a token may attend to is
    written first."""
    device = model.lm_head.weight.device
    amp = torch.is_autocast_enabled(device.type)
    act = torch.get_autocast_dtype(device.type) if amp else model.lm_head.weight.dtype
    L = min(model.cfg.block_size, max(64, 1 << (length - 1).bit_length()))
    key = (batch, L, act, device)
    kept = model.__dict__.setdefault("_kept", {})  # off nn.Module's books
    if key not in kept:
        kept[key] = model.new_caches(L)
    caches = kept[key]
    for c in caches:
        c.n = 0
    return caches


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True, generator=None,
             compile=None, stop=None, attention_mask=None):
    """Continue the prompts idx (B, T) by max_new_tokens tokens -> (B, T + max_new_tokens).
    temperature 0 is greedy; top_k keeps the k likeliest tokens; sampling draws from generator
    (on any device) for reproducible runs. With the cache: one prefill of the prompt, then one
    token per step, each design caching what it needs (MLA decodes absorbed, LRKV exactly).
    compile runs the decode step through torch.compile: one graph serves every position (the
    position is a tensor, the cache a fixed shape); a mode such as "reduce-overhead" (a CUDA
    graph) is passed on. Default: a CUDA graph on CUDA for GRAPH_MIN_TOKENS new tokens or
    more, eager otherwise. The caches are kept for the next call (kept_caches). use_cache=False
    recomputes the full forward every step: slow, and the reference. stop ends generation early:
    token ids (every row has made one of them), or a function of the new tokens so far (a list
    of B lists) that says when; the output is then shorter. Checking waits for the device each
    token, so it is off unless asked for. attention_mask (B, T): a batch padded on the left (0s
    then 1s), each row continued as it would be alone (left_pads)."""
    B, T = idx.size()
    if T < 1:
        raise ValueError("generate needs a prompt of at least one token (e.g. the tokenizer's eot)")
    if T + max_new_tokens > model.cfg.block_size:
        raise ValueError(f"prompt of {T} + max_new_tokens={max_new_tokens} tokens exceed the context "
                         f"block_size={model.cfg.block_size}; shorten the prompt or generate fewer tokens")
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 = greedy)")
    device = model.lm_head.weight.device
    idx = idx.to(device)
    if attention_mask is not None and attention_mask.shape != idx.shape:
        raise ValueError(f"attention_mask {tuple(attention_mask.shape)} must be the prompts' shape {tuple(idx.shape)}")
    pad = left_pads(attention_mask.to(device)) if attention_mask is not None else None
    stop = [stop] if isinstance(stop, int) else stop or None  # one token id; nothing to stop at
    done = stop if callable(stop) else lambda new: all(set(row) & set(stop) for row in new)
    # the last sampled token is never fed back, so the cache needs one slot less than the output
    caches = kept_caches(model, B, T + max_new_tokens - 1) if use_cache and max_new_tokens > 1 else None
    # by default on CUDA a long generation runs the compiled step as a CUDA graph, one launch a
    # token, not hundreds; a short one would not repay the compile and the recording
    long = device.type == "cuda" and max_new_tokens >= GRAPH_MIN_TOKENS
    mode = ("reduce-overhead" if long else False) if compile is None else compile
    step = decoder(model, mode)
    pos = torch.full((1,), T - 1, device=device)  # advanced on the device: no host copy, no wait, per token
    for i in range(max_new_tokens):
        if caches is None:
            logits = model(idx, last=True, pad=pad)[0][:, -1]  # (B, V), float32
        elif i == 0:
            logits = model(idx, caches=caches, last=True, pad=pad)[0][:, -1]  # the prefill, eager (its shape varies)
        else:
            if mode == "reduce-overhead":  # the graph may overwrite the last step's logits: they were used
                torch.compiler.cudagraph_mark_step_begin()
            logits = step(nxt, caches=caches, pos=pos.add_(1), pad=pad)[0][:, -1]
        nxt = sample(logits, temperature, top_k, generator)  # (B, 1)
        idx = torch.cat([idx, nxt], dim=1)
        if stop is not None and done(idx[:, T:].tolist()):
            break
    return idx


def sample(logits, temperature, top_k, generator):
    # logits (B, V) -> the next tokens (B, 1): greedy at temperature 0, else drawn from the softmax
    # of the k likeliest (all if top_k is None)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    if generator is not None:  # draw where the generator lives, so a seed means one thing
        probs = probs.to(generator.device)
    return torch.multinomial(probs, 1, generator=generator).to(logits.device)


def decoder(model, compile):
    # the module itself, or its compiled decode step (cached: compiling costs seconds to minutes);
    # compile may name a torch.compile mode, e.g. "reduce-overhead" (a CUDA graph)
    if not compile:
        return model
    key = f"_decoder_{compile}"
    if key not in model.__dict__:  # kept off nn.Module's books: it wraps model
        # static shapes, a graph per bucket of kept caches: a second bucket made the step dynamic,
        # dynamo then served the return to the first from that dynamic graph, and cudagraph trees,
        # which key a dynamic graph on its sizes, recorded it again
        compiled = torch.compile(model, fullgraph=True, dynamic=False,
                                 mode=None if compile is True else compile)

        def step(*args, **kwargs):
            # every GPT's compiled steps are cache entries of one function, GPT.forward: past
            # dynamo's limit on them (a process decoding many models, contexts, modes) this
            # model decodes eagerly, with one warning a process, rather than fail
            nonlocal compiled
            if compiled is not None:
                try:
                    return compiled(*args, **kwargs)
                except torch._dynamo.exc.FailOnRecompileLimitHit:
                    compiled = None
                    if not LIMIT_WARNED:
                        warn(f"torch.compile's recompile_limit ({torch._dynamo.config.recompile_limit}) is "
                             "reached: models past it decode eagerly (raise torch._dynamo.config."
                             "recompile_limit to compile more)")
                        LIMIT_WARNED.append(True)
            return model(*args, **kwargs)
        model.__dict__[key] = step
    return model.__dict__[key]

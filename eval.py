"""
What a trained checkpoint does: its held-out loss, its samples, the diversity of its heads.

    python eval.py out/cpu_lrkv_s0/ckpt.pt                  # loss and bits per byte on every token of val and test
    python eval.py out/cpu_lrkv_s0/ckpt.pt --sample="ROMEO:" --max_new_tokens=200 --seed=1
    python eval.py out/cpu_lrkv_s0/ckpt.pt --heads          # head diversity (paper §4.3, Table 3)
    python eval.py out --heads                              # ... of every run in out/, by design
    python eval.py out/cpu_lrkv_s0/ckpt.pt --tasks=arc_easy,hellaswag --limit=100   # lm-evaluation-harness
    python eval.py out/cpu_lrkv_s0/ckpt.pt --export=out/lrkv_hf   # a transformers folder (export.py)
    python eval.py out/recall/mha_d64_p16_lr1_s0/ckpt.pt --recall   # MQAR accuracy, pairs x lengths
    python eval.py out/e7/mha_s0/ckpt.pt --recall --window=32   # ... through a window it never had
    python eval.py out/cpu_lrkv_s0/ckpt.pt --induction      # loss on a repeated random sequence

A checkpoint is a ckpt.pt or, from --fsdp, a ckpt_STEP/ folder (checkpoint.py), or a folder that
--export wrote (export.py: a transformers folder). --tasks needs pip install lm_eval (harness.py),
--export pip install transformers. What the designs cost at a shape, with random weights (cache
bytes, decode speed), is bench.py's job.
"""
import argparse
import glob
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

import recall

from checkpoint import load_model
from prepare import load_split
from text import evaluate
from common import (DESIGNS, ArgumentParser, count, autocast, fail, resolve_device, resolve_dtype,
                    torch_dtype)


# -----------------------------------------------------------------------------
# head diversity (paper §4.3, Eqs. 11-12, Table 3)

def head_qk(attn, src=None):
    """Each query head's effective query and key weights (H, d_qk, d) each, rows as outputs, so
    that head h scores x_i against x_j as x_iᵀ A_h x_j with A_h = W_Q,hᵀ W_K,h (d × d).
    An approximation of what attention uses: RoPE rotates q and k by position and QK-norm (MLA:
    the c_kv norm, and the c_q norm under query compression) rescales them per token, in between.
    src: the layer whose keys attn reads (kv_share: its group's first; there x_j is that layer's)."""
    H, kind, src = attn.H, type(attn).__name__, src or attn
    if kind == "GroupedQueryAttention":  # query head h reads K/V head h // (H / Hkv), as enable_gqa
        Wq = attn.c_q.weight.view(H, attn.d_h, -1)
        W = src.c_kv.weight if attn.k_eq_v else src.c_k.weight  # K=V: the one projection
        Wk = W.view(attn.Hkv, attn.d_h, -1).repeat_interleave(H // attn.Hkv, dim=0)
        return Wq, Wk
    if kind == "LRKV":  # W_K,h = W_s^K + U_h B_hᵀ (Eq. 2), here transposed: W_s^K + B_h U_h
        d_h, r = attn.d_h, attn.r
        Wk = src.W_sk.weight + src.B_k.view(H, d_h, r) @ src.U_k.weight.view(H, r, -1)  # (H, d_h, d)
        return attn.c_q.weight.view(H, d_h, -1), Wk
    if kind != "MLA":
        raise ValueError(f"eval.head_qk has no query and key weights for {kind}: add them there")
    # q_h = [q_nope_h, q_pe_h]; k_h = [W_uk,h W_dkv x, W_kr x], the RoPE key shared by all heads
    d_n, d_r, d_c = attn.d_n, attn.d_r, attn.d_c
    Wq = attn.W_uq.weight @ attn.W_dq.weight if hasattr(attn, "W_dq") else attn.c_q.weight
    W_uk = src.W_uk.weight.view(H, d_n, d_c)  # (H, d_n, d_c)
    Wk = torch.cat([W_uk @ src.W_dkv.weight, src.W_kr.weight.expand(H, d_r, -1)], dim=1)  # (H, d_n + d_r, d)
    return Wq.view(H, d_n + d_r, -1), Wk


def head_gram(Wq, Wk):
    """G_ij = <A_i, A_j>_F / (‖A_i‖ ‖A_j‖) (Eq. 11) without forming any d × d matrix:
    <A_i, A_j>_F = tr(W_K,iᵀ W_Q,i W_Q,jᵀ W_K,j) = Σ_ab (W_Q,i W_Q,jᵀ)_ab (W_K,i W_K,jᵀ)_ab."""
    H, a, d = Wq.shape
    QQ = (Wq.reshape(H * a, d) @ Wq.reshape(H * a, d).T).view(H, a, H, a).transpose(1, 2)  # (H, H, a, a)
    KK = (Wk.reshape(H * a, d) @ Wk.reshape(H * a, d).T).view(H, a, H, a).transpose(1, 2)
    S = (QQ * KK).sum((-2, -1)).double()  # (H, H)
    n = S.diagonal().sqrt()
    return S / torch.outer(n, n)


def effective_rank(G):
    """exp(entropy of the normalised eigenvalues); 0 for a zero matrix (no spread at all)."""
    lam = torch.linalg.eigvalsh(G).clamp(min=0)
    if lam.sum() <= 1e-12 * len(lam):
        return 0.0
    p = lam / lam.sum()
    p = p[p > 0]
    return math.exp(-(p * p.log()).sum().item())


@torch.no_grad()
def head_diversity(model):
    """Per layer: the Gram matrix of the heads' bilinear forms, its effective rank uncentred and with
    kernel-PCA centring (Eq. 12), both as % of H, and the mean off-diagonal similarity."""
    rows = []
    N = model.cfg.kv_share
    for layer, block in enumerate(model.h):
        G = head_gram(*(w.float() for w in head_qk(block.attn, model.h[layer - layer % N].attn)))
        H = len(G)
        Gc = G - G.mean(0, keepdim=True) - G.mean(1, keepdim=True) + G.mean()
        rows.append(dict(layer=layer, gram=G, uncentred=100 * effective_rank(G) / H,
                         centred=100 * effective_rank(Gc) / H,
                         mean_sim=((G.sum() - G.trace()) / (H * (H - 1))).item() if H > 1 else 1.0))
    return rows


def main(argv=None):
    from tokenizer import get_tokenizer
    args = arguments(argv)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    amp = autocast(device, dtype)
    runs = sorted(glob.glob(os.path.join(args.checkpoint, "*", "ckpt.pt")))
    reports = args.tasks or args.export or args.recall or args.induction  # besides --heads and --sample
    if runs:  # a folder of runs
        if not args.heads or args.sample is not None or reports:
            fail(f"{args.checkpoint} is a folder of runs: only --heads reads them all; "
                 "name one run's ckpt.pt for the rest")
        return print_heads_of_runs(runs, device)
    model, meta = load_model(args.checkpoint, device)
    if args.window is not None:  # the same weights through a cache that drops all but W tokens
        if not 1 <= args.window <= model.cfg.block_size:
            fail(f"--window={args.window}: a window holds 1 to {model.cfg.block_size} tokens, "
                 "the checkpoint's context")
        model = rebuilt(model, window=args.window)
    if "train_config" not in meta:
        fail(f"{args.checkpoint} does not say how it was trained (its tokenizer): "
             "export it with eval.py --export")
    tok = get_tokenizer(meta["train_config"]["tokenizer"])
    if args.export:
        write_export(model, meta, args.export)
    if args.heads:
        print_heads(model, args.checkpoint)
    if args.tasks or args.sample is not None:
        model, amp = for_decoding(model, device, dtype)
    if args.tasks:
        run_tasks(model, tok, amp, args)
    if args.sample is not None:
        print_sample(model, tok, amp, args, device)
    if args.recall:
        print_recall(model, meta, args)
    if args.induction:
        print_induction(model, meta, tok, args)
    if args.sample is None and not (args.heads or reports):  # the default: test loss
        print_test_loss(model, meta, tok, amp, args, device)


def for_decoding(model, device, dtype):
    """The model and the context decoding runs under: the weights in the compute dtype and no
    autocast. Autocast's cache of weight casts lasts one eager context, so a compiled decode step of
    fp32 weights under it would cast every weight again every token."""
    return model.to(torch_dtype(dtype)), autocast(device, "fp32")


def arguments(argv):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint",
                   help="a ckpt.pt written by train.py, a ckpt_STEP/ folder (--fsdp), an --export "
                        "folder, or with --heads a folder of runs")
    p.add_argument("--eval_tokens", type=count, default=None,
                   help="score this many tokens spread over each split (default: every token)")
    p.add_argument("--batch_size", type=count, default=8)
    p.add_argument("--device", default="auto", help="auto: cuda if available, else cpu")
    p.add_argument("--dtype", default="auto",
                   help="autocast: auto = bf16 on CUDA (as train.py), fp32 on the CPU")
    p.add_argument("--sample", metavar="PROMPT", help="print a continuation of PROMPT ('' = from scratch)")
    p.add_argument("--max_new_tokens", type=int, default=None, help="default: 200, or what fits the context")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    p.add_argument("--top_k", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true",
                   help="--sample: decode through torch.compile (on CUDA a CUDA graph); worth it for long samples")
    p.add_argument("--heads", action="store_true", help="head diversity of the checkpoint's attention")
    p.add_argument("--tasks", help="lm-evaluation-harness tasks, comma-separated, e.g. arc_easy,hellaswag")
    p.add_argument("--limit", type=float, default=None,
                   help="--tasks: at most this many items per task (<1: a fraction)")
    p.add_argument("--num_fewshot", type=int, default=None,
                   help="--tasks: examples in each prompt (default: the task's)")
    p.add_argument("--include_path", help="--tasks: a folder of your own task YAML files")
    p.add_argument("--recall", action="store_true",
                   help="MQAR accuracy (recall.py) at pair counts around the training's and lengths up to 4x")
    p.add_argument("--induction", action="store_true",
                   help="loss on the first and second copy of random sequences, of tokens the training split "
                   "holds, repeated once")
    p.add_argument("--examples", type=count, default=256, help="--recall, --induction: sequences a cell")
    p.add_argument("--length", type=count, default=None,
                   help="--recall: at this length only (default: the context T, 2T and 4T)")
    p.add_argument("--window", type=int, default=None,
                   help="attend to the last W tokens only, at inference (StreamingLLM's "
                        "eviction): the same weights through a sliding window, whatever the "
                        "model trained with")
    p.add_argument("--export", metavar="DIR",
                   help="write a transformers folder: AutoModelForCausalLM.from_pretrained(DIR) loads it")
    return p.parse_args(argv)


def write_export(model, meta, path):
    from export import write
    try:
        kind = write(model, meta, meta["train_config"]["tokenizer"], path)
    except ImportError as e:
        fail(f"--export writes a transformers folder: pip install transformers safetensors ({e})")
    except OSError as e:
        fail(f"--export={path}: {e}")
    remote = ", trust_remote_code=True" if kind == "nanokv" else ""
    print(f"wrote {path} (model_type {kind}); load it with transformers' AutoModelForCausalLM.from_pretrained("
          f"{path!r}{remote}), or pass the folder to eval.py")


def run_tasks(model, tok, amp, args):
    """The harness's own evaluation of the tasks, and its results table."""
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
        from lm_eval.utils import make_table
        from harness import NanoKV
    except ImportError:
        fail("--tasks runs lm-evaluation-harness, an optional extra: pip install lm_eval")
    tasks = args.tasks.split(",")
    manager = TaskManager(include_path=args.include_path, include_defaults=False) if args.include_path else None
    if manager is None or not set(tasks) <= set(manager.all_tasks):  # the harness's own ~15K: seconds to index
        manager = TaskManager(include_path=args.include_path)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        fail(f"no harness task {unknown[0]!r}; `lm_eval ls tasks` lists them, --include_path adds your own")
    limit = int(args.limit) if args.limit and args.limit >= 1 else args.limit
    results = lm_eval.simple_evaluate(model=NanoKV(model, tok, amp, args.batch_size), tasks=tasks, limit=limit,
                                      num_fewshot=args.num_fewshot, task_manager=manager)
    print(make_table(results))


def print_sample(model, tok, amp, args, device):
    ids = tok.encode(args.sample) or [tok.eot]  # an empty prompt starts a new document
    n = args.max_new_tokens if args.max_new_tokens is not None else min(200, model.cfg.block_size - len(ids))
    g = torch.Generator(device).manual_seed(args.seed)
    try:  # eager unless --compile: for a one-off sample, compiling costs more than it saves
        with amp:
            out = model.generate(torch.tensor([ids]), n, args.temperature, args.top_k, generator=g,
                                 compile=args.compile and ("reduce-overhead" if device.startswith("cuda") else True))
    except ValueError as e:
        fail(e)
    print(tok.decode(out[0].tolist()))


def print_heads(model, path):
    rows, cfg = head_diversity(model), model.cfg
    print(f"head diversity, {path} ({cfg.attn}, {cfg.n_layer} layers x {cfg.n_head} heads): effective "
          "rank of the Gram matrix of A_h = W_Q,h W_K,hᵀ, % of H (paper §4.3, Table 3).")
    print("approximate: RoPE and QK-norm act between the projections and the scores, so attention does "
          "not use exactly these bilinear forms")
    print(f"{'layer':>5} {'uncentred':>9} {'centred':>8} {'mean similarity':>15}")
    for r in rows:
        print(f"{r['layer']:5d} {r['uncentred']:8.1f}% {r['centred']:7.1f}% {r['mean_sim']:15.3f}")
    mean = lambda k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    print(f"{'mean':>5} {mean('uncentred'):8.1f}% {mean('centred'):7.1f}% {mean('mean_sim'):15.3f}")


def print_heads_of_runs(paths, device):
    """--heads over a folder of runs: each run's mean over layers, then each design's mean ± sd."""
    keys, by_design = ("uncentred", "centred", "mean_sim"), {}
    print("head diversity, the mean over layers (approximate: see a single run's --heads)")
    for path in paths:
        model, _ = load_model(path, device)
        rows = head_diversity(model)
        m = [sum(r[k] for r in rows) / len(rows) for k in keys]
        print(f"{path} ({model.cfg.attn}): {m[0]:.1f}% uncentred, {m[1]:.1f}% centred, "
              f"mean similarity {m[2]:.3f}")
        by_design.setdefault(model.cfg.attn, []).append(m)
    print("\n| design | runs | effective rank, uncentred (% of H) | centred | mean similarity |")
    print("|---|---:|---:|---:|---:|")
    for attn in (a for a in DESIGNS if a in by_design):
        x = torch.tensor(by_design[attn], dtype=torch.float64)  # (runs, 3)
        cell = lambda i, f: f"{x[:, i].mean():{f}}" + (f" ± {x[:, i].std():{f}}" if len(x) > 1 else "")
        print(f"| {attn} | {len(x)} | {cell(0, '.1f')} | {cell(1, '.1f')} | {cell(2, '.3f')} |")


def rebuilt(model, **changes):
    """The model with settings no weight depends on changed (a longer context block_size, with its
    RoPE tables made that long; a window), the weights shared."""
    from dataclasses import replace
    from model import GPT
    cfg = replace(model.cfg, **changes)
    if cfg == model.cfg:
        return model
    with torch.device(model.lm_head.weight.device):
        out = GPT(cfg)
    # cos and sin are not in the state dict: they stay as cfg makes them
    out.load_state_dict(model.state_dict())
    return out.to(model.lm_head.weight.dtype).eval()


def print_recall(model, meta, args):
    """MQAR test accuracy at the answers over pair counts N/2, N, 2N, 4N (N: the training's, 16 for
    a text model; a mixture's largest, its other counts too) and lengths T, 2T, 4T (T: its
    context; --length: that one), on the test split's examples; then, at the first length, by the
    distance from each key to its query: a cache that forgets fails far away, a model that never
    learned fails everywhere."""
    tc, T, V, W = meta["train_config"], model.cfg.block_size, model.cfg.vocab_size, model.cfg.window
    trained, alpha = tc.get("mqar_pairs", 16), tc.get("mqar_alpha", 0.01)
    mix = trained if isinstance(trained, list) else [trained]
    N = max(mix)  # a mixture's largest count; its others are scored too
    lengths = [args.length] if args.length else [T, 2 * T, 4 * T]
    counts = sorted({*mix, max(1, N // 2), N, 2 * N, 4 * N})
    seen = f"through a window of {W}" if W else "full attention"
    print(f"MQAR test accuracy of {args.checkpoint} ({model.cfg.attn}, {seen}; trained on "
          f"{trained if tc.get('dataset') == 'mqar' else 'no'} pairs at length {T}), "
          f"{args.examples} sequences a cell, '-' where the pairs do not fit "
          f"(length >= 4 pairs, 2 pairs <= vocab_size {V} / 2):")
    print("| pairs | " + " | ".join(f"length {L}" for L in lengths) + " |")
    print("|---:|" + "---:|" * len(lengths))
    models = {L: rebuilt(model, block_size=max(L, T)) for L in lengths}  # one model a length
    near = {}  # pairs -> (hits, distances) at length T
    for n in counts:
        cells = []
        for L in lengths:
            try:
                x, y = recall.mqar(args.examples, L, n, V, (*recall.split_seed("test"), n), alpha)
            except ValueError:
                cells.append("-")
                continue
            _, hits, d = recall.answers(models[L], x, y, args.batch_size)
            near.update({n: (hits, d)} if L == lengths[0] else {})
            cells.append(f"{hits.sum().item() / len(hits):.3f}")
        print(f"| {n} | " + " | ".join(cells) + " |")
    print_by_distance(near, W, lengths[0])


def print_by_distance(near, W, T):
    """The accuracy at length T (the first of --recall's) by distance bin (recall.distance_bin),
    each count a row; with a window, also at the keys inside it (distance < W) and beyond it."""
    bins = sorted({int(b) for hits, d in near.values() for b in recall.by_bin(hits, d)})
    cols = [f"{b}-{2 * b - 1}" for b in bins] + (["inside", "beyond"] if W else [])
    print(f"\nby the distance from key to query, at length {T} (accuracy, answers in brackets)"
          + (f"; inside: distance < {W}, beyond: > {W}" if W else "") + ":")
    print("| pairs | " + " | ".join(cols) + " |")
    print("|---:|" + "---:|" * len(cols))
    cell = lambda h, n: f"{h / n:.3f} ({n})" if n else "-"  # noqa: E731
    for n, (hits, d) in near.items():
        got = recall.by_bin(hits, d)
        row = [cell(*got.get(str(b), (0, 0))) for b in bins]
        if W:
            row += [cell(hits[m].sum().item(), m.sum().item()) for m in (d < W, d > W)]
        print(f"| {n} | " + " | ".join(row) + " |")


@torch.no_grad()
def induction(model, ids, n=64, length=100, seed=0, batch_size=8):
    """Mean loss (nats) predicting the first and the second copy of n random sequences of length
    tokens (drawn from ids, a 1-D tensor) repeated once, each from an empty context. The first token
    of each copy is left out: nothing before it says what it is."""
    g = torch.Generator().manual_seed(seed)
    r = ids[torch.randint(0, len(ids), (n, length), generator=g)]
    x = torch.cat([r, r], dim=1).to(model.lm_head.weight.device)  # (n, 2·length)
    first = second = 0.0
    model.eval()
    for i in range(0, n, batch_size):
        logits, _ = model(x[i:i + batch_size, :-1])  # (b, 2·length - 1, V)
        nats = F.cross_entropy(logits.transpose(1, 2).float(), x[i:i + batch_size, 1:], reduction="none")
        first += nats[:, :length - 1].sum().item()  # targets 1 .. length-1
        second += nats[:, length:].sum().item()  # targets length+1 .. 2·length-1
    return first / (n * (length - 1)), second / (n * (length - 1))


def dataset_dir(cfg):
    """Where the run's training config says its prepared data live (train.py's dataset_dir)."""
    return os.path.join(cfg["data_dir"], f"{cfg['dataset']}_{cfg['tokenizer']}")


def seen_ids(cfg, eot):
    """The ids below eot that the run's training split holds, or all of them where it has none on
    this machine (MQAR makes its data on the fly). A byte model of Shakespeare never sees most of
    the 256 bytes and its output layer gives them almost no probability, so sequences of them would
    measure that layer, not the copying the induction score is after."""
    try:
        split = load_split(dataset_dir(cfg), "train")
    except (FileNotFoundError, ValueError):
        return torch.arange(eot)
    shards = split if isinstance(split, list) else [split]
    counts = sum(np.bincount(s, minlength=eot)[:eot] for s in shards)
    return torch.from_numpy(np.flatnonzero(counts))


def print_induction(model, meta, tok, args):
    length = min(100, model.cfg.block_size // 2)
    ids = seen_ids(meta["train_config"], min(tok.eot, model.cfg.vocab_size))
    first, second = induction(model, ids, args.examples, length, args.seed, args.batch_size)
    print(f"induction, {args.checkpoint} ({model.cfg.attn}): {args.examples} random sequences of {length} "
          f"tokens from {len(ids)} ids, repeated once: first copy {first:.4f} nats, second copy "
          f"{second:.4f}, drop {first - second:.4f}")


def print_test_loss(model, meta, tok, amp, args, device):
    T = model.cfg.block_size
    for split in ["val", "test"]:
        try:
            tokens = load_split(dataset_dir(meta["train_config"]), split, T + 1)
        except (FileNotFoundError, ValueError) as e:
            fail(e)
        with amp:
            loss, bpb = evaluate(model, tokens, T, args.batch_size, args.eval_tokens, tok.token_bytes(), device)
        print(f"{args.checkpoint}: step {meta['step']}, {model.cfg.attn}: {split} loss {loss:.4f}, "
              f"{bpb:.4f} bits/byte")


if __name__ == "__main__":
    main()

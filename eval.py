"""
Evaluate a checkpoint.

    python eval.py out/cpu_lrkv_s0/ckpt.pt          # test loss and bits per byte on the held-out split
"""
import argparse
import math
import os
import sys

import torch
import torch.distributed as dist


@torch.no_grad()
def evaluate(model, val, T, batch_size, eval_tokens, token_bytes, device, rank=0, world=1):
    """Mean cross-entropy (nats/token) and bits per byte over the first eval_tokens held-out tokens,
    cut into consecutive windows of T: the same tokens for every design and any world size.
    Ranks take windows round-robin and sum (loss, tokens, bytes) together."""
    model.eval()
    n_windows = max(1, min(eval_tokens, len(val) - 1) // T)
    mine = list(range(rank, n_windows, world))
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # nats, tokens, bytes
    for i in range(0, len(mine), batch_size):
        rows = [torch.from_numpy(val[w * T:w * T + T + 1].astype("int64")) for w in mine[i:i + batch_size]]
        xy = torch.stack(rows).to(device)
        x, y = xy[:, :-1], xy[:, 1:]
        logits, _ = model(x)
        nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum")
        sums += torch.stack([nats.double(), torch.tensor(y.numel(), dtype=torch.float64, device=device),
                             token_bytes.to(device)[y].sum()])
    if world > 1:
        dist.all_reduce(sums)
    model.train()
    nats, n, nbytes = sums.tolist()
    return nats / n, nats / (math.log(2) * nbytes)


def load_model(path, device="cpu"):
    """(model, checkpoint dict) from a train.py checkpoint, or a one-line error."""
    from model import GPT, GPTConfig
    if not os.path.exists(path):
        sys.exit(f"error: no checkpoint at {path}; train one with `python train.py`")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=False)
        model = GPT(GPTConfig(**ckpt["model_config"]))
        model.load_state_dict(ckpt["model"])
    except Exception as e:
        sys.exit(f"error: {path} is not a readable nanoKV checkpoint ({type(e).__name__}: "
                 f"{str(e).splitlines()[0][:120]}); restore it or train again")
    return model.to(device).eval(), ckpt


def main(argv=None):
    from prepare import load_split
    from tokenizer import get_tokenizer
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--eval_tokens", type=int, default=None, help="default: the run's own")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    model, ckpt = load_model(args.checkpoint, args.device)
    tc = ckpt["train_config"]
    tok = get_tokenizer(tc["tokenizer"])
    try:
        val = load_split(os.path.join("data", f"{tc['dataset']}_{tc['tokenizer']}"), "val")
    except FileNotFoundError as e:
        sys.exit(f"error: {e}")
    val = val[0] if isinstance(val, list) else val
    token_bytes = torch.tensor(tok.token_bytes(), dtype=torch.float64)
    loss, bpb = evaluate(model, val, model.cfg.block_size, args.batch_size, args.eval_tokens or tc["eval_tokens"],
                         token_bytes, args.device)
    print(f"{args.checkpoint}: step {ckpt['step']}, {model.cfg.attn}: test loss {loss:.4f}, {bpb:.4f} bits/byte")


if __name__ == "__main__":
    main()

"""
A prepared text (prepare.py) as a task train.py runs: the batch of a step, and the held-out score,
mean loss and bits per byte (evaluate), which eval.py also reports. recall.py is the other task.
"""
import math
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from prepare import load_split, prepare, read_meta, windows


@torch.no_grad()
def evaluate(model, split, T, batch_size, eval_tokens, token_bytes, device, rank=0, world=1):
    """Mean cross-entropy (nats/token) and bits per byte on a held-out split (load_split's answer; a
    sharded one: its first shard), read in windows of T tokens, each from an empty context.
    eval_tokens=None scores every token: consecutive windows, the last one ending at the split's end
    and counting only the tokens the others left. Otherwise eval_tokens // T of those windows,
    spread evenly over the split so that every document is read: the learning curve's cheaper
    estimate. The same tokens for every design and any world size: ranks take windows round-robin
    and sum (nats, tokens, bytes) together. token_bytes: the tokenizer's bytes per token."""
    split = split[0] if isinstance(split, list) else split
    n = len(split) - 1  # tokens that can be targets
    if n < T:
        raise ValueError(f"a held-out split of {len(split)} tokens is shorter than one window "
                         f"of {T + 1}")
    starts, skip = list(range(0, n - T + 1, T)), {}  # skip: leading targets already scored
    if eval_tokens is not None:
        k = max(1, min(len(starts), eval_tokens // T))
        starts = [starts[i * len(starts) // k] for i in range(k)]
    elif n % T:
        starts.append(n - T)
        skip[n - T] = T - n % T
    token_bytes = torch.as_tensor(token_bytes, dtype=torch.float64, device=device)
    model.eval()
    mine = starts[rank::world]
    # every rank makes as many forwards as the first (FSDP2 gathers weights in each, a collective):
    # one with no windows left runs window 0 and drops it
    n_batches = math.ceil(math.ceil(len(starts) / world) / batch_size)
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # nats, tokens, bytes
    for i in range(0, n_batches * batch_size, batch_size):
        ws = mine[i:i + batch_size]
        rows = [torch.from_numpy(split[s:s + T + 1].astype("int64")) for s in ws or [0]]
        xy = torch.stack(rows).to(device)  # (B, T + 1)
        x, y = xy[:, :-1], xy[:, 1:]
        logits, _ = model(x)
        nats = F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none")
        keep = torch.arange(T, device=device) >= torch.tensor([skip.get(s, 0) for s in ws or [0]],
                                                             device=device)[:, None]  # (B, T)
        if ws:
            sums += torch.stack([nats.double()[keep].sum(), keep.sum().double(),
                                 token_bytes[y][keep].sum()])
    if world > 1:
        dist.all_reduce(sums)
    model.train()
    nats, n, nbytes = sums.tolist()
    return nats / n, nats / (math.log(2) * nbytes)



class Text:
    """A prepared text as train.py runs it: the batch of a step (random windows, prepare.windows)
    and the held-out score (evaluate). MQAR's recall.MQAR is the other task, with the same face:
    check, prepare and from_config, which train.py calls in that order."""

    metric, unit = "bpb", "token"
    tokenized = True  # its vocabulary is its tokenizer's

    @staticmethod
    def check(cfg, model_config, tok):
        """A ValueError where the model cannot hold the text's tokens (cfg: train.py's config)."""
        if model_config.vocab_size < tok.vocab_size:
            raise ValueError(f"vocab_size={model_config.vocab_size} is smaller than the "
                             f"{cfg['tokenizer']} tokenizer's {tok.vocab_size}")

    @staticmethod
    def prepare(cfg):
        # the embedded corpus prepares itself on first use; anything else must be prepared first
        if cfg["dataset"] == "shakespeare":
            prepare(cfg["dataset"], cfg["tokenizer"], cfg["data_dir"])

    @classmethod
    def from_config(cls, cfg, model_config, tok, device, rank=0, world=1):
        path = os.path.join(cfg["data_dir"], f"{cfg['dataset']}_{cfg['tokenizer']}")
        return cls(path, model_config.block_size, tok.token_bytes(), device, rank, world,
                   cfg["eval_tokens"])

    def __init__(self, dataset_dir, T, token_bytes, device, rank=0, world=1, eval_tokens=None):
        splits = ("train", "val", "test")
        self.train, val, test = (load_split(dataset_dir, s, T + 1) for s in splits)
        self.held = {"val": val, "test": test}
        self.held_out = {s: read_meta(dataset_dir)[f"{s}_docs"] for s in ("val", "test")}
        shards = self.train if isinstance(self.train, list) else [self.train]
        self.n_train = sum(map(len, shards))
        self.T, self.curve_part, self.where = T, eval_tokens, (token_bytes, device, rank, world)

    def batch(self, step, seed, n, rows):
        w = windows(self.train, seed, step, n, self.T, rows)  # (len(rows), T + 1)
        return w[:, :-1], w[:, 1:]  # inputs and targets

    def score(self, model, split, part=None, batch_size=16):
        """{loss, bpb} over `part` tokens spread over the split (None: every one)."""
        loss, bpb = evaluate(model, self.held[split], self.T, batch_size, part, *self.where)
        return {"loss": loss, "bpb": bpb}

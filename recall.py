"""
Multi-query associative recall (MQAR, Arora et al. 2023, "Zoology"): what a compressed KV cache
forgets first. A sequence opens with N key-value pairs, k1 v1 k2 v2 ...; later each key comes back
once, and the model must answer with its value as the next token. Only those answers are scored.

    x, y = mqar(n=32, seq_len=128, num_pairs=16, vocab_size=256, seed=0)

Keys come from the lower half of the vocabulary and values from the upper half, both distinct
within a sequence; every other position holds a random token. How far a query sits from the pairs
follows Zoology's power law: slot j after them has weight (j + 1)^(alpha - 1), so a small alpha
puts most queries near the pairs. The same arguments give the same tensors, and train.py draws its
training, validation and test examples from disjoint seeds (split_seed).
"""
import torch
import torch.nn.functional as F

IGNORE = -100  # the target of a position that is not an answer: F.cross_entropy's ignore_index
SPLITS = ("train", "val", "test")


def check(seq_len, num_pairs, vocab_size):
    """A ValueError unless num_pairs pairs and their queries fit seq_len and the vocabulary."""
    if num_pairs < 1:
        raise ValueError(f"num_pairs={num_pairs} must be at least 1")
    if 4 * num_pairs > seq_len:  # the pairs, then at least as many query slots of two tokens each
        raise ValueError(f"seq_len={seq_len} must be at least 4·num_pairs = {4 * num_pairs}")
    if vocab_size // 2 < num_pairs:
        raise ValueError(f"vocab_size={vocab_size} must be at least 2·num_pairs = {2 * num_pairs}, "
                         "so that every key and every value of a sequence is distinct")


def mqar(n, seq_len, num_pairs, vocab_size, seed, alpha=0.01):
    """n sequences -> (x, y), int64 (n, seq_len): y[i, t] is the value that must follow x[i, t]
    where x[i, t] is a queried key, IGNORE everywhere else."""
    check(seq_len, num_pairs, vocab_size)
    g = torch.Generator().manual_seed(seed)
    half, N = vocab_size // 2, num_pairs
    keys = torch.rand(n, half, generator=g).argsort(dim=1)[:, :N]  # (n, N), distinct, in [0, half)
    values = half + torch.rand(n, vocab_size - half, generator=g).argsort(dim=1)[:, :N]  # (n, N)
    x = torch.randint(vocab_size, (n, seq_len), generator=g)  # the filler
    x[:, 0:2 * N:2], x[:, 1:2 * N:2] = keys, values
    # the query of pair i in slot j sits at 2N + 2j; the token after it stays filler
    slots = (seq_len - 2 * N) // 2
    weight = torch.arange(1, slots + 1, dtype=torch.float64) ** (alpha - 1)  # (slots,)
    where = 2 * N + 2 * torch.multinomial(weight.expand(n, slots), N, generator=g)  # (n, N), distinct
    x.scatter_(1, where, keys)
    y = torch.full_like(x, IGNORE).scatter_(1, where, values)
    return x, y


def split_seed(split, seed=0, step=0):
    """The generator seed of a batch: train's are a function of the run's seed and the step; val's
    and test's of a chunk index alone, so every run is scored on the same examples. The three
    splits' seeds differ mod 3, so no split ever draws another's seed."""
    return 3 * (seed * 2**31 + step) + SPLITS.index(split)


@torch.no_grad()
def score(model, x, y, batch_size=64):
    """The mean loss (nats) and accuracy (argmax = the value) at the answers of (x, y)."""
    was_training, device = model.training, model.lm_head.weight.device
    model.eval()
    nats = hits = answers = 0.0
    for i in range(0, len(x), batch_size):
        xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
        logits, _ = model(xb)  # (B, T, V)
        keep = yb != IGNORE
        at, want = logits[keep].float(), yb[keep]  # (answers, V), (answers,)
        nats += F.cross_entropy(at, want, reduction="sum").item()
        hits += (at.argmax(-1) == want).sum().item()
        answers += len(want)
    model.train(was_training)
    return nats / answers, hits / answers

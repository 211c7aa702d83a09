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
import numpy as np
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
    where x[i, t] is a queried key, IGNORE everywhere else. seed: an int or a tuple of ints, the
    entropy of numpy's SeedSequence, whose 128-bit streams two seeds never share (torch's CPU
    generator keeps 32 bits of a seed, so distinct seeds could draw one stream)."""
    check(seq_len, num_pairs, vocab_size)
    g = np.random.default_rng(seed)
    half, N = vocab_size // 2, num_pairs
    keys = g.random((n, half)).argsort(axis=1)[:, :N]  # (n, N), distinct, in [0, half)
    values = half + g.random((n, vocab_size - half)).argsort(axis=1)[:, :N]  # (n, N)
    x = g.integers(vocab_size, size=(n, seq_len))  # the filler
    x[:, 0:2 * N:2], x[:, 1:2 * N:2] = keys, values
    # the query of pair i in slot j sits at 2N + 2j; the token after it stays filler. N distinct
    # slots drawn without replacement by weight: the top N of log(weight) + Gumbel noise
    slots = (seq_len - 2 * N) // 2
    log_w = (alpha - 1) * np.log(np.arange(1, slots + 1))  # (slots,)
    where = 2 * N + 2 * (log_w - np.log(-np.log(g.random((n, slots))))).argsort(axis=1)[:, ::-1][:, :N]
    np.put_along_axis(x, where, keys, axis=1)
    y = np.full_like(x, IGNORE)
    np.put_along_axis(y, where, values, axis=1)
    return torch.from_numpy(x), torch.from_numpy(y)


def split_seed(split, seed=0, step=0):
    """The seed of a batch, (split, run seed, step): train's vary with the run's seed and the step;
    val's and test's are fixed, so every run is scored on the same examples. SeedSequence hashes
    the whole tuple, so no two batches of any splits, seeds or steps share a stream."""
    return SPLITS.index(split), seed, step


class MQAR:
    """MQAR as train.py runs it: the batch of a step, and the held-out score. pairs: one count, or a
    list of them (Zoology's mixture): each count fills an equal share of every batch, rows
    interleaved, and has its own held-out sets, scored apart, so one run gives the whole capacity
    curve. Its held-out sets: `examples` sequences a count and split, the same in every run."""

    metric, unit = "acc", "example"
    n_train = float("inf")  # fresh examples every step

    def __init__(self, seq_len, pairs, vocab_size, alpha=0.01, examples=1024):
        self.pairs = [pairs] if isinstance(pairs, int) else list(pairs)
        for N in self.pairs:
            check(seq_len, N, vocab_size)
        self.T, self.V, self.alpha = seq_len, vocab_size, alpha
        self.held = {s: {N: mqar(examples, seq_len, N, vocab_size, (*split_seed(s), N), alpha) for N in self.pairs}
                     for s in ("val", "test")}
        self.held_out = {s: f"recall.mqar, {examples} a count, seeds {[(*split_seed(s), N) for N in self.pairs]}"
                         for s in ("val", "test")}
        self.curve_part = max(1, examples // 4)  # the learning curve reads a quarter

    def batch(self, step, seed, n, rows):
        """Rows `rows` (a slice) of the step's n sequences -> (x, y), each (len(rows), T); every rank
        makes the whole batch and keeps its rows, so it is the same on any world size."""
        k = len(self.pairs)
        x, y = (torch.empty(n, self.T, dtype=torch.int64) for _ in range(2))
        for j, N in enumerate(self.pairs):  # count j takes rows j, j + k, ...
            m = len(range(j, n, k))
            x[j::k], y[j::k] = mqar(m, self.T, N, self.V, (*split_seed("train", seed, step), N), self.alpha)
        return x[rows], y[rows]

    def score(self, model, split, part=None, batch_size=64):
        """{loss, acc} at the answers of the first `part` examples of each count (None: all); with
        several counts, loss_pN and acc_pN for each, and loss and acc their means."""
        out = {}
        for N, (x, y) in self.held[split].items():
            out[f"loss_p{N}"], out[f"acc_p{N}"] = score(model, x[:part], y[:part], batch_size)
        if len(self.pairs) == 1:
            N, = self.pairs
            return {"loss": out[f"loss_p{N}"], "acc": out[f"acc_p{N}"]}
        k = len(self.pairs)
        return {"loss": sum(out[f"loss_p{N}"] for N in self.pairs) / k,
                "acc": sum(out[f"acc_p{N}"] for N in self.pairs) / k, **out}


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

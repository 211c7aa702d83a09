"""recall.py's MQAR examples, the accuracy and loss at their answers, and train.py on them."""
import json
import re
import math
import os
import subprocess
import sys

import pytest
import torch

import recall
from model import GPT, GPTConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mqar_examples_are_what_the_contract_says():
    n, T, N, V = 64, 96, 12, 100
    x, y = recall.mqar(n, T, N, V, seed=3)
    assert x.shape == y.shape == (n, T) and x.dtype == y.dtype == torch.int64
    assert x.min() >= 0 and x.max() < V
    keys, values = x[:, 0:2 * N:2], x[:, 1:2 * N:2]
    assert (keys < V // 2).all() and (values >= V // 2).all()
    for i in range(n):
        assert len(set(keys[i].tolist())) == N and len(set(values[i].tolist())) == N
        answers = (y[i] != recall.IGNORE).nonzero().flatten()
        assert len(answers) == N and (answers >= 2 * N).all()  # every key queried once, after the pairs
        value_of = dict(zip(keys[i].tolist(), values[i].tolist()))
        # at an answer the input is the queried key and the target its value
        assert sorted(x[i, answers].tolist()) == sorted(value_of)
        assert [value_of[k] for k in x[i, answers].tolist()] == y[i, answers].tolist()
    again = recall.mqar(n, T, N, V, seed=3)
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])
    assert not torch.equal(x, recall.mqar(n, T, N, V, seed=4)[0])


def test_alpha_sets_how_far_queries_sit_from_their_pairs():
    where = lambda a: (recall.mqar(256, 256, 8, 64, 0, alpha=a)[1] != recall.IGNORE).nonzero()[:, 1].float().mean()
    assert where(0.01) + 20 < where(1.0)  # alpha 1 is uniform over the slots: a mean near the middle


@pytest.mark.parametrize("args, word", [((64, 17, 256), "seq_len"), ((64, 8, 15), "vocab_size"),
                                        ((64, 0, 256), "num_pairs")])
def test_examples_that_cannot_exist_are_refused(args, word):
    with pytest.raises(ValueError, match=word):
        recall.mqar(2, *args, seed=0)


def test_splits_never_share_a_seed_or_an_example():
    seeds = {s: {recall.split_seed(s, seed, step) for seed in range(4) for step in range(300)}
             for s in ("train", "val", "test")}
    assert len(seeds["train"]) == 1200
    assert not (seeds["train"] & seeds["val"]) and not (seeds["train"] & seeds["test"])
    assert not (seeds["val"] & seeds["test"])
    # examples: train.py's fixed val and test sets against a run's first 50 training batches
    rows = lambda split, **k: {tuple(r) for r in recall.mqar(64, 32, 4, 64, recall.split_seed(split, **k))[0].tolist()}
    val, test = rows("val"), rows("test")
    train = set().union(*(rows("train", seed=0, step=s) for s in range(50)))
    assert not (val & test) and not (train & val) and not (train & test)


def test_every_run_seed_draws_its_own_training_examples():
    # split_seed gave 3·(seed·2^31 + step), and torch's generator keeps a seed's low 32 bits: runs 0
    # and 2 (and 1000 and 2000) drew the same sequences at every step
    task = recall.MQAR(64, [4, 8], 64, examples=2)
    first = {s: [task.batch(step, s, 8, slice(None))[0] for step in range(3)] for s in (0, 1, 2, 3, 1000, 2000)}
    rows = [tuple(r) for b in first.values() for x in b for r in x.tolist()]
    assert len(set(rows)) == len(rows) == 6 * 3 * 8  # no sequence twice, across seeds or steps
    again = recall.MQAR(64, [4, 8], 64, examples=2).batch(2, 1000, 8, slice(None))[0]
    assert torch.equal(again, first[1000][2])  # and a batch is a function of (seed, step)


def test_a_mixture_interleaves_its_counts_and_scores_each_apart():
    task = recall.MQAR(64, [4, 8, 16], 64, examples=6)
    x, y = task.batch(0, 0, 7, slice(None))  # 7 rows: counts 4, 8, 16, 4, 8, 16, 4
    assert [int((r != recall.IGNORE).sum()) for r in y] == [4, 8, 16, 4, 8, 16, 4]
    assert torch.equal(task.batch(0, 0, 7, slice(2, 5))[0], x[2:5])  # a rank's rows of the same batch
    model = tiny()
    out = task.score(model, "test", part=3)
    for N in (4, 8, 16):
        want = recall.score(model, *(t[:3] for t in task.held["test"][N]))
        assert (out[f"loss_p{N}"], out[f"acc_p{N}"]) == want
    assert out["acc"] == pytest.approx(sum(out[f"acc_p{N}"] for N in (4, 8, 16)) / 3)
    one = recall.MQAR(64, 8, 64, examples=2)  # one count: as before, plus by distance when whole
    assert set(one.score(model, "val", part=1)) == {"loss", "acc"}
    assert set(one.score(model, "val")) == {"loss", "acc", "dist"}


def tiny(attn="mha"):
    torch.manual_seed(0)
    cfg = GPTConfig(attn=attn, n_layer=2, n_head=4, n_embd=32, block_size=64, vocab_size=64)
    return GPT(cfg).eval()


def test_score_is_accuracy_and_loss_at_the_answers_by_hand():
    model = tiny()
    x, y = recall.mqar(10, 64, 8, 64, seed=1)
    with torch.no_grad():
        logits = model(x)[0]  # (10, 64, V)
    hits = nats = 0.0
    for i in range(10):
        for t in range(64):
            if y[i, t] != recall.IGNORE:
                hits += float(logits[i, t].argmax() == y[i, t])
                nats -= logits[i, t].log_softmax(-1)[y[i, t]].item()
    loss, acc = recall.score(model, x, y, batch_size=3)  # batches that do not divide the set
    assert acc == pytest.approx(hits / 80, abs=1e-12) and loss == pytest.approx(nats / 80, rel=1e-5)
    # a head of zeros ties every token, so argmax says token 0, a key, never a value: accuracy 0
    model.lm_head.weight.data.zero_()
    assert recall.score(model, x, y) == (pytest.approx(math.log(64)), 0.0)


@pytest.mark.parametrize("attn", ["mha", "lrkv", "mla"])
def test_no_gradient_reaches_a_position_that_is_not_an_answer(attn):
    model = tiny(attn).train()
    x, y = recall.mqar(4, 64, 8, 64, seed=2)
    out = {}
    def keep(module, args, h):
        h = h[0]  # a block returns its output and the K/V its group's next layer reads
        h.retain_grad()
        out["h"] = h
    model.h[-1].register_forward_hook(keep)
    _, loss = model(x, y)
    loss.backward()
    g = out["h"].grad.abs().sum(-1)  # (4, 64): how much each position's last hidden state moves the loss
    answer = y != recall.IGNORE
    assert (g[~answer] == 0).all() and (g[answer] > 0).all()


def run(tmp, *args):
    cmd = [sys.executable, "train.py", "config/mqar.py", f"--out_dir={tmp}", "--run_name=r", "--n_embd=32",
           "--block_size=64", "--mqar_pairs=8", "--vocab_size=64", "--batch_size=8", "--total_batch_tokens=512",
           "--max_iters=6", "--eval_interval=3", "--log_interval=1", "--mqar_examples=40", "--warmup_iters=2", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_train_on_mqar_logs_accuracy_and_scores_the_fixed_sets(tmp_path):
    p = run(tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(s) for s in open(tmp_path / "r" / "log.jsonl")]
    header, score = lines[0], next(r for r in lines if r["type"] == "score")
    assert header["config"]["dataset"] == "mqar" and "(1, 0, 0, 8)" in header["held_out"]["val"]
    curve = [r for r in lines if r["type"] == "step" and "test_acc" in r]
    assert [r["step"] for r in curve] == [0, 3, 6] and all(0 <= r["test_acc"] <= 1 for r in curve)
    # the score: the fixed sets, scored again here from the checkpoint
    from checkpoint import load_model
    model, _ = load_model(str(tmp_path / "r" / "ckpt.pt"), "cpu")
    for split in ("val", "test"):
        x, y = recall.mqar(40, 64, 8, 64, (*recall.split_seed(split), 8))
        loss, acc = recall.score(model, x, y)
        assert score[f"{split}_acc"] == pytest.approx(acc) and score[f"{split}_loss"] == pytest.approx(loss)


def test_train_on_a_mixture_logs_each_count(tmp_path):
    p = run(tmp_path, "--mqar_pairs=[4,8]", "--max_iters=3")
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(s) for s in open(tmp_path / "r" / "log.jsonl")]
    assert lines[0]["config"]["mqar_pairs"] == [4, 8]
    score = next(r for r in lines if r["type"] == "score")
    for split in ("val", "test"):
        accs = [score[f"{split}_acc_p{N}"] for N in (4, 8)]
        assert score[f"{split}_acc"] == pytest.approx(sum(accs) / 2)
    assert all("test_acc_p4" in r for r in lines if r["type"] == "step" and "test_acc" in r)


def test_mqar_runs_at_the_presets_vocabulary(tmp_path):
    # train.py padded the byte tokenizer's vocabulary (320) over the preset's, so E4 ran at 320 where
    # the preset said 256: a preset's vocabulary, changed here to 128, is what the run uses
    flags = ["config/mqar.py", f"--out_dir={tmp_path}", "--run_name=r", "--n_embd=32", "--block_size=64",
             "--mqar_pairs=8", "--batch_size=8", "--total_batch_tokens=512", "--max_iters=1", "--eval_interval=1",
             "--mqar_examples=8", "--warmup_iters=1"]
    code = ("import runpy, sys, model; model.PRESETS['mqar']['vocab_size'] = 128; "
            f"sys.argv = ['train.py'] + {flags!r}; runpy.run_path('train.py', run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    header = json.loads(open(tmp_path / "r" / "log.jsonl").readline())
    assert header["config"]["vocab_size"] == 128


def test_mqar_that_does_not_fit_is_one_line(tmp_path):
    p = run(tmp_path, "--mqar_pairs=17")
    assert p.returncode == 2 and p.stderr.startswith("error: ") and "seq_len=64" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


class Oracle(torch.nn.Module):
    """Logits that know the repeat: at position t >= length, all mass on the token length - 1 back
    (what follows the earlier copy of x[t]); uniform before. Its induction drop is ln(V) exactly."""

    def __init__(self, V, length):
        super().__init__()
        self.V, self.length, self.lm_head = V, length, torch.nn.Linear(1, V)

    def forward(self, x):
        logits = torch.zeros(*x.shape, self.V)
        t = torch.arange(self.length, x.size(1))
        logits[:, t] = 50.0 * torch.nn.functional.one_hot(x[:, t - self.length + 1], self.V).float()
        return logits, None


def test_induction_scores_the_second_copy_against_the_first():
    import eval as evaluation
    first, second = evaluation.induction(Oracle(64, 20), torch.arange(64), n=6, length=20, batch_size=4)
    assert first == pytest.approx(math.log(64), rel=1e-6) and second < 1e-6


def test_induction_draws_only_the_tokens_training_saw(tmp_path):
    # random bytes a Shakespeare model never saw cost ~13 nats at the output layer whatever the
    # attention does: the score draws from the training split's own tokens (results.md, Induction)
    import eval as evaluation
    (tmp_path / "a.txt").write_text("abba cab " * 400)
    subprocess.run([sys.executable, "prepare.py", "text", f"--input={tmp_path}/a.txt", "--name=abc",
                    f"--data_dir={tmp_path / 'data'}"], cwd=ROOT, check=True, capture_output=True)
    tc = {"data_dir": str(tmp_path / "data"), "dataset": "abc", "tokenizer": "byte"}
    ids = evaluation.seen_ids(tc, 256)
    assert ids.tolist() == sorted(b"abc ")
    seen = []

    class Recorder(Oracle):
        def forward(self, x):
            seen.append(x)
            return super().forward(x)

    evaluation.induction(Recorder(256, 20), ids, n=6, length=20, batch_size=4)
    assert set(torch.cat(seen).unique().tolist()) == set(b"abc ")
    assert evaluation.seen_ids({**tc, "dataset": "mqar"}, 64).tolist() == list(range(64))  # no split: all


def test_eval_recall_and_induction_on_a_checkpoint(tmp_path, capsys):
    assert run(tmp_path).returncode == 0
    ckpt = str(tmp_path / "r" / "ckpt.pt")
    p = subprocess.run([sys.executable, "eval.py", ckpt, "--recall", "--induction", "--examples=8"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    by_length, by_distance = p.stdout.split("\nby the distance")  # two tables
    table = {int(r.split("|")[1]): [c.strip() for c in r.split("|")[2:-1]] for r in by_length.splitlines()
             if re.match(r"\| \d+ \|", r)}
    assert sorted(table) == [4, 8, 16, 32] and table[32][0] == "-"  # 32 pairs need a length of 128
    import eval as evaluation
    from checkpoint import load_model
    model, _ = load_model(ckpt, "cpu")
    for col, T in enumerate((64, 128)):  # the training length, and twice it (RoPE tables made longer)
        x, y = recall.mqar(8, T, 8, 64, (*recall.split_seed("test"), 8))
        assert table[8][col] == f"{recall.score(evaluation.rebuilt(model, block_size=T), x, y)[1]:.3f}"
        if T == 64:  # by distance: each bin's answers, and hits, as recall.by_bin counts them
            _, hits, d = recall.answers(model, x, y)
            row = next(r for r in by_distance.splitlines() if r.startswith("| 8 |"))
            want = [f"{h / n:.3f} ({n})" for h, n in recall.by_bin(hits, d).values()]
            assert [c.strip() for c in row.split("|")[2:-1] if c.strip() != "-"] == want
    first, second = evaluation.induction(model, torch.arange(64), 8, 32)
    assert f"first copy {first:.4f} nats, second copy {second:.4f}" in p.stdout
    # --window at inference, --length one length: inside and beyond the window, by hand
    evaluation.main([ckpt, "--recall", "--examples=8", "--length=64", "--window=16",
                     "--device=cpu"])
    out = capsys.readouterr().out
    assert "through a window of 16" in out and "| pairs | length 64 |\n" in out
    x, y = recall.mqar(8, 64, 8, 64, (*recall.split_seed("test"), 8))
    _, hits, d = recall.answers(evaluation.rebuilt(model, window=16), x, y)
    cells = [f"{hits[m].sum().item() / m.sum().item():.3f} ({m.sum().item()})"
             for m in (d < 16, d > 16)]
    row = next(r for r in out.split("by the distance")[1].splitlines() if r.startswith("| 8 |"))
    assert row.endswith(f"| {cells[0]} | {cells[1]} |")


def test_the_mqar_config_trains_at_the_rate_e6_chose():
    # at the paper's rate MHA, the reference, solved nothing (docs/runs/e6a): the config must not
    # hand a user that setting; stage B's validity runs ran at the chosen rate
    import runpy
    from analysis import logs
    rates = {r["config"]["matrix_lr"] for r in logs.load_runs([os.path.join(ROOT, "docs", "runs", "e6b")])}
    assert len(rates) == 1 and runpy.run_path(os.path.join(ROOT, "config", "mqar.py"))["matrix_lr"] in rates


@pytest.mark.parametrize("width", [32, 64, 128])
def test_the_mqar_config_gives_every_design_its_default_for_the_width(width):
    # it took the cpu preset's LRKV r=13 and MLA d_c=32, which E4's plan does not (and r=13 > d_h at 32)
    import runpy
    from model import preset
    c = runpy.run_path(os.path.join(ROOT, "config", "mqar.py"))
    d_h = width // c.get("n_head", 4)
    cfg = lambda attn: preset(c["preset"], attn=attn, n_embd=width)  # noqa: E731
    assert cfg("lrkv").lrkv_rank == round(0.4 * d_h) and cfg("mla").mla_kv_rank == d_h
    assert cfg("mla").mla_rope_dim == d_h // 2 and cfg("gqa").n_kv_head == 2 and cfg("mha").n_layer == 2
    assert cfg("mha").block_size == 128 and cfg("mha").vocab_size == 320 and cfg("mha").attn_scale == 2.0


def test_reproduce_sh_lists_the_recall_grid():
    env = {**os.environ, "SWEEP": "recall", "DRY": "1", "DESIGNS": "mha lrkv", "WIDTHS": "32 64", "PAIRS": "8",
           "LRS": "1 2", "SEEDS": "5"}
    p = subprocess.run(["bash", "reproduce.sh"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    cmds = p.stdout.splitlines()
    names = [c.split("--run_name=")[1].split()[0] for c in cmds]
    assert names == [f"{a}_d{w}_p8_lr{m}_s5" for a in ("mha", "lrkv", "mha_w32") for w in (32, 64) for m in (1, 2)]
    assert all(c.startswith("train.py config/mqar.py --attn=") and "--out_dir=out/recall" in c for c in cmds)
    assert "--attn=lrkv --n_embd=64 --mqar_pairs=8 --matrix_lr=0.04 --seed=5" in cmds[7]
    assert "--attn=mha --n_embd=64 --window=32 --mqar_pairs=8 --matrix_lr=0.04 --seed=5" in cmds[-1]
    # by default, E6's setting: the config's mixture and rate, each design and the window beside MHA
    p = subprocess.run(["bash", "reproduce.sh"], cwd=ROOT, env={**os.environ, "SWEEP": "recall", "DRY": "1"},
                       capture_output=True, text=True)
    cmds = p.stdout.splitlines()
    assert len(cmds) == 6 and not any("--mqar_pairs" in c or "--matrix_lr" in c for c in cmds), cmds
    assert cmds[-1].startswith("train.py config/mqar.py --attn=mha --n_embd=64 --window=32 --seed=0")
    p = subprocess.run(["bash", "reproduce.sh"], cwd=ROOT, env={**env, "PAIRS": "8x"}, capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("error: ")


class Guesses(torch.nn.Module):
    """A model whose argmax at (row, position) is guess[row, position], whatever batch it is in."""
    def __init__(self, x, guess, V, window=0):
        super().__init__()
        self.x, self.guess, self.V = x, guess, V
        self.lm_head = torch.nn.Linear(1, 1)
        self.cfg = type("cfg", (), dict(window=window))

    def forward(self, xb):
        rows = [next(i for i in range(len(self.x)) if torch.equal(self.x[i], r)) for r in xb]
        return torch.nn.functional.one_hot(self.guess[rows], self.V).float(), None


def test_scores_by_distance_on_a_hand_built_example():
    V, I = 16, recall.IGNORE
    # row 0: 2 pairs (3 9) (5 12), key 5 queried at 6, key 3 at 12; a filler 3 at position 4, an
    # even position after the pairs, is no key. Row 1: 1 pair (2 8), queried at 14.
    x = torch.tensor([[3, 9, 5, 12, 3, 0, 5, 1, 1, 1, 1, 1, 3, 1, 1, 1],
                      [2, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1]])
    y = torch.full_like(x, I)
    y[0, 6], y[0, 12], y[1, 14] = 12, 9, 8
    assert recall.distances(x, y).tolist() == [6 - 2, 12 - 0, 14 - 0]  # row-major order
    guess = torch.zeros_like(x)
    guess[0, 6], guess[0, 12], guess[1, 14] = 12, 9, 0  # right, right, wrong
    nats, hits, d = recall.answers(Guesses(x, guess, V), x, y, batch_size=1)
    assert hits.tolist() == [True, True, False]
    # bins [4, 8) and [8, 16): the near answer alone, the two far ones together
    assert recall.by_bin(hits, d) == {"4": [1, 1], "8": [1, 2]}
    assert [recall.distance_bin(k) for k in (1, 2, 3, 4, 7, 8, 15, 16)] == [1, 2, 2, 4, 4, 8, 8, 16]
    # MQAR.score: the whole split by distance; a window's reach, the answers inside it (d < 8)
    task = recall.MQAR(16, 1, V, examples=1)
    task.pairs, task.held["test"] = [2], {2: (x, y)}
    out = task.score(Guesses(x, guess, V), "test")
    assert out["acc"] == 2 / 3 and out["dist"] == {"4": [1, 1], "8": [1, 2]}
    assert not task.solved(out, 0.99)
    windowed = task.score(Guesses(x, guess, V, window=8), "test")
    assert windowed["acc_win"] == 1.0 and task.solved(windowed, 0.99)
    guess[0, 6] = 0  # the near answer wrong: the window's reach holds nothing right
    assert task.score(Guesses(x, guess, V, window=8), "test", part=2)["acc_win"] == 0.0
    # a count with no answer inside the window (row 1's key is 14 back) has nothing to reach: it
    # is None and left out of the solve rule, not read as 0 (E7's window of 16 at 32 pairs)
    guess[0, 6] = 12
    task.pairs, task.held["test"] = [2, 1], {2: (x[:1], y[:1]), 1: (x[1:], y[1:])}
    mixed = task.score(Guesses(x, guess, V, window=8), "test")
    assert mixed["acc_win_p2"] == 1.0 and mixed["acc_win_p1"] is None and task.solved(mixed, 0.99)
    assert not task.solved(task.score(Guesses(x, guess, V, window=2), "test"), 0.99)  # none inside


def test_every_distance_points_back_to_its_key():
    x, y = recall.mqar(50, 128, 16, 320, seed=3)
    d = recall.distances(x, y)
    b, t = (y != recall.IGNORE).nonzero(as_tuple=True)
    key = t - d
    assert (key % 2 == 0).all() and (key < 32).all() and (x[b, key] == x[b, t]).all()
    assert (y[b, t] == x[b, key + 1]).all()  # the value right after the key is the answer

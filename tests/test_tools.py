"""The field's tools, offline: weights in safetensors, lm-evaluation-harness tasks, a tracker."""
import json
import os
import subprocess
import sys
import types

import pytest
import torch

from checkpoint import load_model
from common import autocast
from test_generate import one_thread  # noqa: F401  tiny models score and decode faster on one thread
from test_model import randomized, tiny
from test_train import ROOT, read_log, train
from tokenizer import get_tokenizer

pytest.importorskip("safetensors", reason="pip install -r requirements-dev.txt")


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir):
    """A tiny trained run (byte tokenizer), its checkpoint and its export."""
    import test_train
    test_train.DATA = data_dir
    tmp = tmp_path_factory.mktemp("run")
    # a context that holds shakespeare_gen's passage and its 64 new tokens
    train(tmp, "--attn=lrkv", "--block_size=192", "--total_batch_tokens=768", "--max_iters=6", "--eval_interval=6",
          "--run_name=r")
    ckpt = str(tmp / "r" / "ckpt.pt")
    p = subprocess.run([sys.executable, "eval.py", ckpt, f"--export={tmp / 'export'}"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return ckpt, str(tmp / "export")


def test_an_export_is_a_checkpoint_to_eval_py(run):
    ckpt, export = run
    a, meta_a = load_model(ckpt)
    b, meta_b = load_model(export)
    idx = torch.randint(0, 256, (2, 32))
    assert torch.equal(a(idx)[0], b(idx)[0])
    assert meta_b["step"] == meta_a["step"] == 6 and meta_b["train_config"]["tokenizer"] == "byte"
    out = {}
    for path in (ckpt, export):  # the test loss, and a greedy sample, agree
        p = subprocess.run([sys.executable, "eval.py", path, "--sample=ROMEO:", "--max_new_tokens=8",
                            "--temperature=0"], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        out[path] = p.stdout
    assert out[ckpt] == out[export] and out[ckpt].startswith("ROMEO:")


# the harness adapter ---------------------------------------------------------------------------

lm_eval = pytest.importorskip("lm_eval", reason="pip install -r requirements-dev.txt")


def adapter(model, batch_size=3):
    from harness import NanoKV
    return NanoKV(model, get_tokenizer("byte"), autocast("cpu", "fp32"), batch_size)


def requests(*args):
    return [types.SimpleNamespace(args=a) for a in args]


def own_loss(model, ids, n):
    # the model's own summed cross-entropy of the last n of ids given the ones before
    idx = torch.tensor([ids[:-1]])
    targets = torch.tensor([[-100] * (len(ids) - 1 - n) + ids[-n:]])
    with torch.no_grad():
        return model(idx, targets)[1].item() * n


def test_loglikelihoods_are_the_models_own_losses():
    model = randomized(tiny("lrkv", vocab_size=257))
    tok = get_tokenizer("byte")
    pairs = [("The cat sat", " on the mat"), ("", "hello"), ("To be, or not to be: ", "that"), ("x" * 40, " long")]
    got = adapter(model).loglikelihood(requests(*pairs))
    for (ctx, cont), (lp, greedy) in zip(pairs, got):
        c = ctx.rstrip()
        cont = ctx[len(c):] + cont  # the context's trailing space moves to the continuation
        ids = (tok.encode(c) or [tok.eot]) + tok.encode(cont)
        ids = ids[-(model.cfg.block_size + 1):]  # the 40 x's: the start beyond the context is cut
        assert lp == pytest.approx(-own_loss(model, ids, len(tok.encode(cont))), rel=1e-5, abs=1e-5)
        assert isinstance(greedy, bool)
    # a continuation that is the model's own greedy choice is greedy; change its last token and it is not
    ctx = tok.encode("abc")
    greedy = model.generate(torch.tensor([ctx]), 4, temperature=0)[0, 3:].tolist()
    other = greedy[:-1] + [(greedy[-1] + 1) % 257]
    assert [g for _, g in adapter(model).score([(ctx, greedy), (ctx, other)])] == [True, False]


def test_rolling_loglikelihood_scores_every_token_once():
    model = randomized(tiny("mla", vocab_size=257))
    tok = get_tokenizer("byte")
    T = model.cfg.block_size
    short, long = "All the world's a stage", "And all the men and women merely players; " * 3  # 129 bytes: 5 windows
    for text in (short, long):
        ids = tok.encode(text)
        (lp,) = adapter(model).loglikelihood_rolling(requests((text,)))
        # by hand: the first window from eot, then each next window of T inputs ending at its last target
        want, done = -own_loss(model, [tok.eot] + ids[:T], min(T, len(ids))), min(T, len(ids))
        while done < len(ids):
            end = min(done + T, len(ids))
            want -= own_loss(model, ids[end - T - 1:end], end - done)
            done = end
        assert lp == pytest.approx(want, rel=1e-5)


def test_greedy_generation_is_model_generate():
    model = randomized(tiny("gqa", vocab_size=257))
    tok = get_tokenizer("byte")
    ctx = "Now is the winter"
    want = model.generate(torch.tensor([tok.encode(ctx)]), 12, temperature=0)[0, len(ctx):].tolist()
    text = tok.decode(want[:want.index(tok.eot)] if tok.eot in want else want)  # a document ends at eot
    (got,) = adapter(model).generate_until(requests((ctx, {"until": [], "max_gen_toks": 12})))
    assert got == text
    for stop in [text[3:5], "no such text"]:  # until cuts at the first stop string
        (cut,) = adapter(model).generate_until(requests((ctx, {"until": [stop], "max_gen_toks": 12})))
        assert cut == text.split(stop)[0]
    # and decoding stops there: the stop string ends at the 5th new token, so 5 forwards, not 12
    nano, calls = adapter(model), []
    forward = model.forward
    model.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    try:
        nano.generate_until(requests((ctx, {"until": [text[3:5]], "max_gen_toks": 12})))
    finally:
        del model.forward
    assert len(calls) == 5


def test_tasks_run_through_the_harness(run, tmp_path):
    # a three-item multiple-choice task of our own, from a JSON file: no network
    _, export = run
    items = [{"question": "Which is a colour?", "choices": ["red", "run", "rain"], "answer": 0},
             {"question": "ROMEO:", "choices": [" But soft", " xq zv", " 1234"], "answer": 0},
             {"question": "The king is", "choices": [" dead", " qqq", " 00"], "answer": 0}]
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in items))
    (tmp_path / "tiny.yaml").write_text(
        "task: nanokv_tiny\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data}\ntest_split: test\noutput_type: multiple_choice\n"
        "doc_to_text: '{{question}}'\ndoc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\n"
        "metric_list:\n  - metric: acc\n")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "eval.py", export, "--tasks=nanokv_tiny", f"--include_path={tmp_path}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    row = [line for line in p.stdout.splitlines() if "nanokv_tiny" in line]  # the harness's own table
    cells = [c.strip() for c in row[0].split("|")]
    # accuracy by hand: the choice the adapter scores likeliest, after the harness's " " delimiter
    model, _ = load_model(export)
    lm = adapter(model)
    right = [max(range(3), key=lambda c: lm.loglikelihood(requests((i["question"], " " + i["choices"][c])))[0][0])
             == i["answer"] for i in items]
    assert float(cells[cells.index("acc") + 2]) == pytest.approx(sum(right) / 3, abs=1e-4)



def harness_table(cmd, env, cwd):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [[c.strip() for c in line.split("|")] for line in p.stdout.splitlines() if "|none" in line.replace(" ", "")]
    task, table = None, {}
    for r in rows:  # a task's second metric leaves its name out
        task = r[1] or task
        table[task, r[5]] = float(r[7])
    return table


def test_the_standard_harness_model_scores_an_export_as_eval_py_does(run, tmp_path):
    # lm-evaluation-harness's own `--model hf` on the exported folder, against eval.py --tasks (our
    # adapter) on the checkpoint: the same accuracies on the same items, and the same generated
    # strings. Run from elsewhere than the repository: the tasks find their data from any folder
    pytest.importorskip("transformers")
    from harness import NanoKV
    ckpt, export = run
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    tasks, limit = "shakespeare_mc,shakespeare_gen", 8
    hf = harness_table([sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
                        f"pretrained={export},trust_remote_code=True", "--tasks", tasks, "--include_path",
                        os.path.join(ROOT, "tasks"), "--limit", str(limit), "--device", "cpu", "--batch_size", "4",
                        "--log_samples", "--output_path", str(tmp_path / "out")], env, tmp_path)
    ours = harness_table([sys.executable, os.path.join(ROOT, "eval.py"), ckpt, f"--tasks={tasks}",
                          f"--include_path={os.path.join(ROOT, 'tasks')}", f"--limit={limit}"], env, tmp_path)
    assert hf == ours and set(hf) == {("shakespeare_mc", "acc"), ("shakespeare_mc", "acc_norm"),
                                      ("shakespeare_gen", "exact_match")}
    # the strings the `hf` model generated (batches of 4, padded on the left), as our adapter makes them
    logged = (tmp_path / "out").rglob("samples_shakespeare_gen_*.jsonl")
    samples = [json.loads(line) for f in logged for line in open(f)]
    model, _ = load_model(ckpt)
    gen = {"until": ["\n"], "max_gen_toks": 64, "do_sample": False}  # tasks/shakespeare_gen.yaml's
    want = adapter(model).generate_until(requests(*[(s["arguments"]["gen_args_0"]["arg_0"], gen) for s in samples]))
    assert len(samples) == limit and [s["resps"][0][0] for s in samples] == want


def test_an_unknown_task_is_one_line(run, monkeypatch, capsys):
    # the harness's task index (its ~15K tasks take seconds to read) stood in for by an empty one
    import eval as nanokv_eval
    from test_train import exits_in_one_line
    monkeypatch.setattr("lm_eval.tasks.TaskManager", lambda **kw: types.SimpleNamespace(all_tasks=[]))
    err = exits_in_one_line(nanokv_eval.main, [run[0], "--tasks=no_such_task"], capsys)
    assert "no harness task 'no_such_task'" in err and "--include_path" in err


# the tracker -----------------------------------------------------------------------------------

def test_trackio_receives_every_logged_number_and_a_resume_continues_it(tmp_path, data_dir):
    pytest.importorskip("trackio", reason="pip install -r requirements-dev.txt")
    import test_train
    test_train.DATA = data_dir
    env = {"TRACKIO_DIR": str(tmp_path / "trackio")}
    train(tmp_path, "--max_iters=4", "--eval_interval=2", "--run_name=t", "--tracker=trackio", env=env)
    train(tmp_path, "--max_iters=6", "--eval_interval=2", "--run_name=t", "--tracker=trackio", "--resume", env=env)
    _, steps = read_log(tmp_path / "t" / "log.jsonl")
    code = ("import json; from trackio.sqlite_storage import SQLiteStorage as S; "
            "print(json.dumps([S.get_runs('nanokv'), S.get_logs('nanokv', 't'), S.get_run_config('nanokv', 't')]))")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True)
    runs, logged, config = json.loads(p.stdout.strip().splitlines()[-1])
    assert runs == ["t"]  # the resumed run is the same tracked run
    assert [r["step"] for r in logged] == [s["step"] for s in steps] == list(range(7))
    for rec, line in zip(logged, steps):
        numbers = {k: v for k, v in line.items() if k not in ("type", "step") and isinstance(v, (int, float))}
        assert numbers and {k: rec[k] for k in numbers} == numbers
    score = [json.loads(l) for l in open(tmp_path / "t" / "log.jsonl")][-2]  # the last step's every held-out token
    assert score["type"] == "score" and score["step"] == 6
    assert {k: logged[-1][f"score_{k}"] for k in ("val_loss", "test_loss")} == {k: score[k] for k in ("val_loss", "test_loss")}
    assert config["attn"] == "mha" and config["max_iters"] == 6 and config["n_layer"] == 2  # the resumed run's


def test_a_missing_tracker_is_one_line_before_anything_is_written(tmp_path, monkeypatch):
    from test_train import refused
    p = refused(tmp_path, "--tracker=tensorboard", "--run_name=x")
    assert p.returncode == 2 and "none, trackio, wandb" in p.stderr and not (tmp_path / "x").exists()
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    p = refused(tmp_path, "--tracker=wandb", "--run_name=x")
    assert p.returncode == 2 and "pip install wandb" in p.stderr and not (tmp_path / "x").exists()


def test_wandb_gets_the_same_calls_and_keeps_its_run_id(tmp_path, monkeypatch):
    # wandb itself needs an account or a heavy offline setup: a stand-in records what track.py asks
    import track
    calls = []
    fake = types.SimpleNamespace(util=types.SimpleNamespace(generate_id=lambda: f"id{len(calls)}"),
                                 init=lambda **kw: calls.append(kw) or types.SimpleNamespace(log=None, finish=None))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    track.start("wandb", "p", "r", str(tmp_path), {"a": 1}, resume=False)
    track.start("wandb", "p", "r", str(tmp_path), {"a": 1}, resume=True)
    assert calls[0]["id"] == calls[1]["id"] == "id0" and calls[1]["resume"] == "allow" and calls[0]["name"] == "r"


def test_generation_batches_prompts_and_gives_each_the_text_it_gives_alone():
    # contexts of several lengths and two settings, batch_size 3: left-padded batches, each row's
    # text as a batch of one gives it, and stop strings cut each row on its own
    model = randomized(tiny("lrkv", vocab_size=257))
    contexts = ["Now is the winter", "O", "To be, or not to be, that is", "", "Friends, Romans"]
    reqs = [(c, {"until": [], "max_gen_toks": 10}) for c in contexts]
    reqs += [(c, {"until": ["e"], "max_gen_toks": 14}) for c in contexts[:4]]
    alone = [adapter(model, batch_size=1).generate_until(requests(r))[0] for r in reqs]
    calls, generate = [], model.generate
    model.generate = lambda idx, *a, **k: calls.append(len(idx)) or generate(idx, *a, **k)
    try:
        assert adapter(model, batch_size=3).generate_until(requests(*reqs)) == alone
    finally:
        del model.generate
    assert calls == [3, 3, 3, 3]  # 5 and 4 prompts of two settings: two batches each, each of 3
    assert len(set(alone)) > 3 and any("e" not in t and t for t in alone[5:])  # the texts differ, stops cut


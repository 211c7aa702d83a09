"""eval.py --export: a transformers folder that AutoModelForCausalLM loads offline, for every design,
with the same logits, the same greedy tokens and the same harness scores as nanoKV's own GPT."""
import filecmp
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import export
from model import GPT
from test_generate import one_thread  # noqa: F401  tiny models decode faster on one thread
from test_model import SHARING, VARIANTS, randomized, tiny
from test_train import ROOT

transformers = pytest.importorskip("transformers", reason="pip install -r requirements-dev.txt")
os.environ["HF_HUB_OFFLINE"] = "1"
# this file's second pass, on the newest transformers (test_every_export_test_passes_on_the_newest_
# release_too): every design where the issue of 5.24 was seen, one where a tool stacks on generate
SECOND_PASS = bool(os.environ.get("NANOKV_NEWEST"))


def exported(tmp_path, attn, **kw):
    model = randomized(tiny(attn, vocab_size=320, block_size=64, **kw))
    kind = export.write(model, {"step": 7, "train_config": {"tokenizer": "byte"}}, "byte", str(tmp_path / "x"))
    return model, str(tmp_path / "x"), kind


# the designs and their variants; of K/V sharing, each class's way once (K=V and kv_share together)
EXPORTED = [v for v in VARIANTS if v not in SHARING] + \
    [("mha", dict(k_eq_v=True, kv_share=2)), ("mla", dict(kv_share=2)), ("lrkv", dict(kv_share=2))]


@pytest.mark.parametrize("attn, kw", EXPORTED)
def test_autoModel_loads_every_design_with_its_logits_and_greedy_tokens(tmp_path, attn, kw):
    model, path, kind = exported(tmp_path, attn, **kw)
    assert kind == ("nanochat" if export.native(model.cfg) else "nanokv")  # attn_scale 1: MHA, GQA, MQA
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True).eval()
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (hf(idx).logits - model(idx)[0]).abs().max() < 1e-5
    prompt = idx[:1, :8]
    assert torch.equal(hf.generate(prompt, max_new_tokens=32, do_sample=False), model.generate(prompt, 32, 0, stop=256))  # both stop at eot
    # save, load, save again: the same bytes; and nanoKV reads the folder back as it was
    hf.save_pretrained(tmp_path / "again")
    assert filecmp.cmp(f"{path}/model.safetensors", tmp_path / "again" / "model.safetensors", shallow=False)
    back, meta = export.read(path)
    assert back.cfg == model.cfg and meta["step"] == 7
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), model.state_dict().values()))


@pytest.mark.parametrize("attn", ["mha", "gqa", "mqa"])
def test_mha_gqa_mqa_at_the_papers_scale_load_as_transformers_own_nanochat(tmp_path, attn):
    model, path, kind = exported(tmp_path, attn, attn_scale=1.0)
    assert kind == "nanochat" and not any(f.endswith(".py") for f in os.listdir(path))
    hf = transformers.AutoModelForCausalLM.from_pretrained(path).eval()  # no remote code
    assert type(hf).__name__ == "NanoChatForCausalLM"
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (hf(idx).logits - model(idx)[0]).abs().max() < 1e-5
    prompt = idx[:1, :8]
    assert torch.equal(hf.generate(prompt, max_new_tokens=32, do_sample=False), model.generate(prompt, 32, 0, stop=256))  # both stop at eot
    back, _ = export.read(path)
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), model.state_dict().values()))


@pytest.mark.parametrize("name", ["byte", "gpt2"])
def test_the_tokenizer_goes_along(tmp_path, name):
    from tokenizer import get_tokenizer
    tok = get_tokenizer(name)
    export.tokenizer_files(name, tok.eot, 1024, str(tmp_path))
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = "ROMEO: But soft, what light through yonder window breaks? é ☃ 1234\n\tend"
    assert hf(text)["input_ids"] == tok.encode(text) and hf.decode(tok.encode(text)) == text
    assert hf.eos_token_id == hf.pad_token_id == tok.eot and hf.padding_side == "left" and hf.model_max_length == 1024


def test_a_folder_that_does_not_fit_is_one_line(tmp_path):
    _, path, _ = exported(tmp_path, "lrkv")
    cfg = json.load(open(f"{path}/config.json"))
    cfg["nanokv"]["n_embd"] = 32
    json.dump(cfg, open(f"{path}/config.json", "w"))
    with pytest.raises(ValueError, match="config.json does not match its weights") as e:
        transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
    assert len(str(e.value).splitlines()) == 1
    old = tmp_path / "old"  # an export from before: nanoKV's own config.json, no model_type
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"attn": "mha", "n_layer": 2}))
    for folder, said in ((path, "does not match its weights"), (str(old), "older export")):
        p = subprocess.run([sys.executable, "eval.py", folder], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode == 2 and p.stderr.startswith("error: ") and said in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1


# decoding through the design's own cache in transformers ---------------------------------------

# every design and factored LRKV at the cpu preset's attn_scale 2, so all export as remote code
DECODE = {"mha": {}, "gqa": {}, "mqa": {}, "mla": {}, "lrkv": {}, "lrkv_factored": dict(lrkv_factored=True)}
PROMPTS = ["ROMEO:", "To be, or not to be", "O"]  # three lengths, for a left-padded batch
WINDOW = {"lrkv_window": dict(window=16)}  # and one design with a sliding window, past its width


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (nanoKV's GPT, its export folder, transformers' model of it), each made once a worker,
    when a test first asks for it."""
    made = {}

    def get(name, **kw):
        if name not in made:
            attn = name.split("_")[0]
            model = randomized(tiny(attn, vocab_size=320, block_size=128, attn_scale=2.0, **DECODE.get(name, {}), **kw))
            path = str(tmp_path_factory.mktemp(name))
            assert export.write(model, {"step": 7, "train_config": {"tokenizer": "byte", "dataset": "shakespeare"}},
                                "byte", path) == "nanokv"
            hf = transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
            made[name] = model, path, hf.eval()
        return made[name]
    return get


def greedy(hf, idx, n, **kw):
    # every one of n tokens, as nanoKV's generate without stop=: no end at eot
    return hf.generate(idx, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=256, **kw)


@pytest.mark.parametrize("name", list(DECODE) + ["lrkv_window"])
def test_transformers_generate_decodes_through_the_designs_own_cache(built, name):
    import flops
    model, path, hf = built(name, **WINDOW.get(name, {}))
    idx = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(0))
    cached = greedy(hf, idx, 64)  # transformers' default: a cache
    assert torch.equal(cached, greedy(hf, idx, 64, use_cache=False)) and torch.equal(cached, model.generate(idx, 64, 0))
    # beam search reorders the cache's rows as the beams go
    assert torch.equal(greedy(hf, idx, 16, num_beams=3), greedy(hf, idx, 16, num_beams=3, use_cache=False))
    # the cache is a transformers Cache whose layers hold what nanoKV's KVCache holds after the same prompt
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = hf(idx[:, :39])
        caches = model.new_caches(39)
        model(idx[:, :39], caches=caches)
    cache = out.past_key_values
    assert isinstance(cache, transformers.Cache) and cache.get_seq_length() == 39
    window = model.cfg.window or 39
    for ours, theirs in zip(caches, cache.layers):
        assert ours.buf.keys() == theirs.buf.keys()  # MLA: c_kv and k_pe; LRKV: the shared head, latents, norms
        slots = torch.arange(39 - window, 39) % ours.slots  # a window's ring holds the last `window` tokens
        assert all(torch.equal(ours.buf[k][:, :, slots], theirs.buf[k]) for k in ours.buf)
    assert sum(layer.nbytes() for layer in cache.layers) == flops.cache_bytes(model.cfg, 39, batch=2, bytes_per_elem=4)
    # and passed back, it continues the prompt: the last token's logits as the whole prompt's
    with torch.no_grad():
        last = hf(idx[:, 39:], past_key_values=cache).logits[:, -1]
        torch.testing.assert_close(last, model(idx)[0][:, -1], rtol=1e-4, atol=1e-4)
    assert sum(layer.nbytes() for layer in cache.layers) == flops.cache_bytes(model.cfg, 40, batch=2, bytes_per_elem=4)


@pytest.mark.parametrize("name", DECODE)
def test_assisted_generation_crops_the_cache_and_keeps_the_greedy_tokens(built, name):
    # prompt lookup drafts tokens from the prompt (one that repeats gets drafts), the model checks them
    # in one forward, and the cache drops those it rejects: the tokens stay greedy's
    _, _, hf = built(name)
    idx = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(2)).repeat(1, 3)  # (1, 36)
    crops = []
    layer = type(hf(idx[:, :2]).past_key_values.layers[0])
    original = layer.crop
    layer.crop = lambda self, n: (crops.append(n), original(self, n))[1]
    try:
        assisted = greedy(hf, idx, 32, prompt_lookup_num_tokens=4)
    finally:
        layer.crop = original
    assert torch.equal(assisted, greedy(hf, idx, 32, use_cache=False)) and any(n < 0 for n in crops)


def test_a_window_that_dropped_tokens_refuses_a_crop_in_one_line(built):
    _, _, hf = built("lrkv_window", **WINDOW["lrkv_window"])
    cache = hf(torch.zeros(1, 20, dtype=torch.long)).past_key_values  # 20 tokens through a window of 16
    with pytest.raises(ValueError, match="keeps its last 16 tokens"):
        cache.crop(-2)
    cache = built("mha")[2](torch.zeros(1, 5, dtype=torch.long)).past_key_values
    cache.crop(-9)  # more than it holds: empty, not a negative length
    assert cache.get_seq_length() == 0 and all(b.size(2) == 0 for layer in cache.layers for b in layer.buf.values())


@pytest.mark.parametrize("name", list(DECODE) + ["lrkv_window"])
def test_a_left_padded_batch_gives_each_prompt_its_own_tokens(built, name):
    _, path, hf = built(name, **WINDOW.get(name, {}))
    tok = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    assert (batch.attention_mask[:, 0] == 0).any()  # padded on the left
    out = greedy(hf, batch.input_ids, 24, attention_mask=batch.attention_mask)
    for row, text in zip(out, PROMPTS):
        alone = greedy(hf, tok(text, return_tensors="pt").input_ids, 24)[0]
        assert torch.equal(row[-len(alone):], alone)


@pytest.mark.parametrize("name", ["lrkv"] if SECOND_PASS else DECODE)
def test_a_harness_generation_task_gives_eval_pys_strings(built, name):
    # shakespeare_gen through lm-evaluation-harness's own `hf` model, batches of 3 padded on the
    # left, against the adapter of `eval.py --tasks` on nanoKV's GPT
    pytest.importorskip("lm_eval", reason="pip install -r requirements-dev.txt")
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from common import autocast
    from harness import NanoKV
    from tokenizer import get_tokenizer
    model, path, hf = built(name)
    task = TaskManager(include_path=os.path.join(ROOT, "tasks"), include_defaults=False).load(["shakespeare_gen"])

    def strings(lm):  # what simple_evaluate runs, less its survey of the machine
        return [s["resps"][0][0] for s in evaluate(lm, task, limit=6, log_samples=True)["samples"]["shakespeare_gen"]]
    ours = strings(NanoKV(model, get_tokenizer("byte"), autocast("cpu", "fp32")))
    tok = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    assert strings(HFLM(pretrained=hf, tokenizer=tok, batch_size=3)) == ours and any(ours)


@pytest.mark.parametrize("name", ["lrkv"] if SECOND_PASS else DECODE)
def test_pipeline_with_its_defaults_batches_and_save_load_save_keeps_every_byte(built, name, tmp_path):
    _, path, hf = built(name)
    generator = transformers.pipeline("text-generation", model=path, trust_remote_code=True)
    out = generator(PROMPTS, batch_size=3)  # sampling, up to the context: the export's generation config
    assert [o[0]["generated_text"][:len(p)] for o, p in zip(out, PROMPTS)] == PROMPTS
    assert generator.tokenizer.model_max_length == 128 and generator.tokenizer.pad_token_id == 256
    generator.model.save_pretrained(tmp_path)
    generator.tokenizer.save_pretrained(tmp_path)
    saved = sorted(os.listdir(tmp_path))
    assert set(saved) == set(os.listdir(path)) - {"README.md"}  # the model card is the export's own
    for f in saved:
        if f != "tokenizer_config.json":
            assert filecmp.cmp(os.path.join(path, f), tmp_path / f, shallow=False), f
    # transformers writes where it loaded the tokenizer from into the copy, and nothing else
    again = json.load(open(tmp_path / "tokenizer_config.json"))
    assert {k: v for k, v in again.items() if k not in ("is_local", "local_files_only")} == \
        json.load(open(os.path.join(path, "tokenizer_config.json")))


def test_the_folder_is_a_causal_lm_as_transformers_knows_them(built):
    model, path, hf = built("lrkv")
    cfg = json.load(open(os.path.join(path, "config.json")))
    c = model.cfg
    assert {k: cfg[k] for k in ("num_hidden_layers", "vocab_size", "hidden_size", "num_attention_heads",
                                "max_position_embeddings", "intermediate_size", "head_dim", "pad_token_id")} == \
        dict(num_hidden_layers=c.n_layer, vocab_size=c.vocab_size, hidden_size=c.n_embd, num_attention_heads=c.n_head,
             max_position_embeddings=c.block_size, intermediate_size=c.mlp_hidden, head_dim=c.head_dim,
             pad_token_id=256)
    assert cfg["use_cache"] and hf.config._attn_implementation == "sdpa"
    sdpa = transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, attn_implementation="sdpa")
    assert sdpa.config._attn_implementation == "sdpa"
    idx = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = hf(idx, output_hidden_states=True)
        assert torch.equal(hf(inputs_embeds=hf.get_input_embeddings()(idx)).logits, out.logits)
        states = out.hidden_states  # the first block's input, each block's output, the last normed
        assert len(states) == c.n_layer + 1 and torch.equal(hf.get_output_embeddings()(states[-1]).float(), out.logits)
        logits, cache = hf(idx, return_dict=False)
        assert torch.equal(logits, out.logits) and isinstance(cache, transformers.Cache)
    # a prompt given as embeddings generates what its tokens do (transformers returns only the new tokens)
    assert torch.equal(greedy(hf, None, 8, inputs_embeds=hf.get_input_embeddings()(idx)), greedy(hf, idx, 8)[:, 12:])
    with pytest.raises(ValueError, match="pad on the left"):
        hf(idx, attention_mask=torch.ones_like(idx).flip(1).tril(3)[:2])
    card = open(os.path.join(path, "README.md")).read()
    import flops
    for said in ("LRKV (r=6)", f"{flops.kv_cache_bytes_per_token(c):,} bytes per token", "step 7",
                 "dataset shakespeare", "trust_remote_code=True", "padding=True"):
        assert said in card, said


# every transformers release from the pinned one to the newest: nanoKV's text or a clear error ----

NEWEST = os.path.join(ROOT, ".tf-newest")  # requirements-newest.txt, installed apart (README's test command)


def test_the_two_releases_tested_are_named_in_one_place():
    from common import TRANSFORMERS
    pins = {}
    for f in ("requirements-dev.txt", "requirements-newest.txt"):
        for line in open(os.path.join(ROOT, f)):
            if line.startswith("transformers=="):
                pins[f] = line.split("==")[1].split()[0]
    assert (pins["requirements-dev.txt"], pins["requirements-newest.txt"]) == TRANSFORMERS
    # this pass runs on one of them: the pin, or the newest in the pass below
    assert transformers.__version__ == TRANSFORMERS[SECOND_PASS]


@pytest.mark.skipif(SECOND_PASS, reason="this is that pass")
def test_every_export_test_passes_on_the_newest_release_too():
    # this file again, on requirements-newest.txt's transformers, installed apart: a pin that moves
    # without that pass done fails here (or in the test above)
    from common import TRANSFORMERS
    if not os.path.isdir(os.path.join(NEWEST, f"transformers-{TRANSFORMERS[1]}.dist-info")):
        pytest.fail(f"transformers {TRANSFORMERS[1]} is not in {NEWEST}: "
                    "pip install --no-deps --target .tf-newest -r requirements-newest.txt")
    env = dict(os.environ, PYTHONPATH=NEWEST, NANOKV_NEWEST="1", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                        "tests/test_export.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:]


def test_an_argument_forward_does_not_know_is_refused_by_name(built):
    _, _, hf = built("lrkv")
    idx = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(TypeError, match="bogus") as e:
        hf(idx, bogus=1)
    assert len(str(e.value).splitlines()) == 1
    with pytest.raises(ValueError, match="bogus"):  # transformers' own check of generate's arguments
        hf.generate(idx, max_new_tokens=2, bogus=1)
    # the cache under either name: transformers' name since 5.24, and the older one
    with torch.no_grad():
        whole = hf(idx).logits[:, -1]
        for name in ("cache", "past_key_values"):
            cache = hf(idx[:, :3]).past_key_values
            assert torch.allclose(hf(idx[:, 3:], **{name: cache}).logits[:, -1], whole, atol=1e-5)


@pytest.mark.parametrize("name", ["mha", "mla", "lrkv"])
def test_a_request_past_the_context_is_refused_before_the_first_token(built, name, monkeypatch):
    model, path, hf = built(name)
    steps = []
    monkeypatch.setattr(type(hf.model), "forward", lambda *a, **k: steps.append(1))
    idx = torch.zeros(1, 100, dtype=torch.long)  # a context of 128: 28 fit
    for asked in (dict(max_new_tokens=29), dict(max_length=129)):
        with pytest.raises(ValueError, match="room for 28 new ones in the context of 128; 29 were asked"):
            hf.generate(idx, do_sample=False, **asked)
    generator = transformers.pipeline("text-generation", model=hf, tokenizer=path)
    with pytest.raises(ValueError, match="room for 122 new ones"):  # "ROMEO:", 6 tokens
        generator("ROMEO:", max_new_tokens=200)
    assert not steps  # refused before any work
    monkeypatch.undo()
    # a request of no length runs to the context; a max_length is kept
    assert hf.generate(idx, do_sample=False).shape[1] == 128
    assert hf.generate(idx, do_sample=False, max_length=110).shape[1] == 110


def test_a_window_export_is_refused_past_the_context_as_nanokvs_own_generate_is(built):
    # a window's cache could run on, but positions past block_size have no RoPE angles
    model, _, hf = built("lrkv_window", **WINDOW["lrkv_window"])
    idx = torch.randint(0, 256, (1, 100), generator=torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match="room for 28 new ones"):
        greedy(hf, idx, 60)
    with pytest.raises(ValueError, match="exceed the context"):
        model.generate(idx, 60, 0)
    assert torch.equal(greedy(hf, idx, 28), model.generate(idx, 28, 0))


def test_generate_says_nothing_on_an_ordinary_call(built):
    import logging
    _, _, hf = built("lrkv")
    said = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    logger = transformers.utils.logging.get_logger("transformers")  # the library's, where its own log
    logger.addHandler(handler)
    try:
        greedy(hf, torch.zeros(1, 4, dtype=torch.long), 8)
        hf.generate(torch.zeros(1, 4, dtype=torch.long), do_sample=False)
    finally:
        logger.removeHandler(handler)
    assert not said


def test_the_cards_snippet_runs_as_written_and_refuses_an_old_release(built):
    model, path, _ = built("lrkv")
    card = open(os.path.join(path, "README.md")).read()
    head = card.split("---")[1]
    for field in ("library_name: transformers", "pipeline_tag: text-generation", "license:"):
        assert field in head, field
    from common import TRANSFORMERS
    assert "arxiv.org/abs/2601.11471" in card and f"{TRANSFORMERS[0]} to {TRANSFORMERS[1]}" in card
    snippet = card.split("```python\n")[1].split("```")[0].replace("DIR", repr(path))
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", snippet], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("['ROMEO:") and "To be, or" in p.stdout
    old = "import transformers\ntransformers.__version__ = '5.22.0'\n" + snippet
    p = subprocess.run([sys.executable, "-c", old], cwd=ROOT, env=env, capture_output=True, text=True)
    said = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 1 and said.startswith("ImportError: this nanoKV export needs transformers")
    assert f"{TRANSFORMERS[0]} or newer" in said and "5.22.0 is installed" in said

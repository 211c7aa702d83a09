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
from test_model import VARIANTS, randomized, tiny
from test_train import ROOT

transformers = pytest.importorskip("transformers", reason="pip install -r requirements-dev.txt")
os.environ["HF_HUB_OFFLINE"] = "1"


def exported(tmp_path, attn, **kw):
    model = randomized(tiny(attn, vocab_size=320, block_size=64, **kw))
    kind = export.write(model, {"step": 7, "train_config": {"tokenizer": "byte"}}, "byte", str(tmp_path / "x"))
    return model, str(tmp_path / "x"), kind


@pytest.mark.parametrize("attn, kw", VARIANTS)
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
    export.tokenizer_files(name, tok.eot, str(tmp_path))
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = "ROMEO: But soft, what light through yonder window breaks? é ☃ 1234\n\tend"
    assert hf(text)["input_ids"] == tok.encode(text) and hf.decode(tok.encode(text)) == text
    assert hf.eos_token_id == tok.eot


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

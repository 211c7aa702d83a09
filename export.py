"""
A trained model as a transformers folder (eval.py CKPT --export=DIR), and back (read, which
eval.py and checkpoint.load_model use for such a folder):

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)
    tok = AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)
    out = model.generate(**tok(["ROMEO:", "To be, or"], return_tensors="pt", padding=True), max_new_tokens=50)

Every design exports as model_type "nanokv": hf/modeling_nanokv.py and hf/configuration_nanokv.py
beside copies of model.py, attention.py and what they import, made relative (transformers loads
remote code as a package and copies a module's relative imports), so the folder runs the same
model and needs no nanoKV installed. MHA, GQA and MQA at attn_scale 1 also fit transformers' own
NanoChatForCausalLM, the same computation (RoPE then weightless QK-norm, ReLU², weightless RMSNorm
before the layers and the head): those export as model_type "nanochat", no remote code. MLA and
LRKV cache and project otherwise, and attn_scale ≠ 1 (the cpu preset's 2) scales logits that
NanoChat's fixed 1/√d_h does not. The tokenizer goes along as tokenizer.json, eot its pad token
and padding on the left (a batch for generate); README.md is the model card.

AutoTokenizer reads config.json before the tokenizer's files, and a `nanokv` config is remote
code, so it asks the y/N question of remote code unless given trust_remote_code=True (as the
model is); PreTrainedTokenizerFast.from_pretrained(DIR) reads the tokenizer's files alone.
"""
import json
import os
import re
import shutil
from dataclasses import asdict

import flops
from attention import EPS
from common import DESIGNS, TRANSFORMERS, setting
from model import GPT, GPTConfig

ROOT = os.path.dirname(os.path.abspath(__file__))
CODE = ["model.py", "attention.py", "common.py", "loss.py", "generate.py"]  # what modeling_nanokv.py imports
LOCAL = "|".join(os.path.splitext(f)[0] for f in CODE)
# nanoKV's weight names and NanoChat's, for the designs it can hold ({i}: a layer)
NAMES = [("wte.", "model.embed_tokens."), ("h.{i}.attn.c_q.", "model.layers.{i}.self_attn.q_proj."),
         ("h.{i}.attn.c_k.", "model.layers.{i}.self_attn.k_proj."),
         ("h.{i}.attn.c_v.", "model.layers.{i}.self_attn.v_proj."),
         ("h.{i}.attn.c_proj.", "model.layers.{i}.self_attn.o_proj."),
         ("h.{i}.mlp.c_fc.", "model.layers.{i}.mlp.fc1."), ("h.{i}.mlp.c_proj.", "model.layers.{i}.mlp.fc2.")]


def rename(key, pairs):
    """key with the first (from, to) name of pairs that starts it replaced."""
    for a, b in pairs:
        m = re.match(re.escape(a).replace(r"\{i\}", r"(\d+)"), key)
        if m:
            return b.replace("{i}", m.group(1) if m.groups() else "") + key[m.end():]
    return key


def native(cfg):
    """Whether transformers' own NanoChat computes this model's logits."""
    return cfg.attn in ("mha", "gqa", "mqa") and cfg.attn_scale == 1.0 and not cfg.k_eq_v \
        and cfg.kv_share == 1  # NanoChat has separate K and V weights in every layer


def relative(src):
    # `import attention` / `from common import x` -> the package-relative forms transformers follows
    src = re.sub(rf"^(\s*)import ({LOCAL})$", r"\1from . import \2", src, flags=re.M)
    return re.sub(rf"^(\s*)from ({LOCAL}) import", r"\1from .\2 import", src, flags=re.M)


def tokenizer_files(name, eot, context, path):
    """The run's tokenizer as tokenizer.json (+ its config), what AutoTokenizer.from_pretrained reads:
    GPT-2's BPE from its two vocabulary files, or one token per byte (ids 0-255) and eot. eot pads
    (GPT-2's vocabulary has no pad token of its own), on the left: generation continues each row at its end. model_max_length is
    the context, so that pipelines fit their prompts in it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from tokenizer import GPT2_EOT, byte_chars, gpt2_files
    if name == "gpt2":  # the two files tiktoken builds GPT-2 from, checked
        data = gpt2_files()
        merges = [tuple(line.split()) for line in data["vocab.bpe"].decode("utf-8").split("\n")[1:-1]]
        tok = Tokenizer(models.BPE(vocab=json.loads(data["encoder.json"]), merges=merges))
    else:  # bytes spelt as ByteLevel spells them, with no merges: id = byte
        tok = Tokenizer(models.BPE(vocab={c: b for b, c in byte_chars().items()}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=name == "gpt2")
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([GPT2_EOT])
    assert tok.token_to_id(GPT2_EOT) == eot
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=GPT2_EOT, bos_token=GPT2_EOT, pad_token=GPT2_EOT,
                                   model_max_length=context, padding_side="left")
    fast.save_pretrained(path)


def write(model, meta, tokenizer, path):
    """model (a GPT) into path as a transformers folder; meta: the run's step and training config."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module
    from transformers import NanoChatConfig, NanoChatForCausalLM
    from tokenizer import get_tokenizer
    cfg, eot = model.cfg, get_tokenizer(tokenizer).eot
    os.makedirs(path, exist_ok=True)
    run = {"step": meta.get("step"), "train_config": meta.get("train_config")}
    common = dict(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, max_position_embeddings=cfg.block_size,
                  tie_word_embeddings=False, nanokv=asdict(cfg), nanokv_run=run)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if native(cfg):
        hf_cfg = NanoChatConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.n_embd, intermediate_size=cfg.mlp_hidden,
                                num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
                                num_key_value_heads=cfg.kv_heads, rms_norm_eps=EPS, hidden_act="relu2",
                                rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base},
                                final_logit_softcapping=None, attention_bias=False, **common)
        hf = NanoChatForCausalLM(hf_cfg)
        state = {rename(k, NAMES): v for k, v in state.items()}
    else:
        for f in CODE:
            with open(os.path.join(ROOT, f)) as src, open(os.path.join(path, f), "w") as dst:
                dst.write(relative(src.read()))
        for f in ("modeling_nanokv.py", "configuration_nanokv.py"):
            shutil.copy(os.path.join(ROOT, "hf", f), os.path.join(path, f))
        kind = get_class_from_dynamic_module("modeling_nanokv.NanoKVForCausalLM", path)
        hf_cfg = kind.config_class(**common, architectures=["NanoKVForCausalLM"], auto_map={
            "AutoConfig": "configuration_nanokv.NanoKVConfig",
            "AutoModelForCausalLM": "modeling_nanokv.NanoKVForCausalLM"})
        hf = kind(hf_cfg)
        state = {f"model.{k}": v for k, v in state.items()}
    hf.load_state_dict(state, strict=True)
    # generate's default length is the context, set in the model's generation config so that a
    # pipeline's own default (256 new tokens) is not asked of a smaller one. Remote code's generate
    # fits max_new_tokens to the prompt; set as max_length, it would draw transformers' warning
    # whenever a call gives max_new_tokens. NanoChat has no code of ours: its default is max_length
    if native(cfg):
        hf.generation_config.max_length = cfg.block_size
    else:
        hf.generation_config.max_new_tokens = cfg.block_size
    hf.save_pretrained(path)
    tokenizer_files(tokenizer, eot, cfg.block_size, path)
    kind = "nanochat" if native(cfg) else "nanokv"
    with open(os.path.join(path, "README.md"), "w") as f:
        f.write(card(cfg, run, kind))
    return kind


def card(cfg, run, kind):
    """The folder's README.md, its model card: the design, the bytes its cache keeps per token, the
    training run, and how to load it."""
    per_token = flops.kv_cache_bytes_per_token(cfg)  # bf16, as a GPU decodes
    mha = flops.kv_cache_bytes_per_token(flops.standard_mha(cfg))
    remote = ", trust_remote_code=True" if kind == "nanokv" else ""
    tc = run.get("train_config") or {}
    keys = ("dataset", "tokenizer", "train_tokens", "batch_size", "seed")
    trained = ", ".join(f"{k} {tc[k]}" for k in keys if k in tc)
    window, held = "", ""
    if cfg.window:
        window, held = f", a sliding window of {cfg.window} tokens", f" (the last {cfg.window} tokens)"
    tested = f"Tested on transformers {TRANSFORMERS[0]} to {TRANSFORMERS[1]}"
    if kind == "nanokv":
        tested += (f"; an older release refuses to load, a newer one loads with a warning. A request for "
                   f"more new tokens than the context of {cfg.block_size} leaves room for is refused "
                   "before the first one.")
    else:
        tested += (f", as its own NanoChatForCausalLM. Generation stops at the context of {cfg.block_size} "
                   "unless max_new_tokens asks for more, which runs past what the model was trained on.")
    return f"""---
library_name: transformers
pipeline_tag: text-generation
license: unknown
tags: [nanokv, {cfg.attn}]
---
# nanoKV: {DESIGNS[cfg.attn].label} ({setting(cfg)})

A GPT of {cfg.n_layer} layers, d_model {cfg.n_embd}, {cfg.n_head} query heads and a context of {cfg.block_size} \
tokens{window}, whose attention is {DESIGNS[cfg.attn].label} ({setting(cfg)}), trained with nanoKV.

**Its KV cache** holds {per_token:,} bytes per token{held} in bf16 ({2 * per_token:,} in fp32, the weights' dtype \
here), {per_token / mha:.0%} of what MHA's would at this shape (nanoKV's flops.kv_cache_bytes_per_token). \
transformers' generate decodes through that cache (model_type `{kind}`).

**Training**: step {run.get("step")}{"; " + trained if trained else ""}. The whole training config is \
`nanokv_run` in config.json, the model's under `nanokv`.

The designs are those of the paper [Low-Rank Key Value Attention](https://arxiv.org/abs/2601.11471) \
(O'Neill et al., 2026), which nanoKV reproduces in small. The license is yours to set: the weights \
are your training run's.

**Loading** (DIR: this folder, or its name on the Hub). {tested}

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained(DIR{remote})
tok = AutoTokenizer.from_pretrained(DIR{remote})
out = model.generate(**tok(["ROMEO:", "To be, or"], return_tensors="pt", padding=True), max_new_tokens=50)
print(tok.batch_decode(out, skip_special_tokens=True))
```
"""


def read(path, device="cpu"):
    """(GPT in eval mode on device, the run's meta) from a folder write() made. A ValueError in one
    line for a folder it did not make, or whose config and weights disagree."""
    from safetensors.torch import load_file
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    if config.get("model_type") not in ("nanokv", "nanochat") or "nanokv" not in config:
        raise ValueError(f"{path} is not a folder this eval.py --export writes (an older export, or another "
                         "model): export its checkpoint again")
    model = GPT(GPTConfig(**config["nanokv"]))
    state = load_file(os.path.join(path, "model.safetensors"), device=str(device))
    if config["model_type"] == "nanochat":
        state = {rename(k, [(b, a) for a, b in NAMES]): v for k, v in state.items()}
    state = {re.sub(r"^model\.", "", k): v for k, v in state.items()}
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise ValueError(f"{path}: its config.json does not match its weights "
                         f"({str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else e})") from None
    return model.to(device).eval(), {**(config.get("nanokv_run") or {}), "model_config": config["nanokv"]}

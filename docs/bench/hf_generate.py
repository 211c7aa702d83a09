"""
Greedy tokens/s of the cpu preset's five designs (random weights), through nanoKV's generate (its
own KV caches) and through an --export folder loaded with transformers' AutoModelForCausalLM
(no cache: each token runs the whole prefix; MHA/GQA/MQA at attn_scale 1 would load as
transformers' NanoChat, with its cache). Side by side in one run, 1 x (16 + 200) tokens.

    OMP_NUM_THREADS=1 python docs/bench/hf_generate.py
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

import export  # noqa: E402
from common import DESIGNS  # noqa: E402
from model import GPT, preset  # noqa: E402

NEW = 200
print(f"{'design':6} {'nanoKV tok/s':>13} {'transformers tok/s':>19} {'ratio':>6}  same tokens")
for attn in DESIGNS:
    torch.manual_seed(0)
    model = GPT(preset("cpu", attn=attn)).eval()
    with tempfile.TemporaryDirectory() as d:
        export.write(model, {}, "byte", d)
        hf = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True).eval()
    hf.generation_config.eos_token_id = None  # all 200 tokens, as nanoKV's generate without stop=
    idx = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
    rate = {}
    for name, run in (("nanokv", lambda: model.generate(idx, NEW, temperature=0)),
                      ("hf", lambda: hf.generate(idx, max_new_tokens=NEW, do_sample=False))):
        run()  # warm-up
        t0 = time.perf_counter()
        out = run()
        rate[name] = (NEW / (time.perf_counter() - t0), out)
    same = torch.equal(rate["nanokv"][1], rate["hf"][1])
    print(f"{attn:6} {rate['nanokv'][0]:13,.0f} {rate['hf'][0]:19,.0f} {rate['nanokv'][0] / rate['hf'][0]:5.1f}x  {same}")

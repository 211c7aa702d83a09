"""
Greedy decoding speed of the cpu preset's five designs and factored LRKV (random weights), through
nanoKV's generate (its own KV caches) and through transformers' generate on an --export folder
(AutoModelForCausalLM, remote code: the design's own cache in a transformers Cache), side by side
in one run. A prompt of 128 tokens and 128 new ones (the preset's context is 256), one thread.
ROUNDS rounds each time both, one after the other, and the table gives the medians: of each one's
tokens/s and of the rounds' ratios, which a machine busy with other work moves least.

    OMP_NUM_THREADS=1 python docs/bench/hf_generate.py
"""
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging  # noqa: E402

import export  # noqa: E402
from common import DESIGNS  # noqa: E402
from model import GPT, preset  # noqa: E402

PROMPT, NEW, ROUNDS = 128, 128, 11
torch.set_num_threads(1)
logging.set_verbosity_error()  # not the note, every call, that max_new_tokens overrides the export's max_length


def cpu():
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.processor())


print(f"{cpu()}, {torch.get_num_threads()} thread, torch {torch.__version__}: greedy tokens/s, 1 x ({PROMPT} + {NEW}), "
      f"medians of {ROUNDS} rounds")
print(f"{'design':14} {'nanoKV':>8} {'transformers':>13} {'ratio':>6}  same tokens")
for attn, kw in [(a, {}) for a in DESIGNS] + [("lrkv", dict(lrkv_factored=True))]:
    torch.manual_seed(0)
    model = GPT(preset("cpu", attn=attn, **kw)).eval()
    with tempfile.TemporaryDirectory() as d:
        export.write(model, {}, "byte", d)
        hf = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True).eval()
    idx = torch.randint(0, 256, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    runs = {"nanokv": lambda: model.generate(idx, NEW, temperature=0),
            # all NEW tokens, as nanoKV's generate without stop=
            "hf": lambda: hf.generate(idx, max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=256)}
    out = {name: run() for name, run in runs.items()}  # and a warm-up
    rates = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            rates[name].append(NEW / (time.perf_counter() - t0))
    ratio = statistics.median(h / n for h, n in zip(rates["hf"], rates["nanokv"]))
    name = attn + (" factored" if kw else "")
    print(f"{name:14} {statistics.median(rates['nanokv']):8,.0f} {statistics.median(rates['hf']):13,.0f} "
          f"{ratio:5.2f}x  {torch.equal(out['nanokv'], out['hf'])}")

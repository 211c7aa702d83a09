"""
What the scripts share: the table of the designs, the device and precision a run
computes in, how bad input is refused, and MQAR's solve rule (train.py stops on it, the analysis
reads it back). Imports no torch at load time: plot.py uses it too.
"""
import argparse
import os
import re
import sys
from typing import Callable, NamedTuple


class Design(NamedTuple):
    label: str  # in tables and the figure's legend
    colour: str  # the paper's Figure 4 colour and line style
    line: str
    cls: str  # its class in attention.py
    settings: tuple  # its own GPTConfig fields: runs that differ in one are two settings, never two seeds
    show: Callable  # its setting as tables show it, from a config dict
    budget: tuple  # the cache-budget sweep (reproduce.sh SWEEP=pareto): values of its first setting;
                   # () the design as it is, None not swept


# What the repository knows about each design, one row each, in the paper's Figure 4 legend order.
# The rest of the code reads it from here: --attn's choices, the model's class, the tables' labels,
# the figure's lines, which runs are seeds of one setting, the cache-budget sweep's settings;
# flops.py has the formulas of each class.
DESIGNS = {
    "mha": Design("Standard MHA", "tab:blue", "-", "GroupedQueryAttention", (), lambda c: f"kv={c['n_head']}", ()),
    "lrkv": Design("LRKV", "tab:red", "-", "LRKV", ("lrkv_rank", "lrkv_factored"),
                   lambda c: f"r={c['lrkv_rank']}" + (" factored" if c.get("lrkv_factored") else ""),
                   (2, 4, 7, 8, 13, 20)),  # 7: E5's, a cache just under GQA kv=2's
    "mla": Design("MLA", "tab:purple", ":", "MLA", ("mla_kv_rank", "mla_rope_dim", "mla_q_rank", "mla_deepseek"),
                  lambda c: f"d_c={c['mla_kv_rank']}" + (" DeepSeek" if c.get("mla_deepseek") else ""), (32, 64, 128)),
    "gqa": Design("GQA", "tab:orange", "--", "GroupedQueryAttention", ("n_kv_head",), lambda c: f"kv={c['n_kv_head']}",
                  (1, 2)),
    "mqa": Design("MQA", "tab:green", "-", "GroupedQueryAttention", (), lambda c: "kv=1", None),  # = GQA kv=1
}

# The transformers releases an export (eval.py --export) is tested on, oldest and newest: the
# pinned one (requirements-dev.txt) and the newest the package index offered (requirements-newest.txt,
# which tests/test_export.py runs in a second pass). An export's own code refuses older releases.
TRANSFORMERS = ("5.23.0", "5.25.0")


def budget_runs():
    """The cache-budget sweep's settings, 'name flags' lines for reproduce.sh: mha, lrkv2, ..."""
    return "\n".join(f"{attn}{v} --attn={attn}" + (f" --{d.settings[0]}={v}" if v != "" else "")
                     for attn, d in DESIGNS.items() if d.budget is not None for v in d.budget or [""])


def fail(msg):
    # bad input: one line that says what to do, no traceback, the same exit status in every script
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, its errors one line through fail (argparse's own print a usage line first)."""

    def error(self, message):
        fail(f"{message}; see --help")


def count(s):
    """argparse type of a count of at least 1 (a batch, rounds, steps): 0 would divide by it."""
    if int(s) < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {s}")
    return int(s)


def warn(msg):
    print(f"warning: {msg}", file=sys.stderr)


def reaches(scores, keys, at):
    """Whether the accuracies `keys` of scores (acc, acc_pN, or test_acc_pN from a log) reach `at`:
    where the model has a window, at the answers inside it (the key's acc_win twin), the only ones
    a window could learn; a count with none inside (None) has nothing to reach and is left out,
    and a model with nothing left is not solved."""
    got = [a for a in (scores.get(k.replace("acc", "acc_win"), scores[k]) for k in keys)
           if a is not None]
    return bool(got) and all(a >= at for a in got)


def setting(cfg):
    """A design's own knob, for tables (kv=2, r=13, d_c=32). cfg: a GPTConfig or a log header's dict."""
    c = cfg if isinstance(cfg, dict) else vars(cfg)
    share = c.get("kv_share") or 1
    return DESIGNS[c["attn"]].show(c) + " K=V" * bool(c.get("k_eq_v")) + f" share {share}" * (share > 1)


def design_keys(attn):
    # what makes two runs of a design two settings rather than two seeds: the design's own
    # knobs, the MLP's width, the window and K/V sharing. Not another design's: MHA and MQA logs
    # carry an n_kv_head they ignore.
    return DESIGNS[attn].settings + ("mlp_hidden", "window", "k_eq_v", "kv_share")


def resolve_device(device="auto", local_rank=0, world=1):
    # auto: this rank's GPU if there is one, else the CPU; cuda: this rank's GPU (torchrun's
    # LOCAL_RANK), so that every rank gets its own; cuda:N names one GPU, for one process
    import torch
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
        fail(f"--device={device!r} is unknown; use auto, cpu, cuda, cuda:N (a GPU index) or mps")
    if device.startswith("cuda") and not torch.cuda.is_available():
        fail(f"--device={device} but this torch sees no CUDA GPU; use --device=cpu")
    if device.startswith("cuda:") and world > 1:
        fail(f"--device={device} would put all {world} ranks on one GPU; use --device=cuda (or auto): "
             "each rank takes cuda:LOCAL_RANK")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return f"cuda:{local_rank}" if device == "cuda" else device


def native_bf16(device):
    """Whether device computes in bf16 natively: CUDA GPUs from Ampere on. torch's plain
    is_bf16_supported() also says yes where bf16 is emulated (V100, T4), slowly; an older torch
    without its including_emulation argument is asked for the compute capability instead."""
    import torch
    if not device.startswith("cuda"):
        return False
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:
        return torch.cuda.get_device_capability(device)[0] >= 8


def resolve_dtype(dtype, device):
    # auto: bf16 on GPUs that have it natively; V100s and T4s fp16, whose small range needs a loss scaler; fp32 on the CPU
    if dtype not in ("auto", "fp32", "bf16", "fp16"):
        fail(f"--dtype={dtype!r} is unknown; use auto, fp32, bf16 or fp16")
    if dtype == "auto":
        return ("bf16" if native_bf16(device) else "fp16") if device.startswith("cuda") else "fp32"
    return dtype


def autocast(device, dtype):
    """The context a forward runs under: torch.autocast to bf16 or fp16, or nothing for fp32."""
    import torch
    return torch.autocast(device.partition(":")[0], dtype=torch_dtype(dtype), enabled=dtype != "fp32")


def torch_dtype(dtype):
    import torch
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def device_name(device):
    """The GPU's name as torch reports it, or the CPU's model name: where a run ran, for its log."""
    import torch
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform
        return platform.processor() or platform.machine() or "cpu"


def git_commit():
    # the code's commit, for a run's log: "" where it is no git checkout or git is not installed
    import subprocess
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        return ""


def host_memory():
    # bytes of RAM on this machine
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_memory(device):
    """Bytes one rank may use: its GPU's memory, or its share of the host's RAM (a CPU's ranks share it)."""
    import torch
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(device).total_memory
    return host_memory() / int(os.environ.get("LOCAL_WORLD_SIZE", 1))

"""
What the scripts share: the five designs and their labels, the device and precision a run
computes in, and how bad input is refused. Imports no torch at load time: plot.py uses it too.
"""
import os
import re
import sys

DESIGNS = ["mha", "lrkv", "mla", "gqa", "mqa"]  # the --attn choices, in the paper's Figure 4 order
LABELS = {"mha": "Standard MHA", "lrkv": "LRKV", "mla": "MLA", "gqa": "GQA", "mqa": "MQA"}


def fail(msg):
    # bad input: one line that says what to do, no traceback, the same exit status in every script
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def setting(cfg):
    """A design's own knob, for tables: its K/V heads, MLA's d_c or LRKV's r. cfg: a GPTConfig or
    the dict a log's header holds."""
    c = cfg if isinstance(cfg, dict) else vars(cfg)
    attn = c.get("attn")
    if attn == "lrkv":
        return f"r={c.get('lrkv_rank')}" + (" factored" if c.get("lrkv_factored") else "")
    if attn == "mla":
        return f"d_c={c.get('mla_kv_rank')}" + (" DeepSeek" if c.get("mla_deepseek") else "")
    return f"kv={c.get('n_kv_head')}"


def resolve_device(device="auto", local_rank=0):
    # auto: this rank's GPU if there is one, else the CPU
    import torch
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
        fail(f"--device={device!r} is unknown; use auto, cpu, cuda, cuda:N (a GPU index) or mps")
    if device == "auto":
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        fail(f"--device={device} but this torch sees no CUDA GPU; use --device=cpu")
    return device


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


def host_memory():
    # bytes of RAM on this machine
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_memory(device):
    """Bytes one rank may use: its GPU's memory, or its share of the host's RAM (a CPU's ranks share it)."""
    import torch
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(device).total_memory
    return host_memory() / int(os.environ.get("LOCAL_WORLD_SIZE", 1))

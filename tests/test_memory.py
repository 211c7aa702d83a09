"""flops.memory_per_gpu, train.py's refusal of a run that cannot fit, and --activation_checkpointing."""
import functools
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import flops
import test_train
from model import GPT, preset
from test_train import ROOT, curve, one_line_error, read_log, refused, train

GB = 1e9


def test_estimate_orders_the_options():
    cfg = preset("6.3b", attn="mha")
    ddp, sharded = flops.memory_per_gpu(cfg, 1, 8, False), flops.memory_per_gpu(cfg, 1, 8, True)
    assert ddp > 80 * GB  # refused on an 80 GB GPU: the weights, gradients and states alone are 12P + 4M
    assert sharded < 40 * GB < ddp / 2  # FSDP2 on 8 GPUs fits
    assert flops.memory_per_gpu(cfg, 1, 8, False, True) < ddp  # checkpointing saves activations only
    assert flops.memory_per_gpu(cfg, 2, 8, False) > ddp
    small = preset("128m")
    assert flops.memory_per_gpu(small, 2, 8, False) < 10 * GB


def test_refuses_a_run_that_does_not_fit_and_names_what_does(tmp_path, data_dir):
    test_train.DATA = data_dir
    cfg = preset("cpu", n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=320)  # TINY's mha
    need = flops.memory_per_gpu(cfg, 4, 1, False)
    between = (max(flops.memory_per_gpu(cfg, 4, 1, False, True), flops.memory_per_gpu(cfg, 1, 1, False)) + need) / 2
    p = refused(tmp_path, f"--memory_limit_gb={between / 2**30}")
    one_line_error(p, f"needs about {need / 2**30:.3g} GiB", "--activation_checkpointing or --batch_size=1")
    p = refused(tmp_path, f"--memory_limit_gb={need / 2**30 / 100}")
    one_line_error(p, "what fits: none")


def test_refuses_at_start_a_run_that_cannot_fit_in_the_cpus_memory(tmp_path):
    # 6.3B on a CPU: its fp32 weights, gradients and states alone are over 100 GB; refused in one
    # line before the data is prepared or the model built
    from common import host_memory
    if host_memory() > flops.memory_per_gpu(preset("6.3b"), 1, 1, False):
        pytest.skip("this machine has the RAM for it")
    p = subprocess.run([sys.executable, "train.py", "config/6.3b.py", "--dataset=shakespeare", "--tokenizer=gpt2",
                        "--device=cpu", f"--out_dir={tmp_path}", f"--data_dir={tmp_path}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    one_line_error(p, "needs about", "GiB per rank")
    assert p.returncode == 2 and not os.listdir(tmp_path)


def test_activation_checkpointing_same_loss_and_grads(tmp_path, data_dir):
    # as train.py wraps each block: the same loss and gradients, recomputed in backward
    cfg = preset("cpu", attn="lrkv", n_layer=2)
    x = torch.randint(0, cfg.vocab_size, (2, 64))
    grads = []
    for wrap in (False, True):
        torch.manual_seed(0)
        model = GPT(cfg)
        if wrap:
            for block in model.h:
                block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
            _, loss = model(x, x)
        loss.backward()
        grads.append((loss.detach(), [p.grad for p in model.parameters()], sum(saved)))
    (l0, g0, s0), (l1, g1, s1) = grads
    assert torch.equal(l0, l1) and all(torch.equal(a, b) for a, b in zip(g0, g1))
    assert s1 < s0 / 2  # it does keep less
    # and train.py with the flag trains to the same losses
    test_train.DATA = data_dir
    for flag in ([], ["--activation_checkpointing"]):
        train(tmp_path, "--max_iters=3", "--eval_interval=3", f"--run_name=r{len(flag)}", *flag)
    a, b = (read_log(tmp_path / f"r{i}" / "log.jsonl")[1] for i in (0, 1))
    assert curve(a, "train_loss") == curve(b, "train_loss") and len(curve(a, "train_loss")) == 3


def test_mfu_peaks_tell_h100_versions_apart():
    assert flops.peak_flops("NVIDIA H100 80GB HBM3") == flops.peak_flops("NVIDIA H200") == 989e12  # SXM
    assert flops.peak_flops("NVIDIA H100 PCIe") == 756e12 and flops.peak_flops("NVIDIA H100 NVL") == 835e12
    assert flops.peak_flops("cpu") is None


def test_model_is_built_on_the_device_it_is_made_under():
    # train.py builds the model under `with torch.device(device)`: every weight and buffer (the RoPE
    # tables too) is made there, with no full copy in host RAM first; meta stands in for a GPU
    for attn in ("mha", "mla", "lrkv"):
        with torch.device("meta"):
            model = GPT(preset("6.3b", attn=attn))
        assert {t.device.type for t in [*model.parameters(), *model.buffers()]} == {"meta"}

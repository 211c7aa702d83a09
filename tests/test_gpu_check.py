"""gpu_check.py --dry: the GPU check's every step, on the CPU at tiny shapes."""
import os
import re
import subprocess
import sys

import torch

from common import DESIGNS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gpu_check(*args):
    return subprocess.run([sys.executable, "gpu_check.py", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)


def test_dry_run_prints_the_table(tmp_path):
    p = gpu_check("--dry", f"--out={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "results.md").read_text() == p.stdout  # written line by line as printed
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == len(DESIGNS) + 2  # and 512m-8k x 2
    assert "torch " + torch.__version__ in p.stdout and "SDPA priority" in p.stdout
    rows = [line.split(" | ") for line in p.stdout.splitlines() if re.match(r"\| [\w -]+ \| [\d,]+ \| ", line)
            and line.count(" | ") == 12]  # the design tables' rows, not the decode table's
    assert [r[0][2:] for r in rows] == [*DESIGNS, "mha 512m-8k", "lrkv 512m-8k"]
    for r in rows:
        assert r[6] in ("flash", "efficient", "cudnn", "math")  # SDPA ran in training
        assert r[7] == "none (matmuls)" and 0 < float(r[4].rstrip("%")) < 100  # none in decoding; the optimiser's share
        measured, formula = re.fullmatch(r"([\d,]+) \(([\d,]+)\)", r[11]).groups()
        assert measured == formula  # the caches hold what flops.py says
        assert float(r[8]) == 0.0 and float(r[9]) == 0.0  # dynamo's eager backend: the same ops, loss and gradients
    runs = [line for line in p.stdout.splitlines() if line.startswith("- ")]
    assert len(runs) == 4 and all(": ok, max train-loss difference" in line for line in runs)
    assert "resumed" in runs[0] and "DDP" in runs[1] and "FSDP2" in runs[2] and "fp16" in runs[3]
    decode = [line.split(" | ") for line in p.stdout.splitlines() if line.startswith("| eager @")]
    assert [r[0] for r in decode] == ["| eager @128 x1", "| eager @128 x4"] and all(len(r) == 7 for r in decode)
    assert all(re.fullmatch(r"[\d,]+ \([\d.]+\)", c.rstrip(" |")) for r in decode for c in r[1:])  # tok/s (GB/s)
    if not torch.cuda.is_available():  # without --dry it needs a GPU, and says what to do instead
        p = gpu_check()
        assert p.returncode != 0 and p.stderr.startswith("error: ") and "--dry" in p.stderr


def test_a_spent_budget_skips_phases_and_says_so(tmp_path):
    p = gpu_check("--dry", f"--out={tmp_path}", "--budget=1")
    assert p.returncode == 0, p.stderr[-3000:]
    skipped = [line for line in p.stdout.splitlines() if "skipped, the 1 s budget is spent" in line]
    assert len(skipped) == 10 and (tmp_path / "results.md").read_text() == p.stdout  # 7 rows, runs, decode x 2


def test_only_some_parts(tmp_path):
    p = gpu_check("--dry", f"--out={tmp_path}", "--only=runs,decode", "--budget=1")
    assert p.returncode == 0 and p.stdout.count("skipped") == 3 and "\n| mha |" not in p.stdout
    p = gpu_check("--dry", "--only=decode,kv")
    assert p.returncode != 0 and p.stderr.startswith("error: --only=decode,kv: the parts are designs,")


def test_a_phase_killed_in_a_real_inductor_compile_leaves_the_next_its_turn(tmp_path):
    # each design's phase compiles with inductor (cold: its own cache folder; about 40 s on this
    # CPU) under a limit of 45 x 60/480 = 5.6 s. An alarm raised into torch.compile ended the whole
    # check (InternalTorchDynamoError: Stop); a phase in its own process is killed, said so, and
    # the next one starts
    p = subprocess.run([sys.executable, "gpu_check.py", "--dry", "--backend=inductor", "--only=designs",
                        "--budget=60", f"--out={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert p.returncode == 0, p.stderr[-3000:]
    stopped = [line for line in (tmp_path / "results.md").read_text().splitlines() if "stopped at its 6 s limit" in line]
    assert [line.split(" | ")[0] for line in stopped] == ["| mha", "| lrkv", "| mla", "| gqa", "| mqa"]
    assert "Traceback" not in p.stdout + p.stderr


def dry(tmp_path):
    import gpu_check
    gpu_check.setup(gpu_check.arguments(["--dry", f"--out={tmp_path}"]))
    gpu_check.t_start = __import__("time").time()
    return gpu_check


def test_a_phase_stopped_midway_keeps_its_finished_designs(tmp_path, monkeypatch):
    # the decode phase printed its row only at its end: stopped at its limit, it lost every design
    gc = dry(tmp_path)
    monkeypatch.setattr(gc, "PHASE_CMD", [sys.executable, os.path.join(ROOT, "tests", "slow_phase.py")])
    monkeypatch.setenv("NANOKV_SLOW_DESIGN", "mla")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    r = gc.phase("decode eager", 15, gc.decode, "eager", 1)
    assert isinstance(r, gc.Stopped) and "stopped at its 15 s limit" in r
    row = gc.decode_row("eager @128 x1", r)
    cells = row.split(" | ")
    assert re.fullmatch(r"[\d,]+ \([\d.]+\)", cells[1]) and re.fullmatch(r"[\d,]+ \([\d.]+\)", cells[2])  # mha, lrkv
    assert cells[3:6] == ["-", "-", "-"] and row.endswith("| decode eager: stopped at its 15 s limit")


def test_the_graph_row_decodes_through_a_cuda_graph(tmp_path, monkeypatch):
    # it compared compile=None (eager below GRAPH_MIN_TOKENS) with True and False: no graph was recorded
    gc = dry(tmp_path)
    asked = []
    monkeypatch.setattr(gc.GPT, "generate", lambda self, idx, n, temperature, compile: asked.append(compile)
                        or torch.zeros(2, 16 + n, dtype=torch.long))
    assert gc.graphs_same_tokens().startswith("ok: 32 greedy tokens decoded as a CUDA graph")
    assert sorted(map(str, asked)) == ["False", "True", "reduce-overhead"]


def test_the_kernel_order_is_read_after_a_first_sdpa_call(tmp_path, monkeypatch):
    # torch 2.11's CUDA 13 build puts cuDNN first on the first SDPA call: read before it, the header
    # named an order that never ran
    gc = dry(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    called, sdpa = [], torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: called.append(1) or sdpa(*a, **k))
    from torch.nn.attention import SDPBackend
    before, after = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION], [SDPBackend.CUDNN_ATTENTION,
                                                                             SDPBackend.FLASH_ATTENTION]
    monkeypatch.setattr(torch._C, "_get_sdp_priority_order", lambda: [b.value for b in (after if called else before)],
                        raising=False)
    assert "SDPA priority cudnn_attention > flash_attention" in gc.versions()


def test_the_decode_prefill_makes_the_last_logits_only(monkeypatch):
    # at batch 32 x 8,191 x 50,304 the prefill's full logits were ~74 GiB at once: more than an H100
    import bench
    from model import GPT, preset
    seen, forward = [], GPT.forward
    monkeypatch.setattr(GPT, "forward", lambda self, idx, *a, **k: seen.append((idx.size(1), k.get("last")))
                        or forward(self, idx, *a, **k))
    cfg = preset("cpu", n_layer=1, block_size=64)
    bench.decode_bench(cfg, (64,), steps=1, warmup=0, batch=2, designs=("mha", "mla"))
    prefills = [s for s in seen if s[0] > 1]
    assert len(prefills) == 2 and all(last for _, last in prefills)


def test_the_memory_table_when_asked(tmp_path):
    # validate.sh's memory phase, now gpu_check's: a row per design, measured peak beside the estimate
    p = gpu_check("--dry", f"--out={tmp_path}", "--only=memory")
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [line for line in p.stdout.splitlines() if re.match(r"\| (mha|lrkv|mla|gqa|mqa) \| n/a \| [\d.]+ \|$", line)]
    assert len(rows) == 5 and "| design | peak GiB |" in p.stdout

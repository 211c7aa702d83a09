"""gpu_check.py --dry: the GPU check's every step, on the CPU at tiny shapes."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import torch

from common import DESIGNS
from gpu_phases import Phase, run_plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gpu_check(*args):
    return subprocess.run([sys.executable, "gpu_check.py", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)


def test_dry_run_prints_the_table(tmp_path):
    p = gpu_check("--dry", f"--out={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "results.md").read_text() == p.stdout  # written line by line as printed
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len([r for r in records if "design" in r]) == len(DESIGNS) + 2  # the designs, 512m-8k x 2
    phases = [r for r in records if "phase" in r]  # a phase a design, runs, tokens, decode 3, 512m-8k 2
    assert len(phases) == len(DESIGNS) + 7 and all(r["outcome"] == "done" and r["seconds"] <= r["limit"] for r in phases)
    assert "torch " + torch.__version__ in p.stdout and "SDPA priority" in p.stdout
    rows = [line.split(" | ") for line in p.stdout.splitlines() if re.match(r"\| [\w -]+ \| [\d,]+ \| ", line)
            and line.count(" | ") == 12]  # the design tables' rows, not the decode table's
    assert [r[0][2:] for r in rows] == [*DESIGNS, "mha 512m-8k", "lrkv 512m-8k"]
    for r in rows:
        assert r[6] in ("flash", "efficient", "cudnn", "math")  # SDPA ran in training
        assert r[7] == "none (matmuls)" and 0 < float(r[4].rstrip("%")) < 100  # none in decoding; the optimiser's share
        measured, formula = re.fullmatch(r"([\d,]+) \(([\d,]+)\)", r[11]).groups()
        assert measured == formula  # the caches hold what flops.py says
        # dynamo's eager backend: the same ops, loss and every parameter's gradient
        assert float(r[8]) == 0.0 and re.fullmatch(r"0\.0e\+00 \([\w.]+\)", r[9])
    runs = [line for line in p.stdout.splitlines() if line.startswith("- ") and "train-loss" in line]
    assert len(runs) == 4 and all(": ok, max train-loss difference" in line for line in runs)
    assert sorted(line[2:].split()[0] for line in runs) == ["1-rank", "1-rank", "fp16", "killed"]
    assert "- ok: 32 greedy tokens decoded as a CUDA graph equal to the compiled step's, 100% of them eager's" \
        in p.stdout
    decode = [line.split(" | ") for line in p.stdout.splitlines() if re.match(r"\| (eager|graphs|compiled) @", line)]
    assert [r[0] for r in decode] == ["| eager @128 x1", "| graphs @128 x1", "| compiled @128 x4"]
    # the graphs row's cells count the CUDA graphs too: none on the CPU
    cell = [r"[\d,]+ \([\d.]+\)", r"[\d,]+ \([\d.]+\); 0/0/0", r"[\d,]+ \([\d.]+\)"]
    assert all(len(r) == len(DESIGNS) + 2 and all(re.fullmatch(c, x.rstrip(" |")) for x in r[1:])
               for r, c in zip(decode, cell))
    assert "| design, 2 of cpu's 2 layers | train tok/s |" in p.stdout
    if not torch.cuda.is_available():  # without --dry it needs a GPU, and says what to do instead
        p = gpu_check()
        assert p.returncode == 2 and p.stderr.startswith("error: ") and "--dry" in p.stderr


def test_a_spent_budget_skips_phases_and_says_so(tmp_path):
    p = gpu_check("--dry", f"--out={tmp_path}", "--budget=1")
    assert p.returncode == 0, p.stderr[-3000:]
    skipped = [line for line in p.stdout.splitlines() if "skipped, the 1 s budget is spent" in line]
    phases = len(DESIGNS) + 7  # a row a design, 512m-8k x 2, runs, tokens, decode x 3
    assert len(skipped) == phases and (tmp_path / "results.md").read_text() == p.stdout
    assert p.stdout.count("| skipped |") == phases  # and the phase table says so


def test_only_some_parts(tmp_path):
    p = gpu_check("--dry", f"--out={tmp_path}", "--only=runs,decode", "--budget=1")
    assert p.returncode == 0 and p.stdout.count("budget is spent") == 4 and "\n| mha |" not in p.stdout
    p = gpu_check("--dry", "--only=decode,kv")
    assert p.returncode == 2 and p.stderr.startswith("error: --only=decode,kv: the parts are designs,")
    p = gpu_check("--dry", "--deep", "--only=decode")  # --deep has parts of its own
    assert p.returncode == 2 and p.stderr.startswith("error: --only=decode: the parts of --deep are compiled,")


def test_a_phase_killed_in_a_real_inductor_compile_leaves_the_next_its_turn(tmp_path):
    # each design's phase compiles with inductor (cold: its own cache folder; about 40 s on this
    # CPU) within a budget of 20 s: MHA's limit is what the later four's shares leave (about 12 s),
    # LRKV's the 5-s floor. An alarm raised into torch.compile ended the whole check
    # (InternalTorchDynamoError: Stop); a phase in its own process is killed, said so, and the next
    # one starts
    p = subprocess.run([sys.executable, "gpu_check.py", "--dry", "--backend=inductor", "--only=designs",
                        "--budget=20", f"--out={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert p.returncode == 0, p.stderr[-3000:]
    lines = (tmp_path / "results.md").read_text().splitlines()
    stopped = [line.split(" | ")[0] for line in lines if re.search(r"stopped at its \d+ s limit", line)]
    assert stopped[:2] == ["| mha", "| lrkv"] and "Traceback" not in p.stdout + p.stderr


def dry(tmp_path):
    import gpu_check
    gpu_check.setup(gpu_check.arguments(["--dry", f"--out={tmp_path}"]))
    gpu_check.t_start = time.time()
    return gpu_check


def test_a_phase_stopped_midway_keeps_its_finished_designs(tmp_path, monkeypatch):
    # the decode phase printed its row only at its end: stopped at its limit, it lost every design
    gc = dry(tmp_path)
    monkeypatch.setenv("NANOKV_SLOW_DESIGN", "mla")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    eager = gc.decode_phases()[0]
    run_plan([eager], [sys.executable, os.path.join(ROOT, "tests", "slow_phase.py"), "--dry", f"--out={tmp_path}"], 15,
             time.time(), gc.say, gc.jsonl)
    rows = [line for line in (tmp_path / "results.md").read_text().splitlines() if line.startswith("| eager @128 x1")]
    cells = rows[0].split(" | ")
    assert re.fullmatch(r"[\d,]+ \([\d.]+\)", cells[1]) and re.fullmatch(r"[\d,]+ \([\d.]+\)", cells[2])  # mha, lrkv
    assert cells[3:6] == ["-", "-", "-"] and re.search(r"\| decode eager @128 x1: stopped at its 1\d s limit$", rows[0])
    assert len(rows) == 1 and "again" not in (tmp_path / "results.md").read_text()  # no time left to try again


def test_a_retried_phase_measures_only_the_designs_missing(tmp_path, monkeypatch):
    # decode() measured all six again: a retry of "graphs @8192 x1" could be cut again before
    # lrkv-f. Here gqa, the fourth, hangs the first time only (a cold compile); versions' phase
    # after it leaves time for the retry
    gc = dry(tmp_path)
    asked = tmp_path / "asked"
    monkeypatch.setenv("NANOKV_SLOW_DESIGN", "gqa")
    monkeypatch.setenv("NANOKV_SLOW_ONCE", str(tmp_path / "compiled"))
    monkeypatch.setenv("NANOKV_ASKED", str(asked))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    plan = [gc.decode_phases()[0], Phase("versions", 400, gc.versions, write=lambda r: None)]
    run_plan(plan, [sys.executable, os.path.join(ROOT, "tests", "slow_phase.py"), "--dry", f"--out={tmp_path}"],
             120, time.time(), gc.say, gc.jsonl)
    assert asked.read_text().split() == ["mha", "lrkv", "mla", "gqa", "gqa", "mqa", "lrkv-f"]
    rows = [line.split(" | ") for line in (tmp_path / "results.md").read_text().splitlines()
            if line.startswith("| eager @128 x1")]
    assert rows[0][4:7] == ["-", "-", "-"] and "stopped at its" in rows[0][-1]
    assert len(rows) == 2 and all(re.fullmatch(r"[\d,]+ \([\d.]+\)", c) for c in rows[1][1:6])
    assert re.fullmatch(r"[\d,]+ \([\d.]+\) \|", rows[1][6])  # all six, the first try's beside the retry's


def test_one_designs_failure_is_its_cell_alone(tmp_path, monkeypatch):
    # an exception in one design's decode (an OOM, a compile error) ended the phase: the designs
    # after it in the row were lost
    gc = dry(tmp_path)
    bench = gc.decode_bench

    def oom(cfg, *a, designs, **k):
        if designs == ("mla",):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB | more")
        return bench(cfg, *a, designs=designs, **k)
    monkeypatch.setattr(gc, "decode_bench", oom)
    cells = {}
    for piece in gc.decode("eager", 1):
        cells.update(piece)
    assert cells.pop("mla") == "failed: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB / more"
    assert list(cells) == ["mha", "lrkv", "gqa", "mqa", "lrkv-f"]
    assert all(re.fullmatch(r"[\d,]+ \([\d.]+\)", c) for c in cells.values())


def test_the_graph_row_counts_the_graphs_recorded_and_replayed(monkeypatch):
    # the row compared tokens only: a graph never recorded, or recorded again on every call, passed.
    # CUDA faked: generate() records and replays through cudagraph trees' own methods, counted
    import gpu_deep
    from model import GPT
    from torch._dynamo.utils import counters
    from torch._inductor.cudagraph_trees import CUDAGraphTreeManager as trees
    monkeypatch.setattr(trees, "record_function", lambda self, inputs, fid: None)
    monkeypatch.setattr(trees, "execute_node", lambda self, node, inputs: None)
    build, asked, again = gpu_deep.build, [], {}
    monkeypatch.setattr(gpu_deep, "build", lambda cfg, device: build(cfg, "cpu"))

    def generate(self, idx, n, temperature, compile):
        # a new bucket: a warm-up step, a recorded one, the rest replayed; again: replayed, unless
        # again["records"] says the kept caches did not serve, or again["skips"] that no graph could
        asked.append(compile)
        if compile == "reduce-overhead":
            new = n not in self.__dict__.setdefault("_kept", {})
            self._kept[n] = "its caches"
            recorded = again.get("twice", 1) if new else again.get("records", 0)
            for _ in range(recorded):
                trees.record_function(None, [], 0)
            for _ in range(n - 1 - recorded - new):
                trees.execute_node(None, None, [])
            counters["inductor"]["cudagraph_skips"] += again.get("skips", 0) * (not new)
        return torch.zeros(2, 16 + n, dtype=torch.long)
    monkeypatch.setattr(GPT, "generate", generate)
    line = next(gpu_deep.graph_decode("cuda", "cpu", dict(n_layer=2), (32, 32)))
    assert line.startswith("- ok: 32 greedy tokens decoded as a CUDA graph equal to the compiled step's")
    assert line.endswith("for 32 then 32 new tokens: 1/29/0 (new bucket), 0/31/0 (its bucket again)")
    assert sorted(map(str, asked)) == ["False", "True", "reduce-overhead", "reduce-overhead"]
    for fault, counts in (("records", "1/30/0"), ("skips", "0/31/1")):
        again.clear()
        again[fault] = 1
        line = next(gpu_deep.graph_decode("cuda", "cpu", dict(n_layer=2), (32, 32)))
        assert line.startswith("- FAILED") and line.endswith(f"1/29/0 (new bucket), {counts} (its bucket again)")
    again.clear()
    again["twice"] = 2  # a new bucket's graph recorded twice: one recording per bucket, no more
    line = next(gpu_deep.graph_decode("cuda", "cpu", dict(n_layer=2), (32, 32)))
    assert line.startswith("- FAILED") and "2/28/0 (new bucket)" in line


def test_the_decode_graph_cells_count_the_graphs(tmp_path, monkeypatch):
    # the tokens row counted recordings, replays and skips; the decode row's graphs column did not,
    # so a graph recorded on every step read as a slow one. CUDA faked: cudagraph trees' methods
    from torch._inductor.cudagraph_trees import CUDAGraphTreeManager as trees
    gc = dry(tmp_path)
    monkeypatch.setattr(trees, "record_function", lambda self, inputs, fid: None)
    monkeypatch.setattr(trees, "execute_node", lambda self, node, inputs: None)

    def bench(cfg, contexts, steps, modes, designs, **_):  # a warm-up step, a recorded one, replays
        trees.record_function(None, [], 0)
        for _ in range(steps):
            trees.execute_node(None, None, [])
        return {(designs[0], contexts[0], modes[0]): dict(tok_s=1000.0, gbs=2.0, first_s=1.0)}
    monkeypatch.setattr(gc, "decode_bench", bench)
    cells = {}
    for piece in gc.decode("graphs", 1, skip=("mla",)):
        cells.update(piece)
    assert cells == {a: "1,000 (2.0); 1/5/0" for a in ("mha", "lrkv", "gqa", "mqa", "lrkv-f")}
    assert all(";" not in c for piece in gc.decode("eager", 1) for c in piece.values())


def test_the_copies_see_a_copy_made_by_an_inductor_kernel():
    # copies counted aten::copy_ and _foreach_copy_ only: a cache copied whole by one of
    # inductor's own kernels (a real compile on the CPU) was invisible. The step that writes one
    # token in place copies nothing; a permuted .contiguous() of the cache and a cache rolled in
    # place (into a temporary, then back) do, and the profiler sees no copy in either
    import gpu_deep
    cache, x, pos = torch.randn(1, 2, 128, 32), torch.randn(1, 2, 1, 32), torch.tensor([5])

    def step(c, x, p):
        c.index_copy_(2, p, x)
        return (c * x).sum(-1)

    def permuted(c, x, p):
        return c.transpose(1, 2).contiguous().view(1, 128, 64) @ x.view(64, 1)

    def rolled(c, x, p):
        c.copy_(c.roll(1, dims=2))
        return (c * x).sum(-1)
    seen = []
    for f in (step, permuted, rolled):
        compiled = torch.compile(f, fullgraph=True, dynamic=False, backend="inductor")
        with gpu_deep.kernel_copies([cache]) as kernels:
            compiled(cache, x, pos)
        seen.append((kernels, gpu_deep.written(lambda: compiled(cache, x, pos), False)))
    assert seen == [([0], 0), ([cache.nbytes], 0), ([2 * cache.nbytes], 0)]


def fake_phase(name):
    # a function whose name tests/fake_phase.py acts on
    f = lambda: None  # noqa: E731
    f.__name__ = name
    return f


def fake_plan(tmp_path, phases, budget=480):
    """run_plan over Phase(name, share, fake_phase(name), args) in tests/fake_phase.py's processes
    -> (results.md's lines, the records)."""
    gc = dry(tmp_path)
    plan = [Phase(n, share, fake_phase(n.split()[0]), a, lambda r, n=n: gc.say(f"{n}: {r}"), piece=gc.say)
            for n, share, a in phases]
    run_plan(plan, [sys.executable, os.path.join(ROOT, "tests", "fake_phase.py")], budget, time.time(), gc.say,
             gc.jsonl)
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    return (tmp_path / "results.md").read_text().splitlines(), records


def test_the_budget_flows_to_later_phases(tmp_path):
    # each phase had its fixed share: the 470 s a quick phase left were never used
    _, records = fake_plan(tmp_path, [("quick", 100, ()), ("quick 2", 300, ()), ("quick 3", 10, ())])
    assert [r["outcome"] for r in records] == ["done"] * 3
    assert records[0]["limit"] == 170  # 480 less the later shares (300 + 10): more than its own 100
    assert 460 < records[1]["limit"] < 480 and records[2]["limit"] > 460  # what was left, less 10; all that is left
    assert all(r["seconds"] < 10 and r["compile_s"] == 1.5 for r in records)


def test_a_phase_stopped_at_its_limit_runs_again_at_the_end(tmp_path):
    # its 5 s cut off a cold compile, and the time a later phase left was not used to try again
    lines, records = fake_plan(tmp_path, [("cold", 1, (str(tmp_path / "warm"),)), ("quick", 476, ())])
    assert [(r["phase"], r["limit"], r["outcome"]) for r in records[:2]] == [("cold", 5, "stopped"),
                                                                            ("quick", records[1]["limit"], "done")]
    assert 465 < records[1]["limit"] <= 475  # its share, 476, is more than was left
    assert records[2]["phase"] == "cold (again)" and records[2]["outcome"] == "done" and records[2]["limit"] > 460
    assert lines.index("cold: cold: stopped at its 5 s limit") < lines.index("again, on a warm compile cache: the "
                                                                            "phases stopped at their limit")
    assert lines[-1] == "| cold (again) | %d | 0 | done | 2 |" % records[2]["limit"]


def test_a_stopped_phase_lets_its_compiler_finish_the_file(tmp_path):
    # SIGTERM to the whole group cut inductor's C++ compiler mid-write: the half-written .so stayed
    # in the cache and every later design's phase failed ("file too short"). The compiler here
    # writes 2 s after the phase's 5-s limit
    lines, records = fake_plan(tmp_path, [("compiling", 1, (str(tmp_path / "warm"), str(tmp_path / "kernel.so"))),
                                          ("quick", 476, ())])
    assert records[0]["outcome"] == "stopped" and (tmp_path / "kernel.so").read_text() == "whole"
    assert 6 < records[0]["seconds"] < 10  # the group waited for, not the full 10 s of grace


def test_a_printed_result_counts_while_its_process_shuts_down(tmp_path):
    # all six eager-decode cells were done at 18.4 s, yet the row said "stopped at its 20 s limit":
    # the process had printed its result and was still exiting
    lines, records = fake_plan(tmp_path, [("shutting_down", 1, ()), ("quick", 476, ())])
    assert records[0]["outcome"] == "done" and records[0]["seconds"] < 3 and len(records) == 2
    assert "shutting_down: {'compile_s': 1.5}" in lines


def test_a_failed_phase_costs_no_extra_wait(tmp_path):
    # its output's end was read, then waited for again: 5 s more for each failed phase
    lines, records = fake_plan(tmp_path, [("quick", 1, ()), ("fails", 1, ()), ("quick 2", 476, ())])
    assert [r["outcome"] for r in records] == ["done", "failed", "done"]
    assert "fails: fails: failed: RuntimeError: it broke" in lines
    assert records[1]["seconds"] < records[0]["seconds"] + 2 < 4.5  # a process start, not 5 s more


def groups():
    # {pid: (state, process group, parent)} of every process, from /proc
    out = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            state, parent, group = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[:3]
            out[int(d)] = state, int(group), int(parent)
        except (OSError, ValueError):
            pass
    return out


def test_a_cut_check_leaves_no_process(tmp_path):
    # the check had no SIGTERM handler: cut by a caller's time limit, it left its phase (a session
    # of its own) and torchrun's ranks (sessions of their own too) holding the GPU. Cut here once
    # the runs phase has a child of its own (prepare.py or a run), then once torchrun has a rank
    for n, (what, started) in enumerate([
            ("a child", lambda tree, ps: any(ps[p][2] in tree[1:] for p in tree)),
            ("a torchrun rank", lambda tree, ps: any("torch.distributed.run" in cmdline(ps[p][2])
                                                     for p in tree))]):
        out = tmp_path / str(n)
        p = subprocess.Popen([sys.executable, "gpu_check.py", "--dry", "--only=runs", f"--out={out}"], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        seen, end = {p.pid}, time.time() + 200
        while time.time() < end:  # every group under the check, until the phase has what it waits for
            ps = groups()
            tree = [p.pid]
            for pid in tree:
                tree += [c for c, (state, _, parent) in ps.items() if parent == pid and state != "Z"]
            seen |= {ps[pid][1] for pid in tree if pid in ps}
            if started(tree, ps):
                break
            time.sleep(0.05)
        assert time.time() < end, f"{what}: never started"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 128 + signal.SIGTERM, p.stderr.read()[-2000:]
        time.sleep(0.5)
        left = [pid for pid, (state, group, _) in groups().items() if group in seen and state != "Z"]
        assert not left, f"{what}: {[cmdline(pid) for pid in left]} outlived the check"
        assert len(seen) >= 2 + n  # the check's group and its phase's; a torchrun rank's own
        lines = (out / "results.md").read_text().splitlines()
        assert lines[-1].startswith("(cut by SIGTERM after") and "| tiny runs | " in lines[-3]
        assert lines[-3].split(" | ")[3] == "cut"  # the phase table, written before the end


def cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except OSError:
        return ""


def test_a_phase_writes_its_pieces_as_they_come(tmp_path, monkeypatch):
    # the runs phase printed its four lines only at its end; a piece now reaches results.md at once
    gc = dry(tmp_path)
    said, say = [], gc.say
    monkeypatch.setattr(gc, "say", lambda line: said.append((time.time(), line)) or say(line))
    t0 = time.time()
    lines, records = fake_plan(tmp_path, [("pieces", 1, (str(tmp_path / "warm"),)), ("quick", 476, ())])
    first = next(t for t, line in said if line == "the first piece")
    assert first - t0 < 4 and records[0]["outcome"] == "stopped" and records[0]["seconds"] >= 5
    assert lines[0] == "the first piece" and lines[1] == "pieces: pieces: stopped at its 5 s limit"


def test_the_runs_phase_yields_each_line_when_its_runs_are_done(monkeypatch):
    # the lines came at the phase's end, so a run that hung lost them all. Stand-ins for train.py
    # (tests/fake_train.py): c hangs, so "a against b" comes and "b against c" never does
    import gpu_deep
    same = gpu_deep.same_losses(0.0)
    monkeypatch.setitem(gpu_deep.RUNS, "runs", (dict(a=(False, (), None), b=(False, (), None), c=(False, (), None)),
                                                [("b against c", "b", "c", same), ("a against b", "a", "b", same)]))
    monkeypatch.setattr(gpu_deep, "TRAIN", "tests/fake_train.py")
    monkeypatch.setenv("NANOKV_HANG_RUN", "c")
    runs, first = gpu_deep.train_runs("runs", "cpu", "eager"), []
    waiting = threading.Thread(target=lambda: first.append(next(runs)), daemon=True)  # a hang fails, not hangs
    waiting.start()
    waiting.join(120)
    assert first == ["- a against b: ok, max train-loss difference 0.0e+00 (at most 0)"]
    runs.close()  # the hung run is stopped with the generator


def test_models_are_built_on_their_device(monkeypatch):
    # built on the CPU and then moved: each model passed through host RAM, 3 s a build
    import bench
    from model import GPT, preset
    seen, init = [], GPT.__init__
    monkeypatch.setattr(GPT, "__init__", lambda self, cfg: seen.append(torch.empty(0).device.type) or init(self, cfg))
    bench.build(preset("cpu", n_layer=1), "meta")
    bench.train_models(preset("cpu", n_layer=1), "meta", torch.float32, compile=False)
    assert seen == ["meta"] * 6


def test_the_versions_survive_an_sdpa_call_that_raises(tmp_path, monkeypatch):
    # the first SDPA call ran unguarded in the check's own process: a cuDNN error there ended the
    # check before any phase, with no rows
    gc = dry(tmp_path)

    def broken(*a, **k):
        raise RuntimeError("cuDNN Frontend error: no execution plan\nmore")
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", broken)
    line = gc.versions()
    assert "SDPA priority n/a (its first call: RuntimeError: cuDNN Frontend error: no execution plan);" in line
    assert "torch " + torch.__version__ in line


def test_the_tables_say_how_many_layers_they_measured(tmp_path, monkeypatch):
    # the designs table measured 4 of 128m's 12 layers, and said nothing: tokens/s, MFU and peak
    # GiB read as the whole model's. The GPU check's settings, without a GPU
    gc = dry(tmp_path)
    for k, v in dict(dry=False, shape={}, name="128m", context=8192, layers=dict(designs=4, decode=2, big=2)).items():
        monkeypatch.setattr(gc, k, v)
    assert "\n| design, 4 of 128m's 12 layers | train tok/s |" in gc.design_phases("", [("mha", "mha", {})])[0].head
    big = gc.design_phases("", [("mha 512m-8k", "mha", {})], size=("512m-8k", 1))[0].head
    assert "\n| design, 2 of 512m-8k's 24 layers | train tok/s |" in big
    assert "peak bandwidth; as a CUDA graph, then the graphs recorded/replayed/skipped), 2 of 128m's 12 layers (" \
        in gc.decode_phases()[0].head


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


def test_the_deep_check_runs_on_the_cpu(tmp_path):
    # --deep --dry: compiled fp16 under CPU autocast with an inf gradient, SDPA's kernels and a
    # step's copies. Its other two train.py phases (DDP and FSDP2 over gloo) would take a minute
    # more on two cores, and its kept caches run the tokens part's code: docs/training.md gives
    # the whole run
    p = gpu_check("--dry", "--deep", "--only=fp16,sdpa,copies", f"--out={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "results.md").read_text() == p.stdout
    lines = p.stdout.splitlines()
    assert ("- fp16, compiled, the gradients of step 5 made inf: ok: weights after the step against a run stopped "
            "before it, max relative difference 0.0e+00 (at most 1e-4); loss scale 65536 -> 32768") in lines
    sdpa = [line.split(" | ") for line in lines
            if re.match(r"\| (mha|lrkv|mla|gqa|mqa|mla-ds|mha w) \| cpu \| 1x", line)]
    assert [r[0][2:] for r in sdpa] == ["mha", "lrkv", "mla", "gqa", "mqa", "mla-ds", "mha w"]
    assert all(r[-1] == "yes |" for r in sdpa) and sdpa[0][4] == "no: none on this device"  # math takes every call
    assert sdpa[5][2] == "1x2x128x40, 1x2x128x40, 1x2x128x32"  # DeepSeek's widths: d_h + d_r for q and k
    assert sdpa[5][3].startswith("no: Flash attention requires q,k,v to have the same last dimension")
    # dynamo's eager backend: no inductor kernels to read
    copies = [line.split(" | ") for line in lines
              if re.match(r"\| (mha|lrkv|mla) \| [\d,]+ \| [\d,]+, kernels n/a", line)]
    assert [r[0][2:] for r in copies] == ["mha", "lrkv", "mla"] and "FAILED" not in p.stdout
    assert p.stdout.count("| done |") == 3

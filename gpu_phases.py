"""
How gpu_check.py runs its phases: each a function in a process of its own, under a time limit
from a budget that flows, killed with everything it started when the limit comes. No signal is
raised into torch: an alarm inside torch.compile arrived wrapped in dynamo's own errors, or broke
its imports for the rest of the process.

A phase's limit is its share of a 480-s budget (scaled by budget/480), or more where the phases
before it left time: what is left less the later phases' shares. A phase stopped at its limit
runs again at the end, on a warm compile cache, while time is left. The process prints what the
function yields as it goes (PARTIAL, a line each) and then its result (RESULT): a result printed
counts, even if the process is still shutting down at the limit.

SIGTERM or SIGINT to the check (a caller's time limit, ^C) stops the phase running as its limit
would, with a shorter grace, kills every process the phase left (phases and torchrun's ranks run in
sessions of their own, so a signal to the check's group misses them), and ends the check: what it
finished is on disk, as it is written line by line.
"""
import contextlib
import ctypes
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Callable

ROOT = os.path.dirname(os.path.abspath(__file__))
GRACE, CUT_GRACE = 10, 3  # seconds a stopped phase has to clean up; on a cut, less: gpu_run.sh's
# `timeout -k 5` SIGKILLs the check 5 s after its SIGTERM, and nothing may be left running then


class Cut(BaseException):
    """SIGTERM or SIGINT to the check, raised in its main thread where it waits on a phase: not an
    Exception, so no `except Exception` on the way swallows it."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def catch_cuts():
    # in the check's own process (not a phase's): a signal becomes a Cut, once; the clean-up it
    # starts is not cut again. The process adopts what its phases leave orphaned (a child
    # subreaper, Linux), so gone() finds torchrun's ranks even after torchrun has died
    def cut(signum, _):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise Cut(signum)
    signal.signal(signal.SIGTERM, cut)
    signal.signal(signal.SIGINT, cut)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


class Stopped(str):
    """A phase's line saying why it has no result; outcome: stopped (at its limit: it runs again at
    the end while time is left), failed or skipped."""

    def __new__(cls, line, outcome):
        s = super().__new__(cls, line)
        s.outcome = outcome
        return s


@dataclass
class Phase:
    what: str  # its name in results.md
    share: float  # seconds of a 480-s budget
    f: Callable  # the function, run by phase() in a process of its own
    args: tuple = ()
    write: Callable = print  # (its result or a Stopped line) -> writes what it has
    head: str = ""  # the lines before the first phase of its table
    piece: Callable = None  # takes what it yields, as it comes
    kw: dict = field(default_factory=dict)


def run_plan(plan, cmd, budget, start, say, record):
    """The phases in order, then those stopped at their limit again while time is left: each
    phase's head (before the first of a table), its rows (p.write), and its record (limit,
    seconds, outcome, compile seconds where it compiles) to record(); then a table of the records.
    cmd: the command that runs one phase (--part appended); start: time.time() at the check's start."""
    again, records, cut = [], [], None
    for phases, retry in ((plan, False), (again, True)):  # again: filled by the first pass
        head = None
        for i, p in enumerate(phases):
            # what is left, and the later phases' shares, each at least the 5 s a phase is given
            left = budget - (time.time() - start)
            later = sum(max(5.0, q.share * budget / 480) for q in phases[i + 1:])
            if cut or retry and left < 5:
                break
            if retry and i == 0:
                say("\nagain, on a warm compile cache: the phases stopped at their limit")
            if p.head and p.head != head:
                say(p.head)
                head = p.head
            limit = min(left, max(5.0, p.share * budget / 480, left - later))
            t0 = time.time()
            try:
                r = Stopped(f"{p.what}: skipped, the {budget:.0f} s budget is spent", "skipped") \
                    if left < 5 else phase(p.what, limit, cmd, p.f, *p.args, piece=p.piece, **p.kw)
            except Cut as c:  # the phase and all it started are gone: its line, then the table
                r, cut = Stopped(f"{p.what}: cut by {c} after {time.time() - t0:.0f} s", "cut"), c
            p.write(r)
            records.append(dict(phase=p.what + " (again)" * retry, limit=round(limit) if left >= 5 else 0,
                                seconds=round(time.time() - t0, 1), outcome=getattr(r, "outcome", "done"),
                                compile_s=r.get("compile_s") if isinstance(r, dict) else None))
            record(records[-1])
            if getattr(r, "outcome", None) == "stopped" and not retry:
                again.append(p)
    say("\nthe phases: the limit each had (its share, or more where the phases before it left time), "
        "the seconds it took, and the seconds it compiled for\n")
    say("| phase | limit s | seconds | outcome | compile s |\n|---|---|---|---|---|")
    for r in records:
        c = "n/a" if r["compile_s"] is None else f"{r['compile_s']:.0f}"
        say(f"| {r['phase']} | {r['limit']} | {r['seconds']:.0f} | {r['outcome']} | {c} |")
    if cut:
        raise cut


def phase(what, limit, cmd, f, *a, piece=None, **kw):
    """f(*a, **kw) in a process of its own (cmd --part, which calls run_part) for at most limit
    seconds -> its result, or a Stopped line saying why there is none. What it yields goes to
    piece as it comes. Nothing the phase started outlives it, even when the check is cut."""
    lines, got, eof = queue.Queue(), [], []
    before = set(processes())  # not the phase's: left alone
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([*cmd, "--part", json.dumps([f.__name__, a, kw])], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=err, text=True, start_new_session=True)  # its own process group: killed whole
        # read on a thread: the limit holds while the phase prints nothing
        threading.Thread(target=lambda: [*map(lines.put, proc.stdout), lines.put(None)], daemon=True).start()

        def take(wait):  # the next line: a piece passed on, a result kept; False at the end of the output
            line = lines.get(timeout=wait)
            if line is not None and line.startswith("PARTIAL ") and piece:
                piece(json.loads(line[8:]))
            elif line is not None and line.startswith("RESULT "):
                got.append(json.loads(line[7:]))
            if line is None:
                eof.append(True)
            return line is not None

        end, why = time.time() + limit, "exit"
        try:
            try:
                while not got and take(max(0.0, end - time.time())):
                    pass
            except queue.Empty:
                why = "limit"
            except Cut as c:
                why = c
            # stopped at its limit, the phase alone gets SIGTERM: its clean-up runs (it stops the
            # runs it started, torchrun its ranks), and a compiler it started finishes the file it
            # writes (cut by a signal to the group, a half-written .so stayed in inductor's cache,
            # and every later phase that loaded it failed: "file too short"). Once its group is
            # empty, or after the grace, SIGKILL for what is left. A phase that printed its result
            # has nothing left to do
            if why != "exit" and not got:
                proc.terminate()
                grace = time.time() + (CUT_GRACE if isinstance(why, Cut) else GRACE)
                while (proc.poll() is None or alive(proc.pid)) and time.time() < grace:
                    time.sleep(0.1)
        finally:  # a cut in the grace above lands here too: nothing is left either way
            gone(proc, before)
        if isinstance(why, Cut):
            raise why
        with contextlib.suppress(queue.Empty):  # what it printed before it was stopped counts too,
            while not got and not eof and take(5):  # unless its output has ended already
                pass
        if got:
            return got[0]
        if why == "limit":
            return Stopped(f"{what}: stopped at its {limit:.0f} s limit", "stopped")
        err.seek(0)
        last = (err.read().strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return Stopped(f"{what}: failed: {last}", "failed")


def gone(proc, before):
    # SIGKILL the phase's group and every process under this one that was not there before it
    # (torchrun's ranks and compile workers, in groups of their own; orphans, adopted by
    # catch_cuts), until none is left; then reap the adopted. A cut meanwhile waits for the end
    me, cuts = os.getpid(), {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, cuts)
    try:
        for _ in range(50):
            ps = processes()
            left = [p for p in descendants(me, ps) if p not in before]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            for p in left:
                with contextlib.suppress(OSError):
                    group = os.getpgid(p)
                    if group != os.getpgrp():
                        os.killpg(group, signal.SIGKILL)
                    os.kill(p, signal.SIGKILL)
            proc.wait()
            for p, (state, parent) in ps.items():
                if parent == me and state == "Z" and p not in before and p != proc.pid:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(p, os.WNOHANG)
            if not left:
                break
            time.sleep(0.1)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, cuts)


def processes():
    # {pid: (state, parent pid)} of every process, from /proc
    out = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                state, parent = f.read().rsplit(")", 1)[1].split()[:2]
            out[int(d)] = state, int(parent)
        except (OSError, IndexError, ValueError):
            continue  # it ended while read
    return out


def descendants(pid, ps=None):
    """The living processes under pid: its children, theirs, ..."""
    children = {}
    for p, (state, parent) in (ps or processes()).items():
        if state != "Z":
            children.setdefault(parent, []).append(p)
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def alive(group):
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def run_part(functions, fname, fargs, fkw):
    # one phase, in the process phase() started: what it yields as it comes, then its result
    out = functions[fname](*fargs, **fkw)
    if isinstance(out, types.GeneratorType):
        try:
            while True:
                print("PARTIAL " + json.dumps(next(out)), flush=True)
        except StopIteration as end:
            out = end.value
    print("RESULT " + json.dumps(out), flush=True)

"""gpu_check.py with one design's decode hanging, as a slow compile would: a phase of it must be
stopped at its limit and keep the designs it finished (tests/test_gpu_check.py). With
NANOKV_SLOW_ONCE (a marker file's path) it hangs the first time only, as a cold compile; with
NANOKV_ASKED (a file's path) each design asked for is appended to that file, a line each."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpu_check  # noqa: E402

bench = gpu_check.decode_bench


def slow(*a, designs=None, **kw):
    if os.environ.get("NANOKV_ASKED"):
        with open(os.environ["NANOKV_ASKED"], "a") as f:
            f.write(f"{designs[0]}\n")
    once = os.environ.get("NANOKV_SLOW_ONCE")
    if designs == (os.environ["NANOKV_SLOW_DESIGN"],) and not (once and os.path.exists(once)):
        if once:
            open(once, "w").close()
        time.sleep(3600)
    return bench(*a, designs=designs, **kw)


gpu_check.decode_bench = slow
gpu_check.main(sys.argv[1:])

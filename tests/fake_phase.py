"""A stand-in for `gpu_check.py --part`, without torch: it does what its function's name says, so
tests/test_gpu_check.py can time gpu_phases.run_plan in seconds.
    quick           its result at once
    shutting_down   its result at once, then a minute more before it exits (torch's teardown)
    cold            stopped at any limit the first time, as a cold compile; at once when called
                    again (the marker file args[0] says it ran: a warm cache)
    pieces          a piece at once, then as cold
    compiling       as cold, with a compiler that writes the file args[1] 7 s after the start
    fails           an error on stderr, then exit status 1, printing nothing
"""
import json
import os
import subprocess
import sys
import time

fname, args, kw = json.loads(sys.argv[sys.argv.index("--part") + 1])
if fname == "fails":
    sys.exit("RuntimeError: it broke")
if fname == "pieces":
    print("PARTIAL " + json.dumps("the first piece"), flush=True)
if fname == "compiling" and not os.path.exists(args[0]):
    subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(7); open(sys.argv[1], 'w').write('whole')",
                      args[1]])
if fname in ("cold", "pieces", "compiling") and not os.path.exists(args[0]):
    open(args[0], "w").close()
    time.sleep(60)
print("RESULT " + json.dumps({"compile_s": 1.5}), flush=True)
if fname == "shutting_down":
    time.sleep(60)

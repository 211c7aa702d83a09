"""
train.py's configuration, nanoGPT's way: the script's defaults are plain assignments between two
`# ----` lines; a config file (config/*.py) assigns some of them again; --key=value overrides
them, checked against the default's type. --help lists every field with its default and the
comment beside it, read from that block, so the two can never disagree.

    python train.py config/128m.py --attn=lrkv --batch_size=4
"""
import ast
import re
import sys

from common import fail


def fields(path):
    """{name: comment} of the defaults block of the script at path, in order."""
    src = open(path, encoding="utf-8").read().splitlines()
    a, b = [i for i, line in enumerate(src) if line.startswith("# ----")][:2]
    out = {}
    for line in src[a + 1:b]:
        if line.startswith("#"):  # a section heading
            continue
        code, _, comment = line.partition("  # ")
        if code.strip():
            names = re.findall(r"(\w+)\s*=(?!=)", code)  # `a = b = None` names a and b
            out |= dict.fromkeys(names, comment.strip())
        else:  # a comment carried on to the next line, aligned under its start
            out |= {name: f"{out[name]} {comment.strip()}" for name in names}
    return out


def configure(path, g, argv, doc):
    """Applies argv (config files and --key=value) to g, the script's globals; returns the field names."""
    meaning = fields(path)
    if "-h" in argv or "--help" in argv:
        print(doc.strip() + "\n\nfields (--key=value; default; meaning):")
        for k, m in meaning.items():
            print(f"  --{k}={g[k]!r}" + (f"  {m}" if m else ""))
        sys.exit(0)
    for arg in argv:
        if not arg.startswith("--"):
            try:
                src = open(arg).read()
            except OSError:
                fail(f"config file {arg} not found; see config/ for the presets")
            try:
                exec(compile(src, arg, "exec"), g)
            except Exception as e:  # a config file is Python: its mistake is bad input too
                fail(f"config file {arg}: {type(e).__name__}: {e}")
            continue
        key, eq, val = arg[2:].partition("=")
        if key not in meaning:
            fail(f"unknown flag --{key}; flags are: " + " ".join(f"--{k}" for k in meaning))
        try:
            val = ast.literal_eval(val) if eq else True
        except (ValueError, SyntaxError):
            pass  # a bare string such as --attn=lrkv
        default = g[key]
        if key == "compile" or isinstance(default, bool):
            ok = isinstance(val, bool) or (key == "compile" and val == "auto")
        elif default is None:  # "the preset's" or "automatic": checked where it is used
            ok = val is None or isinstance(val, (int, float, str, bool))
        elif isinstance(default, float):
            ok = isinstance(val, (int, float)) and not isinstance(val, bool)
        elif isinstance(default, int) and isinstance(val, float) and val.is_integer():
            ok, val = True, int(val)  # --train_tokens=5e9
        else:
            ok = type(val) is type(default)
        if not ok:
            want = ("True, False or auto" if key == "compile"
                    else f"{type(default).__name__} like the default {default!r}")
            fail(f"--{key}={val!r}: expected {want}")
        g[key] = float(val) if isinstance(default, float) and val is not None else val
    return list(meaning)

"""
train.py's configuration, nanoGPT's way: the script's defaults are plain assignments between two
`# ----` lines; a config file (config/*.py) assigns some of them again; --key=value overrides
them, checked against the default's type. --help lists every field with its default and the
comment beside it, read from that block, so the two can never disagree.

    python train.py config/128m.py --attn=lrkv --batch_size=4
"""
import ast
import io
import sys
import tokenize

from common import fail


def fields(path):
    """{name: comment} of the defaults block of the script at path, in order: the names its
    assignments bind (read by ast, so spacing and line breaks do not matter), each with the
    comments on its statement's lines and on the comment lines under it. A comment line that
    starts at column 0 is a section heading and belongs to no field."""
    src = open(path, encoding="utf-8").read()
    a, b = [i + 1 for i, line in enumerate(src.splitlines()) if line.startswith("# ----")][:2]
    bound = {}  # line number -> the names its statement binds
    for node in ast.parse(src).body:
        if a < node.lineno < b and isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            bound |= dict.fromkeys(range(node.lineno, node.end_lineno + 1), names)
    comments = {t.start[0]: (t.start[1], t.string.lstrip("#").strip())
                for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == tokenize.COMMENT}
    out, names = {}, []
    for line in range(a + 1, b):
        if line in bound:
            if bound[line] is not names:  # a new statement
                names = bound[line]
                out |= dict.fromkeys(names, "")
        elif comments.get(line, (1,))[0] == 0:
            names = []  # a heading
        if line in comments:
            out |= {n: f"{out[n]} {comments[line][1]}".strip() for n in names}
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
            before = {k: g[k] for k in meaning}
            try:
                exec(compile(src, arg, "exec"), g)
            except Exception as e:  # a config file is Python: its mistake is bad input too
                fail(f"config file {arg}: {type(e).__name__}: {e}")
            for k in (k for k in meaning if g[k] is not before[k]):  # what the file set, typed as a flag
                g[k] = typed(g[k], before[k], k, f"config file {arg}: {k}")
            continue
        key, eq, val = arg[2:].partition("=")
        if key not in meaning:
            fail(f"unknown flag --{key}; flags are: " + " ".join(f"--{k}" for k in meaning))
        try:
            val = ast.literal_eval(val) if eq else True
        except (ValueError, SyntaxError):
            pass  # a bare string such as --attn=lrkv
        g[key] = typed(val, g[key], key, f"--{key}")
    return list(meaning)


def typed(val, default, key, name):
    """val in the type of the field's value so far, its default (an int where a float is due, one
    item where a list is), or a one-line refusal that names it."""
    if key == "compile" or isinstance(default, bool):
        ok = isinstance(val, bool) or (key == "compile" and val == "auto")
    elif default is None:  # "the preset's" or "automatic": checked where it is used
        ok = val is None or isinstance(val, (int, float, str, bool))
    elif isinstance(default, list):  # a list of the default's kind, or one item: --mqar_pairs=8
        val = list(val) if isinstance(val, (list, tuple)) else [val]
        ok = bool(val) and all(type(v) is type(default[0]) for v in val)
    elif isinstance(default, float):
        ok = isinstance(val, (int, float)) and not isinstance(val, bool)
    elif isinstance(default, int) and isinstance(val, float) and val.is_integer():
        ok, val = True, int(val)  # --train_tokens=5e9
    else:
        ok = type(val) is type(default)
    if not ok:
        want = "True, False or auto" if key == "compile" else f"{type(default).__name__} like the default {default!r}"
        fail(f"{name}={val!r}: expected {want}")
    return float(val) if isinstance(default, float) and val is not None else val


def check(g, least, choices):
    """Fails on a count below its least ({name: least}) or a name not among its choices."""
    for k, n in least.items():
        if g[k] < n:
            fail(f"--{k}={g[k]} must be at least {n}")
    for k, names in choices.items():
        if g[k] not in names:
            fail(f"--{k}={g[k]!r} is unknown; use {' or '.join(names)}")

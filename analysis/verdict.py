"""
The verdict: one row per design, MHA the reference, one column per experiment of docs/plan.md, each
cell re-computed from that experiment's committed logs and marked by its own table's Holm
correction. Two forms: at a glance (README: a word and a number a cell) and in full (docs/results.md:
every estimate with its 95% interval).

    python plot.py --verdict          # prints both, and the notes under the full one

Each column is the family its experiment's plan fixed, so Holm runs within a column, never across
them. Never imports torch, as plot.py.
"""
import glob
import os
import textwrap

from common import DESIGNS, warn
from analysis.curves import deltas, summarize
from analysis.equal import best, families, kind, word
from analysis.logs import load_runs, odd_runs
from analysis.recall import SOLVED, reference_cells, solve_groups, solve_rows
from analysis.stats import MARGIN, family, holm, paired_t, render, welch
from analysis.survival import survival_rows
from analysis.sweeps import budget_pairs, lr_sweep, sweep

RUNS = "docs/runs"
RECALL = "runs missing"  # E6's column before every planned run is in, so nothing is read early
E6_SEEDS = 16  # E6's runs of each design and of the window (docs/plan.md); fewer: not read yet
E6_PLAN = [("mha", 0), ("gqa", 0), ("mqa", 0), ("mla", 0), ("lrkv", 0), ("mha", 32)]  # (design, window)
E8_PLAN, E8_SEEDS = [6, 7], 12  # E8's families' rows, incumbent included (50%, 25%), and seeds a row
E8_ENDED = "ENDED"  # written by docs/runs/e8/runs.sh when the budget ends E8 at fewer whole seeds
# the glance's columns: (experiment, header in plain words, what an established gap is called when
# positive and when negative, None for a change in a gap, which has no equivalence margin; what the
# key under the table adds). The codes go to the key, so a head reads without them
GLANCE = [("E1", "loss at paper's rate", ("behind", "ahead"), ""),
          ("E3b", "at own best rate", ("behind", "ahead"), ""),
          ("E2", "at 4× context", None, "the gap's change from 256 to 1,024 bytes")]
LOOKUP = ("E6", "learned the lookup")  # what E6 counted: runs that learned it within 4,000 steps
LEARNING = ("E7", "less or only later")  # does a smaller cache hold less, or only learn later? E7's
# part A answers, and takes E6's place at a glance
E7_SEEDS = 16  # E7's part A: runs of each of E6_PLAN's arms (docs/plan.md); fewer: not read yet
UNDECIDED = "inconclusive"  # neither test decides: a gap not established, no equivalence shown
RULE = ("Holm within each column: behind or ahead at Holm's p < 0.05, = equal when two one-sided "
        f"tests put Δ within ±{MARGIN} nats, {UNDECIDED} when neither.")


def paired(runs, split):
    """Each design's paired Δ MHA in final loss on split, its family corrected: {attn: paired_t}."""
    out = {attn: paired_t(d) for attn, d in deltas(runs, split).items()}
    family(list(out.values()))
    return out


def interaction(runs, other):
    """E2: Δ MHA at 1,024 minus Δ MHA at 256 per design, Welch's t, one family."""
    here, away = deltas(runs), deltas(other)
    out = {a: welch(here[a], away[a]) for a in here if a in away}
    family(list(out.values()))
    return out


def cell(r, margin=True):
    """'+0.0073 [+0.0031, +0.0115] established': the estimate, its 95% interval and its mark."""
    if not r or r.get("lo") is None:
        return "-"
    tost = r.get("tost")
    mark = ("established" if r["established"] else
            "equivalent" if margin and tost is not None and tost < 0.05 else UNDECIDED)
    return f"{r['diff']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}] {mark}"


def glance(r, words):
    """'+0.030 behind', '= equal' or 'inconclusive': the mark, and the estimate where it is established."""
    if not r or r.get("lo") is None:
        return "no runs"
    if r["established"]:
        up, down = words or ("wider", "narrower")  # a change in the gap: it grows or shrinks
        return f"{r['diff']:+.3f} {up if r['diff'] > 0 else down}"
    return "= equal" if words and r.get("tost") is not None and r["tost"] < 0.05 else UNDECIDED


def columns(root):
    """{experiment: {attn: its test}} and {attn: KV cache as a share of MHA's}, from the logs."""
    e1 = load_runs([os.path.join(root, "e1")])
    cache = {r["attn"]: r["kv_pct"] for r in summarize(e1)}
    sweep_runs = load_runs([os.path.join(root, "e3a")] + sorted(glob.glob(os.path.join(root, "e1", "cpu_*_s[0-2]"))))
    _, summary = lr_sweep(sweep_runs)
    return {"E1": paired(e1, "test"), "E1 validation": paired(e1, "val"),
            "E3b": paired(load_runs([os.path.join(root, "e3b")]), "test"),
            "E2": interaction(load_runs([os.path.join(root, "e2")]), e1),
            "E3a": {s["attn"]: s["rate"] for s in summary}}, cache


def same_cache(path):
    """E5, once its logs exist: LRKV (r=7) against GQA (kv=2) at nearly the same cache, paired by
    seed; a family of one. Its test, or None."""
    if not glob.glob(os.path.join(path, "*", "log.jsonl")):
        return None
    # the pair `plot.py docs/runs/e5 --pareto` tests, as it pairs settings at nearly equal cache
    r, = family(budget_pairs(sweep(load_runs([path]))))
    return r


def equal_caches(root):
    """E8's two families (analysis.equal.families, whole seeds) once every planned run is in, or
    its budget ended it (E8_ENDED), else None. The 50% incumbent's runs and LRKV r=7's are E5's,
    each unless E8 ran it again (docs/plan.md)."""
    path = os.path.join(root, "e8")
    ended = os.path.exists(os.path.join(path, E8_ENDED))
    own = sum(E8_PLAN) - 2  # E8's own rows: E5's GQA and LRKV r=7 aside
    if len(glob.glob(os.path.join(path, "*", "log.jsonl"))) < (1 if ended else own * E8_SEEDS):
        return None  # not all in: nothing read yet
    runs = load_runs([path])
    for attn in ("gqa", "lrkv"):  # E5's rows: GQA kv=2 and LRKV r=7, neither shared
        if not any(r["attn"] == attn and kind(attn, r["config"]) == "narrow" for r in runs):
            runs += load_runs(glob.glob(os.path.join(root, "e5", f"cpu_{attn}_s*")))
    _, fams, _ = families(runs)
    if [len(f) for f in fams] != E8_PLAN:  # a planned row missing, or an extra: its Holm is not the plan's
        if ended:
            warn(f"E8 not read: its families have {[len(f) for f in fams]} rows, the plan {E8_PLAN}")
        return None
    return fams if ended or all(r["n"] == E8_SEEDS for f in fams for r in f) else None


def equal_cache_row(fam):
    """The glance's row of one E8 family: its best way, or that none is ahead of the incumbent."""
    short = lambda r: r["name"].replace("Standard ", "")
    top, equal = best(fam), sum(word(r) == "= equal" for r in fam[1:])  # named in the full reading
    if top:
        said = f"{short(top)} {top['diff']:+.3f} ahead"
    else:
        # "ahead" as the rule reads it: established after Holm
        said = f"none ahead of {fam[0]['label']}" + (f"; {equal} equal" if equal else "")
    cut = {0.5: "halve", 0.25: "quarter"}.get(round(fam[0]["share"], 2), f"{fam[0]['share']:.0%} of")
    return [f"best way to {cut} the cache", f"{fam[0]['share']:.0%}", said, *["-"] * len(GLANCE)]


def recall(root):
    """E6's primary family once every run is in: {(attn, window): its row at the hardest reference
    cell} (analysis.recall.solve_rows; MHA's row untested, the reference), or None. Each row also
    gets its runs' context (at which a window's cache is a share of MHA's) and steps."""
    path = os.path.join(root, "e6")
    if not glob.glob(os.path.join(path, "*", "log.jsonl")):
        return None
    runs = load_runs([path])
    odd = odd_runs(runs, sweep=True)  # one shape, length, rate and data: the windows' runs are no odd ones
    if odd:
        raise ValueError(f"{path} is not one experiment: {'; '.join(odd)}")
    groups = solve_groups(runs)
    if len({width for _, _, width in groups}) > 1:
        raise ValueError(f"{path} holds runs at several widths; E6 runs at one")
    by = {(attn, window): g for (attn, window, _), g in groups.items()}
    if any(len(by.get(k, [])) < E6_SEEDS for k in E6_PLAN):  # a later window's runs need not be in
        return None
    rows = solve_rows(groups, reference_cells(load_runs([os.path.join(root, "e6b")]), runs[0]))
    N = next((r["pairs"] for r in rows if r.get("family") == "primary"), None)
    if N is None:
        raise ValueError("E6's validity runs (e6b) give no reference cell: by its plan E6 compares nothing")
    cfg = runs[0]["config"]  # one experiment (odd_runs): every run's length and steps are these
    return {(r["attn"], r["window"]): dict(r, context=cfg["block_size"], steps=cfg["max_iters"]) for r in rows
            if r["pairs"] == N and (r.get("family") == "primary" or (r["attn"], r["window"]) == ("mha", 0))}


def learning(root):
    """E7's part A once every planned run is in: {(attn, window): its row (analysis.survival), with
    the plan's reading against MHA}, or None."""
    path = os.path.join(root, "e7", "a")
    if not glob.glob(os.path.join(path, "*", "log.jsonl")):
        return None
    rows = {(r["attn"], r["window"]): r for r in survival_rows([r for r in load_runs([path]) if r["score"]])}
    return rows if all(rows.get(k, {}).get("n", 0) >= E7_SEEDS for k in E6_PLAN) else None


def learning_cells(e7):
    # a glance cell: the plan's reading, then the runs solved by the cap
    return {k: f"{r.get('reading', 'reference')}, {r['k']}/{r['n']}" for k, r in e7.items()}


def control(rows):
    # E6's control, the window; the check before any design is read: it is established behind MHA
    window = next(r for (a, w), r in rows.items() if w)
    return window, window["established"] and window["diff"] < 0


def recall_cells(rows, passed):
    """{(attn, window): a glance cell}: runs that learned the lookup, then behind, ahead or
    inconclusive, Holm within the primary family; every cell 'probe failed' unless the window is
    established behind MHA."""
    mark = lambda r: (" behind" if r["diff"] < 0 else " ahead") if r["established"] else " " + UNDECIDED
    return {k: "probe failed" if not passed else f"{r['k']}/{r['n']}" + (mark(r) if "diff" in r else "")
            for k, r in rows.items()}


def glance_table(cols, cache, e6, passed, e5, e8=None, e7=None):
    """The README's table: a word and a number a cell, heads in plain words, the codes in a key.
    Its last column is recall: E7's part A once it is in, else E6's."""
    share = lambda a: f"{100 * cache[a]:.0f}%" if cache.get(a) else "-"  # a design E1 has no runs of: "-"
    cells = learning_cells(e7) if e7 else recall_cells(e6, passed) if e6 else {}
    body = [[d.label, share(a), *(["reference"] * len(GLANCE) if a == "mha" else
                                  [glance(cols[e].get(a), w) for e, _, w, _ in GLANCE]), cells.get((a, 0), RECALL)]
            for a, d in DESIGNS.items()]
    # the window's row says what it is (E6's control; an arm of E7); its cache is a share of MHA's
    # only at a given length, the probe's context
    body += [[f"MHA, sliding window {r['window']} (control)", f"{100 * r['kv_pct']:.0f}% at {r['context']}",
              *["-"] * len(GLANCE), cells[k]] for k, r in (e6 or {}).items() if k[1] and not e7]
    body += [[f"MHA, sliding window {r['window']}",
              f"{100 * r['kv'] / e7['mha', 0]['kv']:.0f}% at {r['runs'][0]['config']['block_size']}",
              *["-"] * len(GLANCE), cells[k]] for k, r in (e7 or {}).items() if k[1]]
    if e5:  # E5's answer where it belongs, in the loss column: its reference is GQA, not MHA
        a, b = e5["a"], e5["b"]
        body += [[f"{a['label']} {a['setting']} against {b['label']} ({100 * b['kv_pct']:.0f}%)",
                  f"{100 * a['kv_pct']:.0f}%", glance(e5, ("behind", "ahead")), *["-"] * len(GLANCE)]]
    body += [equal_cache_row(f) for f in e8 or []]  # E8: every way to cut the cache, against GQA, MQA
    last = LEARNING if e7 else LOOKUP
    table = render(["design", "KV cache", *(h for _, h, _, _ in GLANCE), last[1]], body)
    codes = [e for e, *_ in GLANCE] + [last[0]]
    key = (f"Key: {', '.join(codes[:-1])} and {codes[-1]} by column" + ("; the row against GQA is E5" if e5 else "")
           + (f"; the best-way rows are E8, at {e8[0][1]['pairs']} seeds" if e8 else "") + ".")  # one line: the codes a head leaves out, each a section of docs/results.md
    glosses = [f"{h[0].upper()}{h[1:]}: {gloss}." for _, h, _, gloss in GLANCE if gloss]
    if e7:
        c = e7["mha", 0]["runs"][0]["config"]
        lookup = (f"Less or only later (MQAR recall, {c['block_size']} tokens): runs of {e7['mha', 0]['n']} "
                  f"that learned the lookup by step {e7['mha', 0]['cap']:,}, and the plan's reading "
                  "against MHA's.")
    else:
        lookup = (f"Learned the lookup (MQAR): runs of {e6['mha', 0]['n']} at test accuracy ≥{SOLVED} "
                  f"with {e6['mha', 0]['pairs']} pairs after {e6['mha', 0]['steps']:,} steps on "
                  f"{e6['mha', 0]['context']}-token sequences; Fisher's test against MHA's." if e6 else "")
    return table + "\n\n" + key + "\n\n" + wrap(" ".join(s for s in (RULE, *glosses, lookup) if s))


def wrap(s):
    return textwrap.fill(s, 100, break_on_hyphens=False, break_long_words=False)  # lines of a page


def verdict(root=RUNS):
    """(glance, full, notes): the README's table, its rule and key; the full table with every
    interval and the E5 pair (docs/results.md); the notes under the full one."""
    cols, cache = columns(root)
    e6 = recall(root)
    passed = control(e6)[1] if e6 else None
    e5 = same_cache(os.path.join(root, "e5"))
    e8 = equal_caches(root)
    e7 = learning(root)
    share = lambda a: f"{100 * cache[a]:.0f}%" if cache.get(a) else "-"
    margin = {"E1": True, "E1 validation": True, "E3b": True, "E2": False, "E3a": False}
    ref = lambda a: ["reference"] * len(margin) if a == "mha" else None
    full = render(["design", "KV cache, % of MHA", "E1: Δ MHA, paper's rate", "E1 on the validation plays",
                   "E3b: Δ MHA, own rate", "E2: change at context 1,024", "E3a: Δ MHA per doubling of the rate"]
                  + ([f"E6: runs that learned the lookup, {e6['mha', 0]['pairs']} pairs, Δ MHA"] if e6 else [])
                  + (["E7: runs that learned it by the cap, median step, log-rank Holm p, reading"] if e7 else []),
                  [[d.label, share(a), *(ref(a) or [cell(cols[e].get(a), m) for e, m in margin.items()]),
                    *([solve_cell(e6.get((a, 0)), passed)] if e6 else []),
                    *([learning_cell(e7.get((a, 0)))] if e7 else [])] for a, d in DESIGNS.items()]
                  + [[r["label"], f"{100 * r['kv_pct']:.0f}% at {r['context']}", *["-"] * len(margin),
                      solve_cell(r, passed), *([learning_cell(e7.get(k))] if e7 else [])]
                     for k, r in (e6 or {}).items() if k[1]])
    tests = [(f"{name} {DESIGNS[a].label}", r) for name, col in cols.items() for a, r in col.items()
             if r and r.get("p") is not None]
    tests += [(f"E6 {r['label']}", r) for r in (e6 or {}).values() if r.get("p") is not None]
    tests += [(f"E7 {r['label']}", {"p": r["p_lr"], "established": r["p_lr_holm"] < 0.05})
              for r in (e7 or {}).values() if "p_lr" in r]
    tests += [(f"E8 {r['name']}", r) for f in e8 or [] for r in f[1:]]
    across = holm([r["p"] for _, r in tests])
    drop = [f"{name} (Holm p {p:.2g})" for (name, r), p in zip(tests, across) if r["established"] and p >= 0.05]
    notes = ("Δ: design minus MHA in final loss (nats per byte), mean over 12 seeds (E3a: 3), 95% interval; "
             "E2 and E3a give how Δ moves. Each column is one Holm family of its own (the plan's); "
             f"established: Holm's p < 0.05; equivalent: two one-sided tests within ±{MARGIN} nats; "
             f"{UNDECIDED}: neither. E1 and E3b score the test plays, E1's validation column the same models on "
             f"the validation plays. {recall_note(e6, passed)}{E7_NOTE * bool(e7)} Corrected as one family of all {len(tests)} tests "
             f"instead, {len(drop)} established marks would drop: {', '.join(drop) or 'none'}.")
    same = e5 and (f"At the same cache (E5): {e5['a']['label']} with {e5['a']['setting']} "
                   f"({e5['a']['kv_pct']:.1%} of MHA's) minus {e5['b']['label']} with {e5['b']['setting']} "
                   f"({e5['b']['kv_pct']:.1%}), {e5['pairs']} seeds: {cell(e5)} (TOST p {e5['tost']:.2g}).")
    every = [f"at {f[0]['share']:.0%}, against {f[0]['name']}: "
             + "; ".join(f"{r['name']} {cell(r)}" for r in f[1:]) for f in e8 or []]
    n = e8 and e8[0][1]["pairs"]  # the whole seeds read
    every = e8 and (f"Every way to cut the cache (E8), Δ the row minus its incumbent, {n} seeds, "
                    "Holm within each cache size: " + "; ".join(every) + ".")
    return (glance_table(cols, cache, e6, passed, e5, e8, e7),
            full + "".join(f"\n\n{wrap(p)}" for p in (same, every) if p), wrap(notes))


def solve_cell(r, passed):
    """'3/16, -0.81 (Holm p 4e-05) established': runs solved, the gap in solve rate from MHA's, its
    mark; 'probe failed' after them unless the window is behind MHA (then no mark is read)."""
    if r is None:
        return "-"
    if "diff" not in r:
        return f"{r['k']}/{r['n']} reference"
    return (f"{r['k']}/{r['n']}, {r['diff']:+.2f} (Holm p {r['p_holm']:.2g}) "
            + (("established" if r["established"] else UNDECIDED) if passed else "probe failed"))


E7_NOTE = (" E7: runs that learned the lookup at every count by the cap (12,000 steps at a constant "
           "rate), each stopped when it did; the median step is Kaplan-Meier's; two-sided log-rank "
           "test of the times against MHA's, Holm over the five arms; the reading is the plan's "
           "(docs/plan.md, E7), from Fisher's test of the share solved and the censored runs' curves.")


def learning_cell(r):
    """'12/16, median 4,200, Holm p 0.003, later': E7's part A for one arm."""
    if r is None:
        return "-"
    med = f"{r['median']:,}" if r["median"] is not None else "not reached"
    test = f", Holm p {r['p_lr_holm']:.2g}, {r['reading']}" if "reading" in r else ", reference"
    return f"{r['k']}/{r['n']}, median {med}{test}"


def recall_note(e6, passed):
    if e6 is None:
        return "Recall: E6's runs are not all in, so no design's recall is read."
    window = control(e6)[0]
    return (f"E6: runs whose final test accuracy at {window['pairs']} pairs, the hardest cell MHA's validity runs "
            f"solve, is ≥{SOLVED}; two-sided Fisher's exact test against MHA's, Holm over the {len(e6) - 1} rows "
            f"(the plan's primary family). The check: {window['label']} must be established behind MHA; it is "
            + ("(the probe passed)." if passed else
               "not, so the probe failed its check and no design's recall is read."))

"""The design table: every place docs/designs.md's "Adding a design" names is either read from
common.DESIGNS or checked here, so a design added in part fails a test that says what is missing."""
import inspect
import os
import re
from dataclasses import fields, replace

import pytest
import torch

import attention
import flops
from common import DESIGNS
from model import GPT, GPTConfig
from test_model import randomized, tiny

# GPTConfig fields every design shares: the rest belong to the design whose row lists them
SHARED = {"attn", "n_layer", "n_head", "n_embd", "block_size", "vocab_size", "attn_scale", "rope_base", "mlp_hidden",
          "window", "k_eq_v", "kv_share"}


def attention_classes():
    # the designs' classes: the nn.Modules in attention.py that attend (forward(x, cos, sin, cache, pos, mask))
    return {name for name, c in vars(attention).items() if inspect.isclass(c) and issubclass(c, torch.nn.Module)
            and list(inspect.signature(c.forward).parameters)[1:] == ["x", "cos", "sin", "cache", "pos", "mask",
                                                                       "kv"]}


def test_every_class_has_a_row_and_every_row_a_class():
    rows = {d.cls for d in DESIGNS.values()}
    assert attention_classes() - rows == set(), "attention.py has a class no row of common.DESIGNS names"
    assert rows - attention_classes() == set(), "a row of common.DESIGNS names a class attention.py lacks"


def test_unknown_design_is_refused_in_one_line():
    with pytest.raises(ValueError, match=rf"attn='bogus': unknown attention; use one of {', '.join(DESIGNS)}$"):
        GPTConfig(attn="bogus")


def changes_the_model(a, b):
    # different parameter shapes, or different logits at the same random weights
    sa, sb = ({k: v.shape for k, v in GPT(c).state_dict().items()} for c in (a, b))
    if sa != sb:
        return True
    idx = torch.randint(0, a.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return not torch.equal(randomized(a)(idx)[0], randomized(b)(idx)[0])


def other_values(value):
    return [not value] if isinstance(value, bool) else [v for v in (1, 2, 4, 8, 12, 16) if v != value]


@pytest.mark.parametrize("attn", DESIGNS)
def test_a_designs_settings_are_the_fields_that_change_it(attn):
    # plot.py treats runs that differ only outside a design's settings as seeds of one setting:
    # a field that changes the design but is missing from its row would average two settings
    base = tiny(attn, n_layer=1)
    changing = set()
    for f in fields(GPTConfig):
        if f.name in SHARED:
            continue
        for v in other_values(getattr(base, f.name)):
            try:
                other = replace(base, **{f.name: v})
            except ValueError:
                continue  # not a valid value for this design
            if changes_the_model(base, other):
                changing.add(f.name)
                break
    assert changing == set(DESIGNS[attn].settings), f"common.DESIGNS[{attn!r}].settings must be {sorted(changing)}"


@pytest.mark.parametrize("attn", DESIGNS)
def test_flops_has_formulas_for_every_design(attn):
    # every count of the log header, by formula, equals the built model's (the FLOP counts are
    # checked against torch's counter in test_model.py)
    cfg = tiny(attn)
    model = GPT(cfg)
    assert flops.accounting(cfg)["params"] == sum(p.numel() for p in model.parameters())


def test_a_class_flops_has_no_formulas_for_is_an_error(monkeypatch):
    monkeypatch.setitem(DESIGNS, "bogus", DESIGNS["mha"]._replace(cls="BogusAttention"))
    with pytest.raises(ValueError, match=r"attn='bogus': its row's class BogusAttention is not in attention.py"):
        GPTConfig(attn="bogus")
    monkeypatch.setattr(attention, "BogusAttention", type("BogusAttention", (torch.nn.Module,), {}),
                        raising=False)
    with pytest.raises(ValueError, match=r"flops.py has no formulas for BogusAttention \(--attn=bogus\)"):
        flops.accounting(GPTConfig(attn="bogus"))


def test_the_docs_name_every_design():
    readme, designs = open("README.md").read(), open("docs/designs.md").read()
    flag = re.search(r"`--attn=([a-z|]+)`", readme).group(1).split("|")
    assert sorted(flag) == sorted(DESIGNS), "README.md's first paragraph lists --attn's choices"
    for attn, d in DESIGNS.items():
        assert re.search(rf"^\| `{attn}` \|", readme, re.M), f"README.md's table of designs has no row for {attn}"
        assert re.search(rf"^## .*`{d.cls}`", designs, re.M), f"docs/designs.md has no section on {d.cls}"


LIVE_PROSE = ["README.md", "docs/designs.md", "docs/training.md", "docs/performance.md", "reproduce.sh",
              *sorted(p for p in os.listdir(".") if p.endswith(".py")),
              *sorted(os.path.join("analysis", p) for p in os.listdir("analysis") if p.endswith(".py"))]
NUMBERS = "one two three four five six seven eight nine ten eleven twelve".split()
# prose that counts every design says "the N designs" or "all N designs" (the N a word or digits,
# "attention" or "KV-cache" between allowed); "four QK-normed designs" counts a subset and is left alone
COUNT = re.compile(rf"\b(?:the|all)[\s#]+({'|'.join(NUMBERS)}|\d+)(?:[\s#]+(?:attention|KV-cache))?[\s#]+designs\b",
                   re.I)


def stale_counts(designs, texts=None):
    """'file: "the five designs"' for each phrase of the live prose that counts every design with
    another number than the table holds. texts: {file: text} to read instead of the files."""
    texts = texts or {p: open(p).read() for p in LIVE_PROSE}
    said = lambda n: int(n) if n.isdigit() else NUMBERS.index(n.lower()) + 1
    return [f"{p}: {m.group(0)!r}" for p, t in texts.items() for m in COUNT.finditer(t)
            if said(m.group(1)) != len(designs)]


def rope_problems(designs):
    return [f"{d.cls} has no `rope` (the GPTConfig field of the width it rotates)"
            for d in designs.values() if not isinstance(getattr(getattr(attention, d.cls), "rope", None), str)]


def own_weight_problems(model):
    """What a design's own weights (held outside torch's modules) leave unsaid: how they start
    (init_residuals) and, for a matrix, that it stacks per-head matrices (per_head, for Muon)."""
    out = []
    for m in model.modules():
        own, kind = [n for n, _ in m.named_parameters(recurse=False)], type(m).__name__
        if own and not hasattr(m, "reset_parameters"):
            if not hasattr(m, "init_residuals"):
                out.append(f"{kind}.{own[0]} starts as torch.empty left it: give {kind} an init_residuals()")
            out += [f"{kind}.{n} is a matrix outside nn.Linear: name it in {kind}.per_head or make it an nn.Linear"
                    for n in own if getattr(m, n).ndim == 2 and n not in getattr(m, "per_head", ())]
    return out


def test_the_prose_counts_the_designs_there_are():
    assert stale_counts(DESIGNS) == [], "these count the designs wrong: say how many common.DESIGNS holds"
    # any number, in words or digits, not only the one the prose was written for
    texts = {"a.md": "the 6 designs", "b.py": "# all\n# seven attention designs", "c.md": "the four QK-normed designs"}
    assert stale_counts(DESIGNS, texts) == ["a.md: 'the 6 designs'", "b.py: 'all\\n# seven attention designs'"]


def test_every_class_says_its_rope_width_and_how_its_own_weights_start_and_train():
    assert rope_problems(DESIGNS) == []
    for attn in DESIGNS:
        assert own_weight_problems(GPT(tiny(attn))) == [], attn


class Toy(torch.nn.Module):
    """A throwaway sixth design: MHA plus a per-head matrix E of its own that scales the values."""
    rope, per_head = "head_dim", ("E",)

    def __init__(self, cfg, makes_kv=True):
        super().__init__()
        self.H, C = cfg.n_head, cfg.n_embd
        self.c_q, self.c_k, self.c_v, self.c_proj = (torch.nn.Linear(C, C, bias=False) for _ in range(4))
        self.E = torch.nn.Parameter(torch.empty(C, 1))

    def init_residuals(self):
        torch.nn.init.ones_(self.E)

    def forward(self, x, cos, sin, cache=None, pos=None, mask=None, kv=None):
        B, T, C = x.shape
        q, k, v = (f(x).view(B, T, self.H, -1).transpose(1, 2) for f in (self.c_q, self.c_k, self.c_v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v * self.E.view(self.H, 1, -1), is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), None


def test_a_sixth_design_with_any_step_left_out_fails_loudly(monkeypatch):
    import eval as evaluation
    row = DESIGNS["mha"]._replace(label="Toy", cls="Toy", budget=None)
    monkeypatch.setattr(attention, "Toy", Toy, raising=False)
    # the class without a row: the table test names it; the row without the class: --attn refuses
    assert attention_classes() - {d.cls for d in DESIGNS.values()} == {"Toy"}
    with pytest.raises(ValueError, match="attn='toy': unknown attention"):
        GPTConfig(attn="toy")
    monkeypatch.setitem(DESIGNS, "toy", row)
    cfg = replace(tiny("mha"), attn="toy")
    # the row without its cache-budget sweep's settings: the table itself refuses it
    with pytest.raises(TypeError, match="budget"):
        type(row)(*row[:-1])
    # no formulas in flops.py, no head weights in eval.py: each names the class
    with pytest.raises(ValueError, match="flops.py has no formulas for Toy"):
        flops.accounting(cfg)
    with pytest.raises(ValueError, match="head_qk has no query and key weights for Toy"):
        evaluation.head_qk(GPT(cfg).h[0].attn)
    # the class without its RoPE width, its init, its per_head
    assert own_weight_problems(GPT(cfg)) == [] and rope_problems(DESIGNS) == []
    for attr, said in (("init_residuals", "init_residuals"), ("per_head", "per_head")):
        monkeypatch.delattr(Toy, attr)
        assert said in " ".join(own_weight_problems(GPT(cfg))), attr
        monkeypatch.setattr(Toy, attr, getattr(TestToyParts, attr), raising=False)
    monkeypatch.delattr(Toy, "rope")
    assert rope_problems(DESIGNS) == ["Toy has no `rope` (the GPTConfig field of the width it rotates)"]
    with pytest.raises(AttributeError, match="rope"):
        GPT(cfg)
    # the prose: "the five designs" is now wrong
    assert any(s.startswith("README.md: ") for s in stale_counts(DESIGNS))


class TestToyParts:  # what the test puts back after taking it away
    per_head = ("E",)
    init_residuals = Toy.init_residuals


def test_a_sixth_design_of_a_shared_class_is_told_each_missing_step(monkeypatch):
    # "gqa2": GroupedQueryAttention again, with K/V heads of its own. Beside its row it needs an
    # entry in GPTConfig.kv_heads and a branch in __post_init__; each left out fails in one line
    # when the config is made, not inside SDPA
    monkeypatch.setitem(DESIGNS, "gqa2", DESIGNS["gqa"]._replace(label="GQA-2", budget=None))
    kw = dict(n_layer=1, n_head=4, n_embd=64, block_size=16, vocab_size=32)
    with pytest.raises(ValueError, match=r"^attn='gqa2': add its K/V heads to GPTConfig.kv_heads"):
        GPTConfig(attn="gqa2", n_kv_head=2, **kw)
    kv_heads = GPTConfig.kv_heads
    monkeypatch.setattr(GPTConfig, "kv_heads", property(lambda c: c.n_kv_head if c.attn == "gqa2" else kv_heads.fget(c)))
    with pytest.raises(ValueError, match=r"^n_kv_head=None: --attn=gqa2 leaves it unset"):
        GPTConfig(attn="gqa2", **kw)
    for attn in ("gqa2", "gqa"):  # without the branch's check, 3 K/V heads of 4 failed inside SDPA
        with pytest.raises(ValueError, match=r"^n_kv_head=3: K/V heads must divide n_head=4"):
            GPTConfig(attn=attn, n_kv_head=3, **kw)
    post_init = GPTConfig.__post_init__

    def with_its_branch(c):
        if c.attn == "gqa2" and c.n_kv_head is None:
            c.n_kv_head = 2
        post_init(c)
    monkeypatch.setattr(GPTConfig, "__post_init__", with_its_branch)
    cfg = GPTConfig(attn="gqa2", **kw)  # complete: it builds, runs and is counted
    model = GPT(cfg)
    assert cfg.kv_heads == 2 and model(torch.zeros(1, 8, dtype=torch.long))[0].shape == (1, 8, 32)
    assert flops.accounting(cfg)["params"] == sum(p.numel() for p in model.parameters())


def test_sharing_a_class_cannot_build_is_refused_in_one_line(monkeypatch):
    kw = dict(n_layer=4, n_head=4, n_embd=64, block_size=16, vocab_size=32)
    for attn in ("mla", "lrkv"):  # K=V has no meaning for MLA's latent, and is not built for LRKV
        with pytest.raises(ValueError, match=rf"^k_eq_v=True: not with --attn={attn}: [^\n]+$"):
            GPTConfig(attn=attn, k_eq_v=True, **kw)
    with pytest.raises(ValueError, match=r"^kv_share=3: must divide n_layer=4"):
        GPTConfig(attn="lrkv", kv_share=3, **kw)
    assert GPTConfig(attn="mla", kv_share=4, **kw).kv_share == 4  # one K/V group of every layer
    # a design whose class says nothing of sharing is refused, not built as if it shared
    monkeypatch.setattr(attention, "Toy", Toy, raising=False)
    monkeypatch.setitem(DESIGNS, "toy", DESIGNS["mha"]._replace(label="Toy", cls="Toy", budget=None))
    with pytest.raises(ValueError, match=r"^kv_share=2: not with --attn=toy: Toy does not say it can"):
        GPTConfig(attn="toy", kv_share=2, **kw)
    assert GPTConfig(attn="toy", **kw).kv_share == 1


def test_a_subclass_of_gqa_under_another_name_gets_the_kv_heads_check(monkeypatch):
    # the check reads what the class is, not its name: a GQA subclass with 3 K/V heads of 4 fails
    # in one line, not inside SDPA
    sub = type("WideGQA", (attention.GroupedQueryAttention,), {})
    monkeypatch.setattr(attention, "WideGQA", sub, raising=False)
    monkeypatch.setitem(DESIGNS, "gqa", DESIGNS["gqa"]._replace(cls="WideGQA"))
    with pytest.raises(ValueError, match=r"^n_kv_head=3: K/V heads must divide n_head=4"):
        GPTConfig(attn="gqa", n_kv_head=3, n_layer=1, n_head=4, n_embd=64, block_size=16, vocab_size=32)

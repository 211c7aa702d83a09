"""The design table: every place docs/designs.md's "Adding a design" names is either read from
common.DESIGNS or checked here, so a design added in part fails a test that says what is missing."""
import inspect
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
SHARED = {"attn", "n_layer", "n_head", "n_embd", "block_size", "vocab_size", "attn_scale", "rope_base", "mlp_hidden"}


def attention_classes():
    # the designs' classes: the nn.Modules in attention.py that attend (forward(x, cos, sin, cache, pos))
    return {name for name, c in vars(attention).items() if inspect.isclass(c) and issubclass(c, torch.nn.Module)
            and list(inspect.signature(c.forward).parameters)[1:] == ["x", "cos", "sin", "cache", "pos"]}


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
    with pytest.raises(ValueError, match=r"flops.py has no formulas for BogusAttention \(--attn=bogus\)"):
        flops.accounting(GPTConfig(attn="bogus"))


def test_the_docs_name_every_design():
    readme, designs = open("README.md").read(), open("docs/designs.md").read()
    flag = re.search(r"`--attn=([a-z|]+)`", readme).group(1).split("|")
    assert sorted(flag) == sorted(DESIGNS), "README.md's first paragraph lists --attn's choices"
    for attn, d in DESIGNS.items():
        assert re.search(rf"^\| `{attn}` \|", readme, re.M), f"README.md's table of designs has no row for {attn}"
        assert re.search(rf"^## .*`{d.cls}`", designs, re.M), f"docs/designs.md has no section on {d.cls}"

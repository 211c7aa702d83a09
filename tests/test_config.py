"""The config presets name real model presets and a batch their documented torchrun command can split."""
import glob
import os
import re
import runpy

import pytest

from model import PRESETS, preset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "config", "*.py"))))
def test_config_preset_is_runnable_as_documented(path):
    text = open(path).read()
    cfg = runpy.run_path(path)
    assert cfg["preset"] in PRESETS
    T = cfg.get("block_size") or preset(cfg["preset"]).block_size  # mqar.py sets its own
    m = re.search(r"--nproc_per_node=(\d+)", text)
    world = int(m.group(1)) if m else 1
    assert cfg["total_batch_tokens"] % (cfg["batch_size"] * T * world) == 0, (path, world)
    if cfg["dataset"] == "fineweb":
        assert cfg["tokenizer"] == "gpt2" and cfg["total_batch_tokens"] == 32768  # SPEC §4


@pytest.mark.parametrize("native, capability, want", [(True, (9, 0), "bf16"), (False, (7, 0), "fp16"),
                                                      (None, (8, 0), "bf16"), (None, (7, 5), "fp16")])
def test_auto_dtype_is_fp16_where_bf16_is_only_emulated(monkeypatch, native, capability, want):
    # a V100 or T4: torch's is_bf16_supported() says yes (emulation) unless told not to count it;
    # native None: a torch without that argument, so the compute capability decides
    import torch
    import common
    import muon

    def supported(including_emulation=True):
        if native is None and not including_emulation:
            raise TypeError("unexpected keyword argument 'including_emulation'")
        return True if including_emulation else native

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", supported)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert common.resolve_dtype("auto", "cuda:0") == want and common.resolve_dtype("auto", "cpu") == "fp32"
    ns = muon.newton_schulz_dtype("auto", common.native_bf16("cuda:0"))
    assert ns == (torch.bfloat16 if want == "bf16" else torch.float32)


def test_help_fields_do_not_depend_on_comment_layout(tmp_path):
    # the old reader split lines at "  # " and took any line without code for a carried comment:
    # a string holding "  # ", a one-space comment, a blank line and an unaligned carried comment
    # each gave a wrong name or meaning
    import configurator
    script = tmp_path / "s.py"
    script.write_text('# ----\n# a heading\nname = "a  # b"  # the name\nx = y = 1 # two names\n\n'
                      'long = 2  # starts here\n    # and goes on\nwide = dict(a=1,\n            b=2)  # spans lines\n'
                      '# another heading\nlast = 0\n# ----\nafter = 1  # not a field\n')
    assert configurator.fields(str(script)) == {"name": "the name", "x": "two names", "y": "two names",
                                                 "long": "starts here and goes on", "wide": "spans lines",
                                                 "last": ""}


def test_a_list_field_takes_a_list_or_one_item(tmp_path):
    # --mqar_pairs=8 or --mqar_pairs=[4,8]: a mixture of pair counts is a list
    import configurator
    script = tmp_path / "s.py"
    script.write_text("# ----\npairs = [16]  # counts\n# ----\n")
    for arg, want in (("--pairs=8", [8]), ("--pairs=[4,8]", [4, 8]), ("--pairs=(4,8)", [4, 8])):
        g = {"pairs": [16]}
        configurator.configure(str(script), g, [arg], "")
        assert g["pairs"] == want
    with pytest.raises(SystemExit):
        configurator.configure(str(script), {"pairs": [16]}, ["--pairs=[4,'x']"], "")


def test_a_config_file_is_typed_as_the_flags_are(tmp_path, capsys):
    # a config file's value of another type was taken as it came, to fail later with a traceback
    # or a message naming no field; now it is refused in one line that names the file and field,
    # and what a flag may give (an int for a float, one item for a list) is taken from a file too
    import configurator
    script = tmp_path / "s.py"
    script.write_text("# ----\npairs = [16]  # counts\nlr = 0.1  # a rate\nsteps = 10  # a count\n# ----\n")
    good = tmp_path / "good.py"
    good.write_text("pairs = 8\nlr = 1\nsteps = 2e3\n")
    g = {"pairs": [16], "lr": 0.1, "steps": 10}
    configurator.configure(str(script), g, [str(good)], "")
    assert (g["pairs"], g["lr"], g["steps"]) == ([8], 1.0, 2000) and type(g["lr"]) is float
    for text, field in (("pairs = '16'\n", "pairs=['16']"), ("steps = 2.5\n", "steps=2.5")):
        bad = tmp_path / "bad.py"
        bad.write_text(text)
        with pytest.raises(SystemExit) as e:
            configurator.configure(str(script), {"pairs": [16], "lr": 0.1, "steps": 10}, [str(bad)], "")
        err = capsys.readouterr().err
        assert e.value.code == 2 and err == f"error: config file {bad}: {field}: expected {err.split('expected ')[1]}"
        assert len(err.splitlines()) == 1

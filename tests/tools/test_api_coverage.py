"""The PyTorch API coverage measure (tools/api_coverage.py) in the suite: presence needs no
PyTorch; the sample comparisons run where PyTorch is importable. The recorded results
(tools/data/api_coverage.json, which the compatibility page renders) must be what the
tree gives now."""
from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")
sys.path.insert(0, TOOLS)
import api_coverage  # noqa: E402
import api_usage  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
RECORDED = json.load(open(api_coverage.RESULTS_FILE))


def _recorded(ns):
    return {row[0]: row for row in RECORDED["namespaces"][ns]}


def test_presence_matches_the_recorded_results():
    spaces = api_coverage.measure(samples=False)
    assert [s.name for s in spaces] == list(RECORDED["namespaces"])
    stale = [f"{s.name}.{e.name}" for s in spaces for e in s.entries
             if e.present != _recorded(s.name)[e.name][3]]
    assert not stale, f"re-run python tools/api_coverage.py --json and tools/gendocs.py: {stale[:10]}"


def test_layer_and_functional_targets():
    by = {s.name: s for s in api_coverage.measure(["torch.nn", "torch.nn.functional"], samples=False)}
    layers = [e for e in by["torch.nn"].entries if e.kind == "layer"]
    fns = by["torch.nn.functional"].entries
    assert sum(e.present for e in layers) >= 0.9 * len(layers)
    assert sum(e.present for e in fns) >= 0.9 * len(fns)
    present = {f"{s.name}.{e.name}" for s in by.values() for e in s.entries if e.present}
    for name in ("torch.nn.PixelShuffle", "torch.nn.PixelUnshuffle", "torch.nn.functional.affine_grid",
                 "torch.nn.functional.grid_sample", "torch.nn.functional.dropout2d"):
        assert name in present
    assert "torch.nn.functional.scaled_grouped_mm" not in present


def test_names_the_issue_lists_are_present():
    spaces = api_coverage.measure(["torch", "torch.Tensor", "torch.distributions", "torch.nn.utils.rnn"],
                                  samples=False)
    present = {f"{s.name}.{e.name}" for s in spaces for e in s.entries if e.present}
    for name in ("torch.roll", "torch.FloatTensor", "torch.LongTensor", "torch.Tensor.is_xpu",
                 "torch.Tensor.type", "torch.distributions.Categorical", "torch.distributions.Normal",
                 "torch.distributions.Bernoulli", "torch.distributions.Uniform",
                 "torch.nn.utils.rnn.pack_padded_sequence", "torch.nn.utils.rnn.pad_packed_sequence",
                 "torch.nn.utils.rnn.pad_sequence"):
        assert name in present, name


def test_usage_scan_resolves_imports():
    src = (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n"
        "from torch.utils.data import DataLoader\nfrom torch.distributions import Categorical\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.relu = nn.ReLU()\n    def forward(self, x):\n        return F.relu(x.view(-1))\n"
        "loader = DataLoader([])\nd = Categorical(torch.ones(3))\nd.entropy().backward()\n"
        "'a,b'.split(',')\n")
    used = api_usage.names_used(src, {"view", "backward", "split", "relu", "entropy"})
    assert {"torch.nn.Module", "torch.nn.ReLU", "torch.nn.functional.relu", "torch.Tensor.view",
            "torch.utils.data.DataLoader", "torch.distributions.Categorical", "torch.ones",
            "torch.Tensor.backward"} <= used
    assert "torch.Tensor.split" not in used          # ambiguous with str.split: left out
    assert "torch.Tensor.relu" not in used           # self.relu is a module's attribute


def test_page_section_renders_the_recorded_results():
    text = open(os.path.join(ROOT, "docs", "guide", "pytorch-compatibility.md")).read()
    assert api_coverage.render_markdown(RECORDED) in text


@pytest.mark.skipif(not HAVE_TORCH, reason="sample calls compare with PyTorch")
@pytest.mark.parametrize("ns", ["torch.nn.functional", "torch.distributions", "torch.optim.lr_scheduler"])
def test_sample_calls_give_the_recorded_outcomes(ns):
    import torch
    if torch.__version__.split("+")[0] != RECORDED["torch_version"]:
        pytest.skip(f"recorded with PyTorch {RECORDED['torch_version']}")
    (space,) = api_coverage.measure([ns], samples=True)
    got = {e.name: e.behaviour for e in space.entries}
    want = {name: row[4] for name, row in _recorded(ns).items()}
    assert got == want
    present = [b for b in got.values() if b]
    assert sum(1 for b in present if b == "matches") > 0.6 * len(present)

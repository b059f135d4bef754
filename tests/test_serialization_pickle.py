"""Saving whole modules (pickled, as PyTorch does) and loading them: refused by default
(weights_only=True, PyTorch 2.6+'s rule and message), loaded with weights_only=False or
with the class allowed; tensors and state_dicts keep tracejit's own format."""
from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.serialization_pickle import MAGIC


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(tj.relu(self.bn(self.fc1(x))))


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    tj.save(obj, buf)
    return buf.getvalue()


def test_whole_module_is_refused_by_default_with_pytorchs_message():
    data = _saved(TwoLayer())
    assert data.startswith(MAGIC)
    with pytest.raises(pickle.UnpicklingError) as e:
        tj.load(io.BytesIO(data))
    msg = str(e.value)
    assert msg.startswith("Weights only load failed")
    assert "weights_only" in msg and "TwoLayer" in msg and "add_safe_globals" in msg


def test_weights_only_false_loads_the_module():
    tj.manual_seed(0)
    m = TwoLayer()
    m.eval()
    x = tj.randn(5, 3)
    back = tj.load(io.BytesIO(_saved(m)), weights_only=False)
    assert type(back) is TwoLayer and not back.training
    np.testing.assert_array_equal(back(x).detach().numpy(), m(x).detach().numpy())
    assert isinstance(back.fc1.weight, nn.Parameter) and back.fc1.weight.requires_grad
    assert back.bn.running_var.dtype is tj.float32
    assert sorted(back.state_dict()) == sorted(m.state_dict())


def test_safe_globals_allow_a_class():
    data = _saved(TwoLayer())
    with tj.serialization.safe_globals([TwoLayer, nn.Linear, nn.BatchNorm1d]):
        m = tj.load(io.BytesIO(data))
    assert type(m) is TwoLayer
    with pytest.raises(pickle.UnpicklingError):
        tj.load(io.BytesIO(data))                     # allowed only inside the block


def test_tensors_and_state_dicts_keep_tracejits_format():
    m = TwoLayer()
    for obj in (tj.randn(2, 3), m.state_dict(), {"epoch": 3, "model": m.state_dict()}):
        data = _saved(obj)
        assert data.startswith(b"TRACEJIT") and not data.startswith(MAGIC)
    loaded = tj.load(io.BytesIO(_saved(m.state_dict())))
    fresh = TwoLayer()
    fresh.load_state_dict(loaded)
    np.testing.assert_array_equal(fresh.fc2.weight.detach().numpy(), m.fc2.weight.detach().numpy())


def test_map_location_applies_to_pickled_tensors():
    data = _saved({"net": TwoLayer(), "note": object()})
    out = tj.load(io.BytesIO(data), weights_only=False, map_location="cpu")
    assert out["net"].fc1.weight.device == tj.device("cpu")


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_crafted_pickle_runs_nothing_under_weights_only(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    path.write_bytes(MAGIC + pickle.dumps({"w": _Payload(marker)}, protocol=4))
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL io.open"):
        tj.load(path)
    assert not marker.exists()


def test_pytorchs_other_save_and_load_arguments():
    """weights_only=None is the default (True), as PyTorch's; mmap, pickle_protocol and the
    zip-format switch are accepted."""
    data = _saved(TwoLayer())
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        tj.load(io.BytesIO(data), weights_only=None)
    buf = io.BytesIO()
    tj.save({"w": tj.ones(2)}, buf, pickle_protocol=4, _use_new_zipfile_serialization=False)
    buf.seek(0)
    assert tj.load(buf, map_location="cpu", mmap=True, weights_only=None)["w"].tolist() == [1.0, 1.0]

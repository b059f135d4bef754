"""bf16 tensors: the conversions (tracejit/bf16.py), creation, printing, numpy interop,
save/load and state_dict."""
from __future__ import annotations

import io

import numpy as np
import pytest

import tracejit as tj
from tracejit import bf16

try:
    import torch
except Exception:  # pragma: no cover - optional reference
    torch = None


def test_round_to_nearest_even_and_special_values():
    tie_to_inf = np.array([0x7F7F8000], np.uint32).view(np.float32)[0]   # max bf16 + half a unit
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, tie_to_inf, 1e-40, np.inf, -0.0], np.float32)
    # 1 + 2**-8 is a tie: even (1.0); 1 + 3 * 2**-8 rounds up to 1 + 2**-6
    np.testing.assert_array_equal(bf16.to_bfloat16(x),
                                  [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80, 0x0001, 0x7F80, 0x8000])
    nan = bf16.to_bfloat16(np.array([np.nan, -np.nan], np.float32))
    assert np.isnan(bf16.to_float32(nan)).all() and (nan & 0x7FC0 == 0x7FC0).all()
    w = np.arange(0, 2 ** 16, dtype=np.uint16)
    back = bf16.to_bfloat16(bf16.to_float32(w))
    ok = ~np.isnan(bf16.to_float32(w))
    np.testing.assert_array_equal(back[ok], w[ok])       # every word survives the round trip


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_conversions_match_torch_bit_for_bit():
    r = np.random.default_rng(0)
    x = r.standard_normal(50000) * np.exp(r.uniform(-80, 80, 50000))
    for a in (x, x.astype(np.float32)):
        want = torch.from_numpy(a).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        np.testing.assert_array_equal(tj.tensor(a).to(tj.bfloat16)._data, want)


def test_creation_printing_and_conversions():
    t = tj.tensor([1.1, -2.25, 3.0], dtype=tj.bfloat16)
    assert t.dtype is tj.bfloat16 and t.dtype.is_floating_point and t.element_size() == 2
    assert t.tolist() == [1.1015625, -2.25, 3.0] and t[1].item() == -2.25
    assert "dtype=tracejit.bfloat16" in repr(t) and "1.1016" in repr(t)
    assert t.float().dtype is tj.float32 and t.float().tolist() == t.tolist()
    assert tj.full((2,), 1.5, dtype=tj.bfloat16).tolist() == [1.5, 1.5]
    assert tj.arange(0, 3, dtype=tj.bfloat16).tolist() == [0.0, 1.0, 2.0]
    assert tj.zeros(2, dtype=tj.bfloat16).tolist() == [0.0, 0.0]
    assert tj.randn(3, dtype=tj.bfloat16).dtype is tj.bfloat16
    assert tj.tensor([1.5]).bfloat16().dtype is tj.bfloat16
    assert tj.dtypes.as_dtype("bfloat16") is tj.bfloat16
    with pytest.raises(TypeError, match="uint16"):
        tj.dtypes.as_dtype(np.uint16)          # (bf16's storage is not a dtype of its own)


def test_numpy_interop_through_ml_dtypes():
    ml = bf16.ml_bfloat16()
    t = tj.tensor([1.5, -2.0], dtype=tj.bfloat16)
    if ml is None:
        with pytest.raises(TypeError, match="ml_dtypes"):
            t.numpy()
        return
    a = t.numpy()
    assert a.dtype == ml and a.astype(np.float32).tolist() == [1.5, -2.0]
    back = tj.tensor(a)
    assert back.dtype is tj.bfloat16 and back.tolist() == [1.5, -2.0]


def test_save_load_and_state_dict_round_trip():
    m = tj.nn.Linear(3, 2).to(tj.bfloat16)
    assert m.weight.dtype is tj.bfloat16
    buf = io.BytesIO()
    tj.save(m.state_dict(), buf)
    buf.seek(0)
    sd = tj.load(buf)
    assert all(v.dtype is tj.bfloat16 for v in sd.values())
    m2 = tj.nn.Linear(3, 2).to(tj.bfloat16)
    m2.load_state_dict(sd)
    np.testing.assert_array_equal(m2.weight._data, m.weight._data)
    m3 = tj.nn.Linear(3, 2)
    m3.load_state_dict(sd)                    # into float32 parameters: the values
    assert m3.weight.dtype is tj.float32 and m3.weight.tolist() == m.weight.tolist()


def test_in_place_updates_convert_values():
    t = tj.tensor([1.0, 2.0], dtype=tj.bfloat16)
    t.add_(tj.tensor([0.5, 0.25]))
    assert t.dtype is tj.bfloat16 and t.tolist() == [1.5, 2.25]
    f = tj.zeros(2)
    f.copy_(t)
    assert f.tolist() == [1.5, 2.25]

"""tracejit.save / tracejit.load: round trips, and clear errors for truncated, foreign and corrupt files."""
import io
import json
import pickle
import struct
from collections import OrderedDict

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn, optim
from tracejit.errors import SerializationError


def roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    tj.save(obj, buf)
    buf.seek(0)
    return tj.load(buf, **load_kw)


def test_tensors_keep_dtype_shape_values():
    rng = np.random.default_rng(0)
    tensors = {
        "f32": tj.tensor(rng.standard_normal((3, 4)).astype(np.float32)),
        "f64": tj.tensor(rng.standard_normal(5)),
        "f16": tj.tensor([1.5, -2.25], dtype=tj.float16),
        "i64": tj.arange(6).reshape(2, 3),
        "i32": tj.tensor([1, -2], dtype=tj.int32),
        "i8": tj.tensor([-128, 127], dtype=tj.int8),
        "u8": tj.tensor([0, 255], dtype=tj.uint8),
        "bool": tj.tensor([True, False, True]),
        "scalar": tj.tensor(3.5),
        "empty": tj.zeros(0, 3),
        "strided": tj.arange(12).reshape(3, 4).T,  # non-contiguous source
    }
    out = roundtrip(tensors)
    assert list(out) == list(tensors)
    for k, t in tensors.items():
        assert out[k].dtype is t.dtype, k
        assert out[k].shape == t.shape, k
        np.testing.assert_array_equal(out[k].numpy(), t.numpy(), err_msg=k)
        assert out[k]._data.flags.writeable and out[k]._data.flags.c_contiguous


def test_nested_plain_values():
    obj = {"a": [1, 2.5, None, True, "text", (3, "x")], 7: {"nested": [[]]}, (1, 2): "tuple key",
           "nan": float("nan"), "inf": -float("inf"), "big": 2 ** 62, "dtype": tj.float64,
           "dev": tj.device("cpu"), "od": OrderedDict(b=1, a=2), "np": np.arange(3.0)}
    out = roundtrip(obj)
    assert out["a"] == [1, 2.5, None, True, "text", (3, "x")]
    assert type(out["a"][1]) is float and type(out["a"][0]) is int and type(out["a"][5]) is tuple
    assert out[7] == {"nested": [[]]} and out[(1, 2)] == "tuple key"
    assert np.isnan(out["nan"]) and out["inf"] == -float("inf") and out["big"] == 2 ** 62
    assert out["dtype"] is tj.float64 and out["dev"] == tj.device("cpu")
    assert isinstance(out["od"], OrderedDict) and list(out["od"]) == ["b", "a"]
    assert isinstance(out["np"], np.ndarray) and out["np"].tolist() == [0.0, 1.0, 2.0]


def test_requires_grad_parameters_and_shared_tensors():
    p = nn.Parameter(tj.ones(2))
    frozen = nn.Parameter(tj.ones(1), requires_grad=False)
    leaf = tj.ones(3, requires_grad=True)
    plain = tj.zeros(2)
    out = roundtrip({"p": p, "frozen": frozen, "leaf": leaf, "plain": plain, "again": plain})
    assert isinstance(out["p"], nn.Parameter) and out["p"].requires_grad
    assert isinstance(out["frozen"], nn.Parameter) and not out["frozen"].requires_grad
    assert out["leaf"].requires_grad and not isinstance(out["leaf"], nn.Parameter)
    assert not out["plain"].requires_grad
    assert out["again"] is out["plain"]  # one tensor saved once, loaded once


def test_module_and_optimizer_state_dicts_round_trip(tmp_path):
    tj.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    opt = optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
    x = tj.randn(8, 3)
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    path = tmp_path / "ckpt.tj"
    tj.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 2}, path)
    ck = tj.load(path)
    assert ck["epoch"] == 2
    model2 = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    assert model2.load_state_dict(ck["model"]) == ([], [])
    opt2 = optim.Adam(model2.parameters(), lr=0.5)
    opt2.load_state_dict(ck["optim"])
    assert opt2.param_groups[0]["lr"] == 1e-2 and opt2.param_groups[0]["betas"] == (0.9, 0.999)
    assert opt2.state[model2[0].weight]["step"] == 2
    np.testing.assert_array_equal(model2(x).detach().numpy(), model(x).detach().numpy())
    for _ in range(2):
        for m, o in ((model, opt), (model2, opt2)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
    np.testing.assert_array_equal(model2[2].weight.detach().numpy(), model[2].weight.detach().numpy())
    # saving over an existing file replaces it whole
    tj.save([1, 2], path)
    assert tj.load(path) == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.tj"]  # no temporary files left behind


def test_map_location_and_bytes_input():
    buf = io.BytesIO()
    tj.save({"t": tj.ones(2)}, buf)
    data = buf.getvalue()
    assert tj.load(data, map_location="cpu")["t"].device == tj.device("cpu")
    assert tj.load(data, map_location={"cpu": "cpu"})["t"].tolist() == [1.0, 1.0]
    seen = []
    got = tj.load(data, map_location=lambda s, loc: seen.append(loc) or s)   # (PyTorch's fn(storage, location))
    assert got["t"].tolist() == [1.0, 1.0] and got["t"].device == tj.device("cpu") and seen == ["cpu"]


def test_unsupported_objects_name_the_path():
    # Objects outside tracejit's format are pickled (a whole module); one that cannot be
    # pickled either (a lambda) still fails with the path of the culprit.
    with pytest.raises(TypeError, match=r"function at obj\['model'\]\[1\].*nor can it be pickled"):
        tj.save({"model": [1, lambda: 0]}, io.BytesIO())
    with pytest.raises(TypeError, match="dict key.*nor can it be pickled"):
        tj.save({(lambda: 0): 1}, io.BytesIO())


def _saved_bytes():
    buf = io.BytesIO()
    tj.save({"w": tj.arange(100, dtype=tj.float32), "n": 1}, buf)
    return bytearray(buf.getvalue())


@pytest.mark.parametrize("cut", [0, 4, 8, 20, 100, -33, -1])
def test_truncated_file(cut, tmp_path):
    data = _saved_bytes()
    path = tmp_path / "cut.tj"
    path.write_bytes(bytes(data[:cut]))
    with pytest.raises(SerializationError, match="truncated|empty"):
        tj.load(path)


def test_foreign_files():
    with pytest.raises(SerializationError, match="not a tracejit file"):
        tj.load(io.BytesIO(pickle.dumps({"a": 1})))
    with pytest.raises(SerializationError, match="not one torch.save wrote"):
        tj.load(io.BytesIO(b"PK\x03\x04" + b"\0" * 100))  # a damaged zip (torch.save's: test_serialization_torch)
    with pytest.raises(SerializationError, match="not a tracejit file"):
        tj.load(io.BytesIO(b"hello world, this is text"))


def test_newer_version_and_trailing_bytes():
    data = _saved_bytes()
    struct.pack_into("<I", data, 8, 99)
    with pytest.raises(SerializationError, match="version 99"):
        tj.load(bytes(data))
    with pytest.raises(SerializationError, match="trailing"):
        tj.load(bytes(_saved_bytes() + b"junk"))


@pytest.mark.parametrize("where", ["header", "data", "digest"])
def test_corrupted_bytes_fail_the_checksum(where):
    data = _saved_bytes()
    hlen = struct.unpack_from("<Q", data, 12)[0]
    pos = {"header": 28 + hlen // 2, "data": len(data) - 32 - 10, "digest": len(data) - 1}[where]
    data[pos] ^= 0x40
    with pytest.raises(SerializationError, match="checksum"):
        tj.load(bytes(data))


def test_malicious_but_checksummed_header_is_rejected():
    """A well-formed file whose header lies (bad dtype, out-of-range offset) must not load."""
    import hashlib

    def forge(header: dict, payload: bytes = b"\0" * 64) -> bytes:
        h = json.dumps(header).encode()
        pre = struct.pack("<8sIQQ", b"TRACEJIT", 1, len(h), len(payload))
        body = pre + h
        body += b"\0" * (-len(body) % 64) + payload
        return body + hashlib.sha256(body).digest()

    rec = {"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16}
    assert tj.load(forge({"root": {"tensor": 0}, "tensors": [rec]})).tolist() == [0.0] * 4
    cases = [
        ({"root": {"tensor": 0}, "tensors": [dict(rec, dtype="object")]}, "unknown dtype"),
        ({"root": {"tensor": 0}, "tensors": [dict(rec, offset=60)]}, "past the end"),
        ({"root": {"tensor": 0}, "tensors": [dict(rec, nbytes=8)]}, "inconsistent"),
        ({"root": {"tensor": 0}, "tensors": [dict(rec, shape=[-4])]}, "malformed shape"),
        ({"root": {"tensor": 3}, "tensors": [rec]}, "out of range"),
        ({"root": {"__reduce__": "os.system"}, "tensors": []}, "unknown node"),
        ({"root": {"dict": [[{"list": []}, 1]]}, "tensors": []}, "unhashable"),
        ({"tensors": []}, "malformed header"),
    ]
    for header, msg in cases:
        with pytest.raises(SerializationError, match=msg):
            tj.load(forge(header))


def test_load_text_mode_file_is_a_clear_error(tmp_path):
    path = tmp_path / "x.tj"
    tj.save(1, path)
    with open(path, "r", encoding="latin-1") as f:
        with pytest.raises(TypeError, match="binary mode"):
            tj.load(f)


def _load_overhead(path):
    """(peak traced memory during tj.load above what the loaded object keeps, the object)."""
    import gc
    import tracemalloc
    gc.collect()
    tracemalloc.start()
    try:
        obj = tj.load(path)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - kept, obj


def test_load_of_many_small_tensors_stays_near_the_file_size(tmp_path):
    """Loading streams the file into the tensors and keeps the header compact: many small
    tensors (the worst case: a header entry per 16 bytes of data) cost at most twice the
    file beyond the loaded object (reading the file, then a dict per record, cost 5.6x)."""
    path = tmp_path / "small.tj"
    rng = np.random.default_rng(0)
    saved = {f"block{i}.weight": tj.tensor(rng.standard_normal(4).astype(np.float32)) for i in range(20000)}
    tj.save(saved, path)
    extra, out = _load_overhead(path)
    size = path.stat().st_size
    assert extra <= 2 * size, f"load peaked {extra / size:.2f}x the file size above its result"
    assert list(out) == list(saved)
    for k in ("block0.weight", "block19999.weight"):
        np.testing.assert_array_equal(out[k].numpy(), saved[k].numpy())


def test_load_of_large_tensors_does_not_hold_the_file(tmp_path):
    path = tmp_path / "large.tj"
    saved = [tj.arange(500_000, dtype=tj.float32) * float(i) for i in range(4)]
    tj.save(saved, path)
    extra, out = _load_overhead(path)
    assert extra <= 0.25 * path.stat().st_size, f"load peaked {extra} bytes above its result"
    for a, b in zip(out, saved):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

"""tracejit.serialization_views: tensors sharing memory load sharing memory again, as
torch.load's tensors over one storage do."""
import io
import struct

import pytest

import tracejit as tj
from tracejit.errors import SerializationError


def _roundtrip(obj):
    buf = io.BytesIO()
    tj.save(obj, buf)
    buf.seek(0)
    return tj.load(buf), buf.getvalue()


def test_views_of_one_tensor_share_memory_after_load():
    x = tj.arange(12.).reshape(3, 4)
    out, data = _roundtrip({"x": x, "rows": x[1:, ::2], "t": x.t(), "again": [x]})
    assert out["rows"].tolist() == [[4.0, 6.0], [8.0, 10.0]]
    assert out["t"].shape == (4, 3) and out["t"].stride() == (1, 4)
    assert out["again"][0] is out["x"]
    out["x"].add_(100)                            # a write through one shows in the others
    assert out["rows"].tolist() == [[104.0, 106.0], [108.0, 110.0]]
    assert out["t"][0].tolist() == [100.0, 104.0, 108.0]
    assert struct.unpack_from("<I", data, 8)[0] == 2


def test_only_the_span_the_views_cover_is_written():
    big = tj.zeros(100_000)
    _, data = _roundtrip([big[10:20], big[15:30]])
    assert len(data) < 4096
    out, _ = _roundtrip([big[10:20], big[15:30]])
    out[0][5:].fill_(1)
    assert out[1][:5].tolist() == [1.0] * 5


def test_unshared_tensors_keep_version_1_files_and_flags():
    p = tj.nn.Parameter(tj.ones(3))
    out, data = _roundtrip({"p": p, "y": tj.zeros(2)})
    assert struct.unpack_from("<I", data, 8)[0] == 1
    assert isinstance(out["p"], tj.nn.Parameter) and out["p"].requires_grad
    out, _ = _roundtrip([p, p[:2]])
    assert isinstance(out[0], tj.nn.Parameter) and not isinstance(out[1], tj.nn.Parameter)
    assert out[1].requires_grad                     # p[:2] is a graph view of p


def test_a_view_reaching_past_its_storage_is_refused():
    x = tj.arange(6.)
    buf = bytearray(_roundtrip([x, x[2:]])[1])
    start = buf.index(b'"view":[0,2,[4],[1]')
    buf[start:start + 19] = b'"view":[0,4,[4],[1]'
    import hashlib
    buf[-32:] = hashlib.sha256(bytes(buf[:-32])).digest()
    with pytest.raises(SerializationError, match="reaches past its storage"):
        tj.load(io.BytesIO(bytes(buf)))


def test_like_pytorch_views_share_storage():
    torch = pytest.importorskip("torch")
    for lib in (torch, tj):
        x = lib.arange(6.)
        buf = io.BytesIO()
        lib.save([x, x[2:]], buf)
        buf.seek(0)
        a, b = lib.load(buf)
        a[3] = -1.0
        assert b.tolist() == [2.0, -1.0, 4.0, 5.0]

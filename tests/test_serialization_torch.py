"""tracejit.load of files torch.save wrote: state dicts, optimizer state, views, dtypes,
plain values, and the refusals (a pickled module, a foreign zip)."""
import io
import zipfile

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import SerializationError

torch = pytest.importorskip("torch", reason="reads torch.save's files")


def _saved(obj) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_a_pytorch_checkpoint_loads_into_the_same_model():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 4 * 4, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.randn(2, 3, 6, 6)).sum().backward()
    opt.step()
    ck = tj.load(_saved({"model": net.state_dict(), "opt": opt.state_dict(), "epoch": 3}))
    mine = tj.nn.Sequential(tj.nn.Conv2d(3, 4, 3), tj.nn.BatchNorm2d(4), tj.nn.Flatten(), tj.nn.Linear(64, 2))
    assert repr(mine.load_state_dict(ck["model"])) == "<All keys matched successfully>"
    assert ck["epoch"] == 3 and ck["model"]["1.num_batches_tracked"].dtype == tj.int64
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
    net.eval()
    mine.eval()
    np.testing.assert_allclose(mine(tj.tensor(x)).detach().numpy(), net(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    myopt = tj.optim.Adam(mine.parameters(), lr=1e-3)
    myopt.load_state_dict(ck["opt"])
    np.testing.assert_array_equal(myopt.state[mine[0].weight]["exp_avg"].numpy(),
                                  opt.state[net[0].weight]["exp_avg"].numpy())


def test_views_dtypes_parameters_and_plain_values():
    base = torch.arange(12.0)
    obj = {"t": base.reshape(3, 4).t()[1:], "tail": base[5:9], "p": torch.nn.Parameter(torch.ones(2)),
           "half": torch.tensor([1.5], dtype=torch.float16), "bf": torch.tensor([2.5], dtype=torch.bfloat16),
           "b": torch.tensor([True, False]), "i8": torch.tensor([-3], dtype=torch.int8),
           "meta": [1, "x", None, 2.5, (torch.float64, torch.device("cpu"), torch.Size([2, 3]))]}
    got = tj.load(_saved(obj), map_location="cpu")
    for k in ("t", "tail", "half", "b", "i8"):
        assert got[k].tolist() == obj[k].tolist() and str(got[k].dtype)[9:] == str(obj[k].dtype)[6:], k
    assert got["bf"].float().tolist() == [2.5] and got["bf"].dtype == tj.bfloat16
    assert isinstance(got["p"], tj.nn.Parameter) and got["p"].requires_grad
    assert got["meta"][:4] == [1, "x", None, 2.5]
    assert got["meta"][4] == (tj.float64, tj.device("cpu"), (2, 3))
    assert type(got["meta"][4][2]) is tj.Size   # (torch.Size loads as tracejit's Size, not a tuple)


def test_a_pickled_module_and_a_foreign_zip_are_refused():
    with pytest.raises(SerializationError, match="Weights only load failed"):
        tj.load(_saved(torch.nn.Linear(2, 2)))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("notes.txt", "hello")
    buf.seek(0)
    with pytest.raises(SerializationError, match="not one torch.save wrote"):
        tj.load(buf)


@pytest.mark.parametrize("where", [lambda s, loc: s, lambda s, loc: None, lambda s, loc: s.cpu(),
                                   lambda s, loc: s.to(device="cpu")])
def test_a_callable_map_location_as_torch(where):
    got = []
    for m in (torch, tj):
        buf = io.BytesIO()
        m.save({"a": m.arange(3.0), "p": m.nn.Parameter(m.ones(2)), "n": [m.tensor([True])]}, buf)
        for data in (buf.getvalue(), _saved({"a": torch.arange(3.0)}).getvalue()):
            calls = []
            out = m.load(io.BytesIO(data), map_location=lambda s, loc: calls.append(loc) or where(s, loc))
            got.append((sorted((k, str(v.device) if hasattr(v, "device") else "", type(v).__name__)
                               for k, v in out.items()), calls, out["a"].tolist()))
    assert got[2:] == got[:2]

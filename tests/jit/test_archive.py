"""jit.save / jit.load: a traced or scripted module written and read back gives PyTorch's
outputs, keeps its compile mode and extra files; what is not such an archive (a torch.save
file, a TorchScript archive from PyTorch) is refused with a clear error."""
import io

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


class Net(tj.nn.Module):   # (module level: jit.load unpickles it by reference)
    def __init__(self):
        super().__init__()
        self.fc = tj.nn.Linear(3, 4)
        self.bn = tj.nn.BatchNorm1d(4)

    def forward(self, x):
        return tj.relu(self.bn(self.fc(x))).sum(1)


@pytest.mark.parametrize("how", ["trace", "script"])
def test_saved_module_loads_and_matches_pytorch(how, tmp_path):
    ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).eval()
    net = Net().eval()
    net.load_state_dict({k.replace("0.", "fc.").replace("1.", "bn."): tj.tensor(v.numpy())
                         for k, v in ref.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    made = tj.jit.trace(net, tj.tensor(x)) if how == "trace" else tj.jit.script(net)
    path = tmp_path / "model.pt"
    tj.jit.save(made, str(path), _extra_files={"config.txt": "width=4"})
    extra = {"config.txt": ""}
    back = tj.jit.load(str(path), _extra_files=extra)
    assert extra["config.txt"] == "width=4"
    assert back.forward._mode == how and not back.training
    want = torch.relu(ref(torch.tensor(x))).sum(1).detach().numpy()
    np.testing.assert_allclose(back(tj.tensor(x)).detach().numpy(), want, rtol=1e-5, atol=1e-6)


def test_what_is_not_a_jit_archive_is_refused(tmp_path):
    with pytest.raises(TypeError, match="jit.trace or jit.script"):
        tj.jit.save(Net(), io.BytesIO())
    buf = io.BytesIO()
    tj.save(Net().state_dict(), buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="no jit.save archive"):
        tj.jit.load(buf)
    path = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.trace(torch.nn.Linear(2, 2), torch.ones(1, 2)), str(path))
    with pytest.raises(RuntimeError, match="TorchScript archives from PyTorch cannot be read"):
        tj.jit.load(str(path))

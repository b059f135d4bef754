"""tracejit.hub: local checkpoints and hubconf folders load; a download names the URL."""
import os
from urllib.error import URLError

import numpy as np
import pytest

import tracejit as tj


def test_load_state_dict_from_local_path_and_file_url(tmp_path):
    sd = tj.nn.Linear(3, 2).state_dict()
    path = str(tmp_path / "w.pth")
    tj.save(sd, path)
    for url in (path, "file://" + path):
        got = tj.hub.load_state_dict_from_url(url)
        np.testing.assert_array_equal(got["weight"].numpy(), sd["weight"].numpy())


def test_load_state_dict_from_url_reads_the_cache(tmp_path):
    sd = {"w": tj.arange(4.)}
    os.makedirs(tmp_path / "checkpoints")
    tj.save(sd, str(tmp_path / "checkpoints" / "resnet-1234.pth"))
    tj.hub.set_dir(str(tmp_path))
    try:
        assert tj.hub.get_dir() == str(tmp_path)
        got = tj.hub.load_state_dict_from_url("https://example.com/models/resnet-1234.pth")
        assert got["w"].tolist() == [0., 1., 2., 3.]
        with pytest.raises(URLError, match="https://example.com/other.pth") as e:
            tj.hub.load_state_dict_from_url("https://example.com/other.pth")
        assert str(tmp_path / "checkpoints" / "other.pth") in str(e.value)
    finally:
        tj.hub._hub_dir = None


def test_load_state_dict_from_url_pytorch_file(tmp_path):
    torch = pytest.importorskip("torch")
    m = torch.nn.Linear(3, 2)
    torch.save(m.state_dict(), str(tmp_path / "t.pth"))
    got = tj.hub.load_state_dict_from_url(str(tmp_path / "t.pth"))
    np.testing.assert_array_equal(got["bias"].numpy(), m.bias.detach().numpy())


def test_hub_load_local_hubconf(tmp_path):
    (tmp_path / "hubconf.py").write_text(
        "import tracejit as tj\n"
        "def tiny(n=2):\n    'A tiny model.'\n    return tj.nn.Linear(n, 1)\n"
        "def _hidden():\n    pass\n")
    m = tj.hub.load(str(tmp_path), "tiny", 5, source="local")
    assert tuple(m.weight.shape) == (1, 5)
    assert tj.hub.list(str(tmp_path), source="local") == ["tiny"]
    assert tj.hub.help(str(tmp_path), "tiny", source="local") == "A tiny model."
    with pytest.raises(RuntimeError, match="cannot find callable big"):
        tj.hub.load(str(tmp_path), "big", source="local")


def test_hub_load_github_names_the_repo():
    with pytest.raises(URLError, match="pytorch/vision"):
        tj.hub.load("pytorch/vision", "resnet18")
    with pytest.raises(ValueError, match="unknown source"):
        tj.hub.load("pytorch/vision", "resnet18", source="svn")

"""nn.utils: clip_grad_norm_, clip_grad_value_, parameters_to_vector."""
import math

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.nn.utils import (clip_grad_norm_, clip_grad_value_, parameters_to_vector,
                               vector_to_parameters)


def _params():
    a = nn.Parameter(tj.zeros(2))
    b = nn.Parameter(tj.zeros(2, 2))
    a.grad = tj.tensor([3.0, 0.0])
    b.grad = tj.tensor([[0.0, 4.0], [0.0, 0.0]])
    return a, b


def test_clip_grad_norm_scales_jointly():
    a, b = _params()
    total = clip_grad_norm_([a, b], max_norm=1.0)
    assert total.item() == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad.numpy(), [3 / 5, 0.0], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [[0.0, 4 / 5], [0.0, 0.0]], rtol=1e-5)
    a, b = _params()
    clip_grad_norm_([a, b], max_norm=10.0)  # below the limit: unchanged
    assert a.grad.tolist() == [3.0, 0.0]
    a, b = _params()
    assert clip_grad_norm_([a, b], 1.0, norm_type=math.inf).item() == 4.0
    a.grad = tj.tensor([math.inf, 0.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_([a, b], 1.0, error_if_nonfinite=True)


def test_clip_grad_value_and_vectors():
    a, b = _params()
    clip_grad_value_([a, b], 1.0)
    assert a.grad.tolist() == [1.0, 0.0] and b.grad.numpy().max() == 1.0
    v = parameters_to_vector([a, b])
    assert v.shape == (6,)
    vector_to_parameters(tj.arange(6, dtype=tj.float32), [a, b])
    assert a.tolist() == [0.0, 1.0] and b.tolist() == [[2.0, 3.0], [4.0, 5.0]]
    with pytest.raises(ValueError, match="6 elements"):
        vector_to_parameters(tj.ones(5), [a, b])


def test_consume_prefix_in_state_dict_if_present_as_torch():
    import collections
    pytest.importorskip("torch")
    from tracejit.nn.modules.utils import consume_prefix_in_state_dict_if_present as ours
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present as theirs
    dicts = []
    for fn in (ours, theirs):
        sd = collections.OrderedDict([("module.a.weight", 1), ("b", 2), ("module.c", 3)])
        sd._metadata = {"": {}, "module": {"v": 1}, "module.a": {"v": 2}}
        fn(sd, "module.")
        dicts.append((list(sd.items()), sd._metadata))
    assert dicts[0] == dicts[1] == ([("b", 2), ("a.weight", 1), ("c", 3)], {"": {"v": 1}, "a": {"v": 2}})
    with pytest.raises(TypeError, match="prefix must be a str"):
        ours({}, None)


def test_the_submodule_paths_of_nn_utils_import_as_pytorchs():
    """``from torch.nn.utils.clip_grad import clip_grad_norm_`` and the like."""
    import importlib
    torch = pytest.importorskip("torch")
    for sub in ("clip_grad", "convert_parameters", "init", "memory_format"):
        want = importlib.import_module(f"torch.nn.utils.{sub}")
        got = importlib.import_module(f"tracejit.nn.utils.{sub}")
        names = [n for n in vars(want) if callable(getattr(want, n)) and not n.startswith("_")
                 and getattr(getattr(want, n), "__module__", "").startswith("torch.nn.utils")]
        assert names and all(getattr(got, n) is getattr(tj.nn.utils, n) for n in names), (sub, names)


def test_bad_arguments_raise_pytorchs_exception_types():
    torch = pytest.importorskip("torch")
    for L in (torch, tj):
        with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
            L.nn.utils.vector_to_parameters([1.0], [L.nn.Parameter(L.ones(1))])
        with pytest.raises(RuntimeError):
            L.nn.utils.vector_to_parameters(L.ones(1), [L.nn.Parameter(L.ones(2))])
        with pytest.raises(RuntimeError):
            L.nn.utils.rnn.pad_sequence([L.ones(2)], padding_side="middle")

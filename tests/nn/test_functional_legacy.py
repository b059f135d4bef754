"""F losses' and loss modules' deprecated size_average/reduce (as older programs pass
them), and the input= keyword of F.dropout and F.layer_norm, against PyTorch."""
import warnings

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).random((3, 4)).astype(np.float32)
Y = np.random.default_rng(1).random((3, 4)).astype(np.float32)
T = np.array([0, 1, 3])
CASES = [("mse_loss", (X, Y)), ("l1_loss", (X, Y)), ("binary_cross_entropy", (X, Y)),
         ("binary_cross_entropy_with_logits", (X, Y)), ("cross_entropy", (X, T)), ("nll_loss", (np.log(X), T))]


@pytest.mark.parametrize("name,args", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("kw", [{"size_average": False}, {"reduce": False}, {"size_average": True, "reduce": True}])
def test_functional_losses_take_size_average(name, args, kw):
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        got = getattr(tj.nn.functional, name)(*[tj.tensor(a) for a in args], **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = getattr(torch.nn.functional, name)(*[torch.tensor(a) for a in args], **kw)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


@pytest.mark.parametrize("cls", ["MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"])
def test_loss_modules_take_size_average(cls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kw, want in (({"size_average": False}, "sum"), ({"reduce": False}, "none"), ({}, "mean")):
            assert getattr(tj.nn, cls)(**kw).reduction == getattr(torch.nn, cls)(**kw).reduction == want


def test_dropout_and_layer_norm_take_input_by_name():
    x = tj.tensor(X)
    assert tj.nn.functional.dropout(input=x, p=0.5, training=False) is x
    got = tj.nn.functional.layer_norm(input=x, normalized_shape=(4,))
    want = torch.nn.functional.layer_norm(input=torch.tensor(X), normalized_shape=(4,))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)

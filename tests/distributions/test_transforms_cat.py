"""distributions/transforms_cat.py against PyTorch: CatTransform and StackTransform's
values, inverses and log-determinants along batch and event dims, their domains, the
registries' answers for cat/stack constraints, stack constraints' event_dim, and every
transform's with_cache."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).uniform(0.1, 0.9, (4, 5)).astype(np.float32)

CASES = [
    lambda T, C: T.CatTransform([T.ExpTransform(), T.SigmoidTransform(), T.AffineTransform(1.0, 2.0)], 0, [1, 2, 1]),
    lambda T, C: T.CatTransform([T.ExpTransform(), T.SigmoidTransform()], dim=1, lengths=[2, 3]),
    lambda T, C: T.CatTransform([T.IndependentTransform(T.ExpTransform(), 1), T.SigmoidTransform()], 0, [2, 2]),
    lambda T, C: T.CatTransform([T.IndependentTransform(T.ExpTransform(), 1),
                                 T.IndependentTransform(T.SigmoidTransform(), 1)], dim=-1, lengths=[2, 3]),
    lambda T, C: T.StackTransform([T.ExpTransform(), T.SigmoidTransform(), T.AffineTransform(1.0, 2.0),
                                   T.TanhTransform()], dim=0),
    lambda T, C: T.StackTransform([T.ExpTransform(), T.SigmoidTransform(), T.AffineTransform(1.0, 2.0),
                                   T.TanhTransform(), T.PowerTransform(2.0)], dim=-1),
    lambda T, C: T.biject_to(C.cat([C.positive, C.unit_interval], 1, [2, 3])),
    lambda T, C: T.transform_to(C.stack([C.positive, C.unit_interval, C.real, C.greater_than(1.0)], 0)),
]


def _run(m, k):
    d = m.distributions
    t = CASES[k](d.transforms if hasattr(d.transforms, "biject_to") else _Both(d), d.constraints)
    x = m.tensor(X)
    y = t(x)
    try:
        ok = bool(t.codomain.check(y).all())
    except (RuntimeError, ValueError):   # (PyTorch's cat check cannot join pieces of unequal event dims)
        ok = None
    return (y.numpy(), t.inv(y).numpy(), t.log_abs_det_jacobian(x, y).numpy(), t.event_dim, t.bijective,
            t.domain.event_dim, t.codomain.event_dim, ok, t.inv(y) is not x)


class _Both:
    """The transforms module with the registries beside it (PyTorch keeps those apart)."""

    def __init__(self, d):
        self._d = d

    def __getattr__(self, name):
        return getattr(self._d, name) if name in ("biject_to", "transform_to") else getattr(self._d.transforms, name)


@pytest.mark.parametrize("k", range(len(CASES)))
def test_cat_and_stack_transforms_match_torch(k):
    want, got = _run(torch, k), _run(tj, k)
    for i in range(3):
        assert got[i].shape == want[i].shape
        np.testing.assert_allclose(got[i], want[i], rtol=1e-5, atol=1e-6)
    assert got[3:] == want[3:]


def test_cat_transform_cache_returns_the_very_input():
    T = tj.distributions.transforms
    t = T.CatTransform([T.ExpTransform(), T.SigmoidTransform()], 0, [2, 1], cache_size=1)
    x = tj.tensor([0.5, -1.0, 2.0])
    assert t.inv(t(x)) is x
    assert t.with_cache(1) is t and t.with_cache(0)._cache_size == 0


def test_cat_transform_names_a_wrong_length():
    T = tj.distributions.transforms
    t = T.CatTransform([T.ExpTransform(), T.SigmoidTransform()], 0, [2, 1])
    with pytest.raises(ValueError, match=r"x.size\(0\) = 4 must equal 3"):
        t(tj.zeros(4))
    with pytest.raises(TypeError, match=r"tseq\[1\]"):
        T.StackTransform([T.ExpTransform(), "exp"])


def test_stack_constraint_event_dim_counts_an_event_dim_it_stacks_along():
    for dim, base in ((-2, "real_vector"), (-1, "real"), (0, "real"), (-1, "real_vector")):
        got = [m.distributions.constraints.stack([getattr(m.distributions.constraints, base)] * 3, dim).event_dim
               for m in (torch, tj)]
        assert got[0] == got[1], (dim, base)


@pytest.mark.parametrize("make", [lambda T: T.ExpTransform(), lambda T: T.AffineTransform(1.0, 2.0),
                                  lambda T: T.ComposeTransform([T.ExpTransform(), T.AffineTransform(0.0, 3.0)]),
                                  lambda T: T.SigmoidTransform().inv, lambda T: T.IndependentTransform(T.ExpTransform(), 1),
                                  lambda T: T.CatTransform([T.ExpTransform(), T.SigmoidTransform()], 0, [1, 1])])
def test_with_cache_as_torch(make):
    """Every transform has with_cache (it was only CatTransform's and StackTransform's), and
    ``.inv`` is one object per transform."""
    got = []
    for m in (torch, tj):
        t = make(m.distributions.transforms)
        c = t.with_cache(1)
        x = m.tensor([0.5, 0.25])
        y = c(x)
        got.append((c is t, c.inv(y) is x, c.with_cache(1) is c, t.with_cache(0) is t, c.inv.inv is c, c._cache_size,
                    y.tolist()))
    assert got[1][:6] == got[0][:6]
    np.testing.assert_allclose(got[1][6], got[0][6], rtol=1e-6)

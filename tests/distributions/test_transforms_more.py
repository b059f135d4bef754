"""distributions/transforms_more.py and the constraints beside them, against PyTorch:
biject_to/transform_to for each constraint (values, log-determinants, inverses), the
softmax/softplus/abs/reshape/independent/lower-Cholesky/CDF transforms, and the
constraints' checks."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)

CONSTRAINTS = [lambda c: c.real, lambda c: c.positive, lambda c: c.nonnegative, lambda c: c.greater_than(2.0),
               lambda c: c.greater_than_eq(-1.0), lambda c: c.less_than(3.0), lambda c: c.interval(-2.0, 5.0),
               lambda c: c.unit_interval, lambda c: c.simplex, lambda c: c.real_vector,
               lambda c: c.independent(c.positive, 1), lambda c: c.corr_cholesky]
_WIDTH = {11: 3}   # (corr_cholesky: D (D - 1) / 2 = 3 reals for D = 3)


@pytest.mark.parametrize("registry", ["biject_to", "transform_to"])
@pytest.mark.parametrize("k", range(len(CONSTRAINTS)))
def test_constraint_registries_match_torch(registry, k):
    got = []
    for m in (torch, tj):
        t = getattr(m.distributions, registry)(CONSTRAINTS[k](m.distributions.constraints))
        x = m.tensor(X[:, :_WIDTH.get(k, X.shape[1])])
        y = t(x)
        got.append((y.numpy(), t.log_abs_det_jacobian(x, y).numpy() if t.bijective else 0, t.inv(y).numpy()))
        assert CONSTRAINTS[k](m.distributions.constraints).check(y).all()
    for a, b in zip(*got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


TRANSFORMS = [lambda d: d.transforms.SoftplusTransform(), lambda d: d.transforms.AbsTransform(),
              lambda d: d.transforms.SoftmaxTransform(), lambda d: d.transforms.ReshapeTransform((4,), (2, 2)),
              lambda d: d.transforms.IndependentTransform(d.transforms.SoftplusTransform(), 1),
              lambda d: d.transforms.CumulativeDistributionTransform(d.Normal(0.5, 2.0))]


@pytest.mark.parametrize("k", range(len(TRANSFORMS)))
def test_transforms_match_torch(k):
    got = []
    for m in (torch, tj):
        t = TRANSFORMS[k](m.distributions)
        x = m.tensor(X)
        y = t(x)
        ladj = t.log_abs_det_jacobian(x, y).numpy() if t.bijective else 0
        got.append((y.numpy(), ladj, t.inv(y).numpy(), t.forward_shape((3, 4))))
    for a, b in zip(*got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_positive_definite_transform_and_tril_helpers():
    a = np.random.default_rng(2).standard_normal((2, 3, 3)).astype(np.float32)
    got = []
    for m in (torch, tj):
        t = m.distributions.transform_to(m.distributions.constraints.positive_definite)
        y = t(m.tensor(a))
        assert m.distributions.constraints.positive_definite.check(y).all()
        u = m.distributions.utils
        v = u.tril_matrix_to_vec(m.tensor(a), diag=-1)
        got.append((y.numpy(), t.inv(y).numpy(), v.numpy(), u.vec_to_tril_matrix(v, diag=-1).numpy()))
    for p, q in zip(*got):
        np.testing.assert_allclose(q, p, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="cannot be expressed as the lower triangular part"):
        tj.distributions.utils.vec_to_tril_matrix(tj.ones(4))


def test_lower_cholesky_transform_and_errors():
    a = np.random.default_rng(1).standard_normal((2, 3, 3)).astype(np.float32)
    want = torch.distributions.transforms.LowerCholeskyTransform()(torch.tensor(a)).numpy()
    t = tj.distributions.transform_to(tj.distributions.constraints.lower_cholesky)
    y = t(tj.tensor(a))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    assert tj.distributions.constraints.lower_cholesky.check(y).all()
    with pytest.raises(NotImplementedError, match="Cannot transform _LowerCholesky constraints"):
        tj.distributions.biject_to(tj.distributions.constraints.lower_cholesky)
    with pytest.raises(ValueError, match="different numbers of elements"):
        tj.distributions.transforms.ReshapeTransform((4,), (3,))


M = {"eye": np.eye(2, dtype=np.float32), "spd": np.array([[2.0, -1.0], [-1.0, 2.0]], np.float32),
     "upper": np.array([[1.0, 2.0], [0.0, 1.0]], np.float32), "neg": -np.eye(2, dtype=np.float32),
     "lower": np.array([[3.0, 0.0], [1.0, 1.0]], np.float32), "row": np.array([[1.0, 0.0, 0.0]], np.float32)}
CHECKS = [lambda c: c.greater_than_eq(0.0), lambda c: c.less_than(1.5), lambda c: c.positive_integer,
          lambda c: c.one_hot, lambda c: c.square, lambda c: c.symmetric, lambda c: c.positive_semidefinite,
          lambda c: c.lower_triangular, lambda c: c.multinomial(2), lambda c: c.cat([c.positive, c.real], 1, [1, 1]),
          lambda c: c.stack([c.positive, c.real], 1)]


@pytest.mark.parametrize("k", range(len(CHECKS)))
def test_constraint_checks_match_torch(k):
    for v in M.values():
        if k == len(CHECKS) - 1 and v.shape[1] != 2:
            continue   # (stack: one constraint per slice)
        want = CHECKS[k](torch.distributions.constraints).check(torch.tensor(v)).numpy()
        got = CHECKS[k](tj.distributions.constraints).check(tj.tensor(v)).numpy()
        np.testing.assert_array_equal(got, want)
    c = tj.distributions.constraints
    assert c.is_dependent(c.dependent) and c.dependent(event_dim=1).event_dim == 1
    with pytest.raises(ValueError, match="Cannot determine validity of dependent constraint"):
        c.dependent.check(tj.ones(1))

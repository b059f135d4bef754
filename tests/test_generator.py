"""tracejit.generator: Generator objects, the default generator and RNG states, against
PyTorch's documented behaviour (torch.manual_seed, torch.Generator, torch.get_rng_state)."""
import numpy as np
import pytest

import tracejit as tj


def test_manual_seed_makes_draws_reproducible_whatever_numpy_does():
    tj.manual_seed(0)
    a = tj.rand(3).tolist() + tj.randn(2).tolist() + tj.randint(0, 9, (3,)).tolist()
    tj.manual_seed(0)
    np.random.seed(7)
    np.random.rand(10)                      # numpy's global stream is not tracejit's
    assert tj.rand(3).tolist() + tj.randn(2).tolist() + tj.randint(0, 9, (3,)).tolist() == a


def test_seeding_a_generator_leaves_the_global_stream_alone():
    tj.manual_seed(0)
    whole = tj.rand(4).tolist()
    tj.manual_seed(0)
    first = tj.rand(2).tolist()
    g = tj.Generator().manual_seed(3)        # PyTorch: seeds g only
    assert first + tj.rand(2).tolist() == whole
    assert g.initial_seed() == 3
    assert tj.rand(2, generator=tj.Generator().manual_seed(3)).tolist() == tj.rand(2, generator=g).tolist()


def test_manual_seed_returns_the_default_generator_and_wraps_negative_seeds():
    gen = tj.manual_seed(-1)
    assert gen is tj.default_generator and tj.random.default_generator is gen
    assert tj.initial_seed() == gen.initial_seed() == 2 ** 64 - 1     # PyTorch's value for -1
    assert tj.manual_seed(2.0).initial_seed() == 2
    with pytest.raises(RuntimeError, match="out of range"):
        tj.manual_seed(2 ** 64)
    with pytest.raises(TypeError, match="manual_seed"):
        tj.manual_seed("0")


def test_rng_state_is_a_uint8_tensor_that_restores_the_stream():
    tj.manual_seed(1)
    state = tj.get_rng_state()
    assert isinstance(state, tj.Tensor) and state.dtype == tj.uint8 and tuple(state.shape) == (5056,)
    a = tj.rand(3).tolist()
    tj.set_rng_state(state)
    assert tj.rand(3).tolist() == a
    g = tj.Generator().manual_seed(5)
    s = g.get_state()
    b = tj.randn(2, generator=g).tolist()
    assert tj.randn(2, generator=g.set_state(s)).tolist() == b
    with pytest.raises(TypeError, match="uint8 tensor"):
        tj.set_rng_state(tj.zeros(3))


def test_the_default_generator_as_generator_argument_draws_the_global_stream():
    tj.manual_seed(4)
    a = tj.rand(3).tolist()
    tj.manual_seed(4)
    assert tj.rand(3, generator=tj.default_generator).tolist() == a
    f = tj.compile(lambda x: x + tj.rand(3, generator=tj.default_generator), fullgraph=True)
    tj.manual_seed(4)
    assert f(tj.zeros(3)).tolist() == a


def test_same_as_pytorch_seeding_semantics():
    torch = pytest.importorskip("torch")
    for lib in (torch, tj):
        lib.manual_seed(0)
        x = lib.rand(4)
        lib.manual_seed(0)
        y = lib.rand(2)
        lib.Generator().manual_seed(9)
        assert lib.equal(lib.cat([y, lib.rand(2)]), x)
    assert torch.manual_seed(-5).initial_seed() == tj.manual_seed(-5).initial_seed()

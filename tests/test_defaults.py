"""tracejit.defaults and tracejit.multiprocessing: the settings programs make at their top
and PyTorch's process helpers."""
import operator

import numpy as np
import pytest

import tracejit as tj


def test_default_device_is_the_cpu():
    tj.set_default_device("cpu")
    assert tj.get_default_device() == tj.device("cpu")
    with pytest.raises(NotImplementedError, match="only the CPU"):
        tj.set_default_device("cuda")
    tj.set_default_device(None)
    assert tj.get_default_device() == tj.device("cpu")


def test_a_device_is_a_context_manager_for_the_default():
    # ``with torch.device("cpu"): model = Net()``: the default inside the block only
    from tracejit import defaults
    with tj.device("cpu") as d:
        assert d == tj.device("cpu") and defaults._DEVICE[0] == tj.device("cpu")
        assert tj.ones(2).device == tj.device("cpu")
    assert defaults._DEVICE[0] is None
    with pytest.raises(NotImplementedError, match="only the CPU"):
        with tj.device("cuda"):
            pass
    assert defaults._DEVICE[0] is None


def test_sdpa_kernel_records_the_choice_and_changes_no_result():
    torch = pytest.importorskip("torch")
    from tracejit.nn.attention import SDPBackend, sdpa_kernel
    q = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
    want = torch.nn.functional.scaled_dot_product_attention(*[torch.tensor(q)] * 3, is_causal=True)
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION]):
        assert tj.backends.cuda.math_sdp_enabled() and not tj.backends.cuda.flash_sdp_enabled()
        got = tj.nn.functional.scaled_dot_product_attention(*[tj.tensor(q)] * 3, is_causal=True)
    assert tj.backends.cuda.flash_sdp_enabled()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert int(SDPBackend.FLASH_ATTENTION) == int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)
    with pytest.raises(TypeError, match="SDPBackend"):
        with sdpa_kernel(["flash"]):
            pass


_R = np.random.default_rng(0)
PRINTED = {
    "mixed": np.array([1.23456789, 2.0, 1e-5], np.float32),
    "fractions": np.array([1.5, 2.25, 3.0]),
    "whole": np.arange(12., dtype=np.float32).reshape(3, 4),
    "wide": _R.standard_normal((4, 30)).astype(np.float32),
    "long": _R.standard_normal(2000).astype(np.float32),
    "large": np.array([1e9, 1.0], np.float32),
    "spread": np.array([123.456, 0.001], np.float32),
    "ints": np.arange(5),
    "complex": (_R.standard_normal((3, 2)) + 1j * _R.standard_normal((3, 2))).astype(np.complex64),
    "3-d": _R.standard_normal((5, 6, 7)).astype(np.float32),
    "nonfinite": np.array([np.nan, np.inf, 1.5], np.float32),
}


@pytest.fixture
def default_printoptions():
    yield
    tj.set_printoptions(profile="default")


@pytest.mark.parametrize("options", [{}, dict(precision=2), dict(precision=8), dict(sci_mode=True),
                                     dict(sci_mode=False), dict(profile="short"), dict(profile="full"),
                                     dict(threshold=5, edgeitems=1), dict(linewidth=200, precision=3),
                                     dict(profile="short", precision=6)])
def test_tensors_print_as_pytorchs_under_printoptions(options, default_printoptions):
    torch = pytest.importorskip("torch", reason="compares with PyTorch")
    tj.set_printoptions(**options)
    torch.set_printoptions(**options)
    try:
        for name, a in PRINTED.items():
            if name == "long" and ("precision" in options or "sci_mode" in options):
                continue   # (test_a_summarized_row_wraps_as_pytorchs)
            want = repr(torch.tensor(a)).replace("torch.", "tracejit.")
            assert repr(tj.tensor(a)) == want, name
    finally:
        torch.set_printoptions(profile="default")


@pytest.mark.xfail(strict=True, reason="numpy's printer wraps a summarized row by its characters, "
                   "where PyTorch counts the elision as one element of the row's width")
@pytest.mark.parametrize("options", [dict(precision=8), dict(sci_mode=True)])
def test_a_summarized_row_wraps_as_pytorchs(options, default_printoptions):
    torch = pytest.importorskip("torch", reason="compares with PyTorch")
    tj.set_printoptions(**options)
    torch.set_printoptions(**options)
    try:
        assert repr(tj.tensor(PRINTED["long"])) == repr(torch.tensor(PRINTED["long"]))
    finally:
        torch.set_printoptions(profile="default")


def test_printoptions_leave_numpys_own_and_refuse_bad_values(default_printoptions):
    before = np.get_printoptions()
    tj.set_printoptions(precision=2, linewidth=120)
    assert np.get_printoptions() == before
    assert repr(tj.tensor([1.23456])) == "tensor([1.23])"
    with pytest.raises(ValueError, match="profile"):
        tj.set_printoptions(profile="long")
    with pytest.raises(ValueError, match="precision"):
        tj.set_printoptions(precision=-1)
    assert repr(tj.tensor([1.23456])) == "tensor([1.23])"   # (the refused calls changed nothing)
    tj.set_printoptions(profile="default")
    assert repr(tj.tensor([1.23456])) == "tensor([1.2346])"


def test_printoptions_and_switches():
    try:
        tj.set_float32_matmul_precision("high")
        assert tj.get_float32_matmul_precision() == "high"
        with pytest.raises(ValueError):
            tj.set_float32_matmul_precision("fast")
        tj.use_deterministic_algorithms(True)
        assert tj.are_deterministic_algorithms_enabled()
    finally:
        tj.set_float32_matmul_precision("highest")
        tj.use_deterministic_algorithms(False)


def test_multiprocessing_spawn_runs_and_reports_failures():
    assert tj.multiprocessing.spawn(operator.add, args=(1,), nprocs=2) is None
    with pytest.raises(tj.multiprocessing.ProcessRaisedException, match="exit code"):
        tj.multiprocessing.spawn(operator.truediv, args=(0,), nprocs=1)
    assert tj.multiprocessing.Queue is not None


@pytest.mark.parametrize("fill", [
    lambda g: tj.empty(4).uniform_(generator=g), lambda g: tj.empty(4).normal_(generator=g),
    lambda g: tj.empty(4).exponential_(generator=g), lambda g: tj.empty(4).random_(0, 10, generator=g),
    lambda g: tj.empty(4).cauchy_(generator=g), lambda g: tj.empty(4).log_normal_(generator=g),
    lambda g: tj.empty(4).geometric_(0.3, generator=g),
    lambda g: tj.nn.init.orthogonal_(tj.empty(3, 3), generator=g),
    lambda g: tj.nn.init.sparse_(tj.empty(4, 3), 0.5, generator=g)])
def test_in_place_fills_draw_from_the_generator_given(fill):
    first = fill(tj.Generator().manual_seed(3))
    tj.manual_seed(0)
    tj.rand(5)                                   # the global stream moves; the generator's does not
    assert fill(tj.Generator().manual_seed(3)).tolist() == first.tolist()


def test_deterministic_debug_mode_as_torch():
    torch = pytest.importorskip("torch")
    try:
        for m in (tj, torch):
            seen = []
            for mode in ("warn", 2, "default", 1, 0):
                m.set_deterministic_debug_mode(mode)
                seen.append((m.get_deterministic_debug_mode(), m.are_deterministic_algorithms_enabled(),
                             m.is_deterministic_algorithms_warn_only_enabled()))
            assert seen == [(1, True, True), (2, True, False), (0, False, False), (1, True, True), (0, False, False)]
            with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
                m.set_deterministic_debug_mode("loud")
    finally:
        torch.set_deterministic_debug_mode(0)
        tj.set_deterministic_debug_mode(0)

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


def test_printoptions_and_switches():
    try:
        tj.set_printoptions(precision=2)
        assert np.get_printoptions()["precision"] == 2
        tj.set_float32_matmul_precision("high")
        assert tj.get_float32_matmul_precision() == "high"
        with pytest.raises(ValueError):
            tj.set_float32_matmul_precision("fast")
        tj.use_deterministic_algorithms(True)
        assert tj.are_deterministic_algorithms_enabled()
    finally:
        tj.set_printoptions(precision=8)
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

"""tracejit.storage: untyped_storage() tells views of one tensor apart from copies, as PyTorch's does."""
import io
import warnings

import pytest

import tracejit as tj


@pytest.mark.parametrize("lib_name", ["torch", "tracejit"])
def test_views_share_a_storage_and_copies_do_not(lib_name):
    lib = pytest.importorskip("torch") if lib_name == "torch" else tj
    x = lib.arange(12.0).reshape(3, 4)
    s = x.untyped_storage()
    assert s.nbytes() == 48 and len(s) == 48 and s.element_size() == 1
    for view in (x[1:], x.t(), x.view(-1)[3:7], x.detach()):
        assert view.untyped_storage().data_ptr() == s.data_ptr()
    assert x.clone().untyped_storage().data_ptr() != s.data_ptr()
    assert x[1:].untyped_storage().nbytes() == 48


def test_tensors_loaded_sharing_memory_report_one_storage():
    x = tj.arange(6.0)
    buf = io.BytesIO()
    tj.save([x[1:], x[:3]], buf)
    buf.seek(0)
    a, b = tj.load(buf)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert a.untyped_storage().nbytes() == 24


@pytest.mark.parametrize("lib_name", ["torch", "tracejit"])
def test_typed_storage_counts_elements(lib_name):
    lib = pytest.importorskip("torch") if lib_name == "torch" else tj
    x = lib.arange(12, dtype=lib.int16).reshape(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (PyTorch's TypedStorage deprecation)
        s = x.storage()
        assert s.size() == len(s) == 12 and s.element_size() == 2
        assert x[1:].storage().data_ptr() == s.data_ptr() == x.untyped_storage().data_ptr()
        assert lib.is_storage(s) and not lib.is_storage(x)

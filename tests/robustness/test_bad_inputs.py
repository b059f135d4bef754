"""The bad-input matrix: one row per class of bad input to a compiled function.

Every row asserts the exact error type, that the message names the culprit (the op,
argument, construct, shape, dtype, device or file), and that nothing changed: the
compiled function's cache (entries, captures, dynamic dims), the parameters' values and
their accumulated gradients. Rows whose input is unusual but valid (nan/inf, empty
tensors, huge ranks) assert that the compiled result equals eager instead.
"""
from __future__ import annotations

import os
import pickle
import re
import struct
import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import (DeviceMismatchError, DTypeError, GraphFreedError,
                             InplaceModifiedError, ScriptError, SerializationError, ShapeError, TraceError)
from differential import assert_compiled_matches, assert_same


class Model:
    """Parameters with accumulated gradients, and a compiled step using them."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.w = tj.tensor(rng.standard_normal((4, 3)).astype(np.float32)).requires_grad_()
        self.b = tj.tensor(rng.standard_normal(3).astype(np.float32)).requires_grad_()
        self.step = tj.trace(self.forward)
        x = tj.tensor(rng.standard_normal((5, 4)).astype(np.float32))
        self.step(x, self.w, self.b).sum().backward()   # one capture, gradients accumulated

    @staticmethod
    def forward(x, w, b):
        return tj.tanh(x @ w + b) * 2.0

    def snapshot(self):
        st = self.step.cache_stats()
        return ({k: st[k] for k in ("entries", "compiles", "dynamic_dims", "eager_fallbacks")},
                self.w.detach().numpy().copy(), self.b.detach().numpy().copy(),
                self.w.grad.numpy().copy(), self.b.grad.numpy().copy())


def assert_unchanged(before, after, new_entry_ok=False):
    if new_entry_ok:  # a valid call with a new signature (no_grad, other shape) may capture once
        grown = {k: after[0][k] - before[0][k] for k in ("entries", "compiles")}
        assert grown["entries"] == grown["compiles"] <= 1, f"cache: {before[0]} -> {after[0]}"
    else:
        assert before[0] == after[0], f"cache changed: {before[0]} -> {after[0]}"
    for a, b, what in zip(before[1:], after[1:], ("w", "b", "w.grad", "b.grad")):
        np.testing.assert_array_equal(a, b, err_msg=f"{what} changed")


@pytest.fixture
def model():
    return Model()


def X(*shape, dtype=np.float32):
    return tj.tensor(np.random.default_rng(1).standard_normal(shape).astype(dtype))


# --------------------------------------------------------------------------- the matrix
def row_wrong_shape(m):
    with pytest.raises(ShapeError, match=r"matmul.*\(5, 7\).*\(4, 3\)|matmul.*7.*4"):
        m.step(X(5, 7), m.w, m.b)


def row_wrong_shape_broadcast(m):
    with pytest.raises(ShapeError, match=r"add.*\(5, 3\).*\(4,\)"):
        m.step(X(5, 4), m.w, X(4))


def row_wrong_dtype(m):
    with pytest.raises(DTypeError, match=r"matmul.*float32.*int64|matmul.*int64.*float32"):
        m.step(tj.tensor(np.ones((5, 4), np.int64)), m.w, m.b)


def row_wrong_device(m):
    fake = tj.Tensor._wrap(np.ones((5, 4), np.float32), tj.float32, tj.device("cuda:0"))
    with pytest.raises(DeviceMismatchError, match=r"matmul.*test_bad_inputs.py:\d+.*cpu.*cuda:0|cuda:0.*cpu"):
        m.step(fake, m.w, m.b)


def row_unknown_device(m):
    with pytest.raises(ValueError, match="'gpu'"):
        m.step(tj.ones(5, 4, device="gpu"), m.w, m.b)


def row_too_few_arguments(m):
    with pytest.raises(TypeError, match=r"forward\(\) missing 1 required positional argument: 'b'"):
        m.step(X(5, 4), m.w)


def row_too_many_arguments(m):
    with pytest.raises(TypeError, match=r"forward\(\) takes 3 positional arguments but 4 were given"):
        m.step(X(5, 4), m.w, m.b, m.b)


def row_unknown_keyword(m):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'bias'"):
        m.step(X(5, 4), m.w, bias=m.b)


def row_numpy_array_argument(m):
    with pytest.raises(TypeError, match="ndarray"):
        m.step(np.ones((5, 4), np.float32), m.w, m.b)


def row_script_unsupported_python(m):
    def f(x):
        try:
            return x * 2.0
        except ValueError:
            return x
    with pytest.raises(ScriptError, match=r"try/except at .*test_bad_inputs.py:\d+"):
        tj.script(f)(X(3))
    m.step(X(5, 4), m.w, m.b)   # the model's step is unaffected (a hit, no new capture)


def row_script_unsupported_argument(m):
    with pytest.raises(ScriptError, match=r"argument 'x' has type object"):
        tj.script(Model.forward)(object(), m.w, m.b)


def row_trace_data_dependent_python(m):
    def f(x):
        return x * x.sum().item()
    with pytest.raises(TraceError, match=r"item\(\).*test_bad_inputs.py:\d+"):
        tj.trace(f)(X(3))


def row_backward_non_scalar(m):
    out = m.step(X(5, 4), m.w, m.b)
    with pytest.raises(RuntimeError, match=r"scalar outputs.*\(5, 3\)"):
        out.backward()


def row_backward_twice(m):
    out = m.step(X(5, 4), m.w, m.b)
    out.sum().backward(retain_graph=False)
    m.w.grad = tj.tensor(m.w_grad0)  # undo the one legitimate backward
    m.b.grad = tj.tensor(m.b_grad0)
    with pytest.raises(GraphFreedError, match="Compiled.*Backward|freed"):
        out.sum().backward()


def row_backward_without_grad(m):
    with tj.no_grad():
        out = m.step(X(5, 4), m.w, m.b)
    with pytest.raises(RuntimeError, match="does not require grad"):
        out.sum().backward()


def row_modified_saved_tensor(m):
    x = X(5, 4) * 1.0         # saved for w's gradient (as PyTorch's mm saves it), modified below
    w = m.w * 1.0             # (w itself is saved by nothing: writing it would be fine)
    out = m.step(x, w, m.b)
    with tj.no_grad():
        x.mul_(2.0)
    with pytest.raises(InplaceModifiedError, match=r"input 0 of compiled forward.*version"):
        out.sum().backward()


def row_nan_inf_inputs(m):
    x = X(5, 4)
    x._data[0, 0], x._data[1, 1], x._data[2, 2] = np.nan, np.inf, -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning either from our kernels ...
        # ... but numpy's matmul reports the CPU's floating-point flags after the BLAS call,
        # and whether a nan operand raises "invalid" there depends on the BLAS kernel the
        # CPU gets (it does with OpenBLAS's AVX-512 sgemm, not its AVX2 one): eager warns
        # alike, so this is numpy's behaviour, not the compiled program's.
        warnings.filterwarnings("ignore", "invalid value encountered in matmul", RuntimeWarning)
        with tj.no_grad():
            got = m.step(x, m.w, m.b)
            expect = Model.forward(x, m.w, m.b)
    assert_same(got, expect, "nan/inf row")
    assert np.isnan(got.numpy()).any()


def row_empty_batch(m):
    with tj.no_grad():
        assert_same(m.step(X(0, 4), m.w, m.b), Model.forward(X(0, 4), m.w, m.b), "empty batch")


def row_empty_max_reduction(m):
    f = tj.trace(lambda x: (x * 2.0).amax(1))
    with pytest.raises(RuntimeError, match=r"amax.*zero-size dim 1.*\(3, 0\)"):
        f(X(3, 0))
    assert f.cache_stats()["entries"] == 0


def row_huge_rank(m):
    shape = (1,) * 36 + (2, 3, 1, 2)                # 40 dims
    x = X(*shape)
    perm = list(range(40))
    perm[37], perm[39] = perm[39], perm[37]
    y = X(3, 1, 2)
    assert_compiled_matches(lambda x, y: tj.tanh(x * y) + 1.0, x, y)
    assert_compiled_matches(lambda x: (x * 2.0).sum((0, 37, 39)), x.requires_grad_(),
                            prep=lambda x: (x.permute(*perm),))


def row_rank_beyond_numpy(m):
    with pytest.raises(ValueError, match="64"):
        tj.ones(*(1,) * 65)


# ---- PyTorch habits that must not pass silently
def row_int32_overflow_in_tensor(m):
    with pytest.raises(OverflowError, match=r"1099511627776.*int32"):
        tj.tensor([2 ** 40], dtype=tj.int32)


def row_uint8_overflow_in_tensor(m):
    with pytest.raises(OverflowError, match=r"300.*uint8"):
        tj.tensor([1, 300], dtype=tj.uint8)


def row_integer_floor_divide_by_zero(m):
    with pytest.raises(ZeroDivisionError, match="floor_divide"):
        tj.tensor([5, 7]) // 0
    with pytest.raises(ZeroDivisionError, match="remainder"):
        tj.tensor([5, 7]) % tj.tensor([1, 0])


def row_grad_of_wrong_shape(m):
    with pytest.raises(RuntimeError, match=r"assigned grad has float32\[3, 4\].*float32\[4, 3\]"):
        m.w.grad = tj.zeros(3, 4)


def row_grad_of_wrong_dtype(m):
    with pytest.raises(RuntimeError, match=r"assigned grad has float64\[3\].*float32\[3\]"):
        m.b.grad = tj.zeros(3, dtype=tj.float64)


def row_grad_not_a_tensor(m):
    with pytest.raises(TypeError, match="Tensor or None"):
        m.b.grad = np.zeros(3, np.float32)


def row_view_of_non_contiguous(m):
    with pytest.raises(ShapeError, match=r"view.*reshape"):
        m.w.detach().t().view(12)


def row_repeated_reduction_dim(m):
    with pytest.raises(ShapeError, match="dim 0 appears multiple times"):
        X(2, 3).sum((0, 0))
    with pytest.raises(ShapeError, match="dim 0 appears multiple times"):
        X(2, 3).sum((0, -2))


def row_inplace_on_expanded_view_inside_compiled(m):
    def bump_rows(a):
        a[:1].expand(2, 3).add_(1.0)
        return a * 2.0
    a = X(2, 3)
    before = a.numpy().copy()
    with pytest.raises(TraceError, match="cannot reach the tensor it views"):
        tj.trace(bump_rows)(a)
    np.testing.assert_array_equal(a.numpy(), before)


# ---- layers and functionals: refused by name, alike on every path
def _refused(fn, *args, exc, match):
    """fn(*args) raises `exc` matching `match` eagerly, in the interpreter (tier 0) and
    compiled; returns the three messages."""
    messages = []
    for run in (fn, tj.trace(fn, compiler="interpret"), tj.trace(fn)):
        with pytest.raises(exc, match=match) as info:
            run(*args)
        messages.append(str(info.value))
    return messages


def row_index_out_of_range(m):
    w, logits, emb = X(5, 3), X(4, 3), tj.nn.Embedding(5, 3)
    F = tj.nn.functional
    for fn, index, message in [
            (lambda i: F.embedding(i, w), [0, -1], "embedding: index -1 is out of range for size 5"),
            (lambda i: emb(i), [[5, 0]], "embedding: index 5 is out of range for size 5"),
            (lambda i: tj.index_select(w, 0, i), [-1], "index_select: index -1 is out of range for size 5"),
            (lambda i: F.one_hot(i, 4), [0, 4], "one_hot: index 4 is out of range for size 4"),
            (lambda i: F.one_hot(i, 4), [-2, 1], "one_hot: index -2 is out of range for size 4"),
            (lambda i: F.nll_loss(logits, i), [0, -1, 1, 2], "nll_loss: index -1 is out of range for size 3"),
            (lambda i: F.cross_entropy(logits, i), [0, 3, 1, 2], "nll_loss: index 3 is out of range for size 3"),
            (lambda i: F.cross_entropy(logits, i, weight=tj.ones(3)), [0, -1, 1, 2],
             "nll_loss: index -1 is out of range for size 3")]:
        _refused(fn, tj.tensor(index), exc=IndexError, match=re.escape(message))


def row_batch_norm_integer_input(m):
    for train in (True, False):
        bn = tj.nn.BatchNorm2d(3).train(train)
        state = {k: v.numpy().copy() for k, v in bn.state_dict().items()}
        _refused(lambda x: bn(x), tj.ones(2, 3, 4, 4, dtype=tj.int64), exc=DTypeError,
                 match="BatchNorm2d: expected a floating point input, got int64")
        for k, v in bn.state_dict().items():
            np.testing.assert_array_equal(v.numpy(), state[k], err_msg=f"{k} changed")


def row_batch_norm_mixed_float_dtypes(m):
    bn = tj.nn.BatchNorm1d(3)
    state = {k: v.numpy().copy() for k, v in bn.state_dict().items()}
    _refused(lambda x: bn(x), X(4, 3, dtype=np.float64), exc=DTypeError,
             match="BatchNorm1d: input is float64 but weight is float32")
    for k, v in bn.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k], err_msg=f"{k} changed")
    rm, rv = tj.zeros(3), tj.ones(3)
    _refused(lambda x: tj.nn.functional.batch_norm(x, rm, rv, training=True), X(4, 3, dtype=np.float64),
             exc=DTypeError, match="batch_norm: input is float64 but running_mean is float32")
    assert rm.numpy().tolist() == [0.0] * 3 and rv.numpy().tolist() == [1.0] * 3


def row_loss_class_weight_of_wrong_length(m):
    t = tj.tensor([0, 1, 2, 0])
    _refused(lambda x, w: tj.nn.functional.cross_entropy(x, t, weight=w), X(4, 3), tj.ones(4), exc=ShapeError,
             match=r"cross_entropy: weight should hold one value per class \(3 classes\), got shape \(4,\)")
    _refused(lambda x, w: tj.nn.functional.nll_loss(x, t, weight=w), X(4, 3), tj.ones(2), exc=ShapeError,
             match=r"nll_loss: weight should hold one value per class \(3 classes\), got shape \(2,\)")


def row_label_smoothing_out_of_range(m):
    t = tj.tensor([0, 1, 2, 0])
    for eps in (1.5, -0.1):
        _refused(lambda x: tj.nn.functional.cross_entropy(x, t, label_smoothing=eps), X(4, 3), exc=ValueError,
                 match=rf"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {eps}")


def row_zero_stride(m):
    x = X(1, 3, 8, 9)
    for layer, message in [(tj.nn.Conv2d(3, 3, 3, stride=0), r"conv2d: stride must be positive, got \(0, 0\)"),
                           (tj.nn.Conv1d(3, 3, 3, stride=0), "conv1d: stride must be positive, got 0"),
                           (tj.nn.ConvTranspose2d(3, 3, 3, stride=(1, 0)), "conv_transpose2d: stride must be positive"),
                           (tj.nn.AvgPool2d(2, stride=0), "avg_pool2d: stride must be positive, got 0"),
                           (tj.nn.MaxPool2d(2, stride=(0, 1)), r"max_pool2d: stride must be positive, got \(0, 1\)"),
                           (tj.nn.AvgPool2d(2, stride=0, ceil_mode=True), "avg_pool2d: stride must be positive")]:
        _refused(lambda x: layer(x), x[:, :, 0] if isinstance(layer, tj.nn.Conv1d) else x, exc=ValueError,
                 match=message)


def row_negative_padding(m):
    conv = tj.nn.Conv2d(3, 3, 3, padding=-1)
    _refused(lambda x: conv(x), X(1, 3, 6, 6), exc=ValueError,
             match=r"conv2d: padding must be non-negative, got \(-1, -1\)")
    _refused(lambda x: tj.nn.functional.max_pool2d(x, 3, padding=-1), X(1, 3, 6, 6), exc=ValueError,
             match="max_pool2d: padding must be non-negative, got -1")


def row_interpolate_to_zero_size(m):
    _refused(lambda x: tj.nn.functional.interpolate(x, size=(0, 3)), X(1, 3, 8, 9), exc=ValueError,
             match=r"interpolate: input and output sizes should be greater than 0.*\(1, 3, 8, 9\).*\(0, 3\)")


def row_conv1d_error_speaks_of_conv1d(m):
    conv = tj.nn.Conv1d(4, 3, 3)
    for msg in _refused(lambda x: conv(x), X(2, 3, 10), exc=ShapeError,
                        match=r"conv1d: input of shape \(2, 3, 10\) has 3 channels but weight \(3, 4, 3\)"):
        assert "conv2d" not in msg and ", 1," not in msg, msg


def row_attention_mask_of_wrong_shape(m):
    q = X(2, 4, 5, 8)
    _refused(lambda q, mask: tj.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask), q, X(3, 5),
             exc=ShapeError, match=r"scaled_dot_product_attention: attn_mask of shape \(3, 5\) does not "
                                   r"broadcast with the attention scores of shape \(2, 4, 5, 5\)")


def row_linear_input_of_other_dtype(m):
    lin = tj.nn.Linear(3, 2)
    _refused(lambda x: lin(x), X(4, 3, dtype=np.float64), exc=DTypeError,
             match=r"linear: input is float64 but weight is float32")


def row_adaptive_pool_to_zero_size(m):
    import torch
    x = X(1, 3, 8, 9)
    for size in (0, (0, 2), (3, 0)):
        for mod in ("AdaptiveAvgPool2d", "AdaptiveMaxPool2d"):
            layer = getattr(tj.nn, mod)(size)
            assert_compiled_matches(lambda x: layer(x), x)
            want = getattr(torch.nn, mod)(size)(torch.tensor(x.numpy())).shape
            assert tuple(layer(x).shape) == tuple(want), (mod, size)


ROWS = [v for k, v in dict(globals()).items() if k.startswith("row_")]
# Rows whose call is valid under a new signature (grad mode, shape): one new capture is fine.
VALID_NEW_SIGNATURE = {row_backward_without_grad, row_nan_inf_inputs, row_empty_batch}


@pytest.mark.parametrize("row", ROWS, ids=[r.__name__[4:] for r in ROWS])
def test_bad_input_matrix(model, row):
    model.w_grad0 = model.w.grad.numpy().copy()
    model.b_grad0 = model.b.grad.numpy().copy()
    before = model.snapshot()
    row(model)
    assert_unchanged(before, model.snapshot(), new_entry_ok=row in VALID_NEW_SIGNATURE)


def test_the_matrix_detects_a_state_change(model):
    """The state check itself can fail: a row that trains one step is caught."""
    before = model.snapshot()
    model.step(X(5, 4), model.w, model.b).sum().backward()
    with pytest.raises(AssertionError, match="w.grad changed"):
        assert_unchanged(before, model.snapshot())


def test_rank_near_the_nesting_limit_with_real_sizes():
    # 2**14 elements: the parallel twin of the deep-rank loop runs too.
    x = X(*(2,) * 14)
    assert_compiled_matches(lambda x: (tj.exp(x * 0.5) - x).sum((1, 5, 13), keepdim=True), x.requires_grad_(),
                            prep=lambda x: (x.transpose(0, 13),))


# --------------------------------------------------------------------------- load
def _file_bytes(tmp_path):
    p = tmp_path / "ok.tj"
    tj.save({"w": X(3, 2), "step": 3}, p)
    return p.read_bytes()


def _repack(header, data: bytes = b"") -> bytes:
    """A well-formed file (valid lengths and checksum) around an arbitrary JSON header
    (a dict, or the header's raw bytes)."""
    import hashlib
    import json
    hdr = header if isinstance(header, bytes) else json.dumps(header).encode()
    pre = struct.Struct("<8sIQQ")
    body = pre.pack(b"TRACEJIT", 1, len(hdr), len(data)) + hdr
    body += b"\0" * (-len(body) % 64) + data
    return body + hashlib.sha256(body).digest()


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


BAD_FILES = {
    "empty": (lambda ok, mk: b"", "empty"),
    "truncated": (lambda ok, mk: ok[: len(ok) // 2], "truncated"),
    "garbage": (lambda ok, mk: os.urandom(200), "not a tracejit file"),
    "flipped-byte": (lambda ok, mk: ok[:100] + bytes([ok[100] ^ 1]) + ok[101:], "checksum"),
    "trailing-bytes": (lambda ok, mk: ok + b"xx", "trailing"),
    "pickle": (lambda ok, mk: pickle.dumps(_Payload(mk)), "not a tracejit file"),
    "pickle-after-magic": (lambda ok, mk: b"TRACEJIT" + pickle.dumps(_Payload(mk)), "truncated|version|checksum"),
    "unknown-node": (lambda ok, mk: _repack({"root": {"pickle": "gASV"}, "tensors": []}), "unknown node"),
    "reduce-node": (lambda ok, mk: _repack({"root": {"__reduce__": ["os.system", ["true"]]}, "tensors": []}),
                    "unknown node"),
    "bad-dtype": (lambda ok, mk: _repack({"root": {"tensor": 0}, "tensors": [
        {"dtype": "object", "shape": [1], "offset": 0, "nbytes": 8}]}, b"\0" * 64), "dtype"),
    "out-of-range": (lambda ok, mk: _repack({"root": {"tensor": 0}, "tensors": [
        {"dtype": "float32", "shape": [1000], "offset": 0, "nbytes": 4000}]}, b"\0" * 64), "past the end"),
    # allocations bounded by the file; nothing but SerializationError
    "records-sharing-bytes": (lambda ok, mk: _repack({"root": {"list": [{"tensor": i} for i in range(400)]},
                                                      "tensors": [{"dtype": "float32", "shape": [1024],
                                                                   "offset": 0, "nbytes": 4096}] * 400},
                                                     b"\0" * 4096), "overlap"),
    "deep-json-nesting": (lambda ok, mk: _repack(b'{"root": ' + b"[" * 200_000 + b"]" * 200_000
                                                 + b', "tensors": []}'), "nested too deeply"),
    "deep-node-nesting": (lambda ok, mk: _repack(b'{"root": ' + b'{"list": [' * 5000 + b"]}" * 5000
                                                 + b', "tensors": []}'), "nested too deeply"),
    "absurd-shape": (lambda ok, mk: _repack({"root": {"tensor": 0}, "tensors": [
        {"dtype": "float32", "shape": [0, 10 ** 30], "offset": 0, "nbytes": 0}]}), "impossible shape"),
    "too-many-dims": (lambda ok, mk: _repack({"root": {"tensor": 0}, "tensors": [
        {"dtype": "float32", "shape": [1] * 100, "offset": 0, "nbytes": 4}]}, b"\0" * 64), "100 dims"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES), ids=list(BAD_FILES))
def test_bad_load_files(tmp_path, kind, model):
    make, message = BAD_FILES[kind]
    marker = tmp_path / "pwned"
    path = tmp_path / f"{kind}.tj"
    path.write_bytes(make(_file_bytes(tmp_path), str(marker)))
    before = model.snapshot()
    with pytest.raises(SerializationError) as info:
        tj.load(path)
    msg = str(info.value)
    assert str(path) in msg or path.name in msg, msg
    assert re.search(message, msg), msg
    assert not marker.exists(), "load ran code from the file"
    assert_unchanged(before, model.snapshot())


def test_load_round_trip_still_works(tmp_path):
    p = tmp_path / "ok.tj"
    obj = {"w": X(3, 2), "n": 3}
    tj.save(obj, p)
    back = tj.load(p)
    assert back["n"] == 3
    assert_same(back["w"], obj["w"], "round trip")

"""A catalogue of the mistakes training code makes most, each run eagerly and compiled
beside PyTorch: our exception is PyTorch's class (or a subclass of it), the message names
the culprit, the traceback holds the user's line (compiled too: a check failing inside a
compiled program is raised from the line its op was traced from), and nothing changed:
the modules' state is as before and the compiled function's next correct call runs without
compiling again.
"""
from __future__ import annotations

import io
import traceback
import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import TraceError

torch = pytest.importorskip("torch")


def R(L, *shape):
    return L.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


def P(L, *values):
    return L.tensor(np.array(values, np.float32))


# name -> (build(L) -> (fn, bad args, good args or None, modules), message, raised at run time)
CASES: dict = {}


def case(message, runtime=False):
    def add(build):
        CASES[build.__name__] = (build, message, runtime)
        return build
    return add


@case(r"linear: input of shape \(2, 5\) does not match weight of shape \(4, 8\) \(expected input features 8\)")
def linear_in_features(L):
    m = L.nn.Linear(8, 4)
    return (lambda x: m(x)), (R(L, 2, 5),), (R(L, 2, 8),), (m,)


@case(r"matmul: shapes \(2, 3\) and \(4, 5\) cannot be multiplied")
def matmul_shapes(L):
    return (lambda a, b: a @ b), (R(L, 2, 3), R(L, 4, 5)), (R(L, 2, 3), R(L, 3, 5)), ()


@case(r"conv2d: input of shape \(1, 5, 8, 8\) has 5 channels but weight \(4, 3, 3, 3\) .*expects 3")
def conv_channels(L):
    m = L.nn.Conv2d(3, 4, 3)
    return (lambda x: m(x)), (R(L, 1, 5, 8, 8),), (R(L, 1, 3, 8, 8),), (m,)


@case(r"cross_entropy: target of shape \(4,\) holds class indices but has dtype float32")
def cross_entropy_float_target(L):
    return (lambda x, t: L.nn.functional.cross_entropy(x, t)), (R(L, 4, 3), R(L, 4)), None, ()


@case(r"nll_loss: index 5 is out of range for size 3", runtime=True)
def cross_entropy_class_out_of_range(L):
    f = (lambda x, t: L.nn.functional.cross_entropy(x, t))
    return f, (R(L, 4, 3), L.tensor([0, 1, 5, 1])), (R(L, 4, 3), L.tensor([0, 1, 2, 1])), ()


@case(r"nll_loss: expected input \(N, C, \.\.\.\) and target \(N, \.\.\.\), got \(4, 3\) and \(2,\)")
def nll_batch_mismatch(L):
    return (lambda x, t: L.nn.functional.nll_loss(x, t)), (R(L, 4, 3), L.tensor([0, 1])), None, ()


@case(r"embedding: index 10 is out of range for size 10", runtime=True)
def embedding_out_of_range(L):
    m = L.nn.Embedding(10, 3)
    return (lambda i: m(i)), (L.tensor([1, 10]),), (L.tensor([1, 9]),), (m,)


@case(r"embedding: indices must be an integer tensor, got float32")
def embedding_float_indices(L):
    m = L.nn.Embedding(10, 3)
    return (lambda i: m(i)), (P(L, 1, 2),), None, (m,)


@case(r"binary_cross_entropy: all elements of input should be between 0 and 1", runtime=True)
def bce_probability_out_of_range(L):
    f = (lambda p, t: L.nn.functional.binary_cross_entropy(p, t))
    return f, (P(L, 0.5, 1.5), P(L, 0.0, 1.0)), (P(L, 0.5, 0.5), P(L, 0.0, 1.0)), ()


@case(r"view: shape \(12,\) is not compatible .*use \.reshape\(\.\.\.\)")
def view_of_transposed(L):
    return (lambda x: x.t().view(-1)), (R(L, 3, 4),), None, ()


@case(r"backward through the graph a second time .*retain_graph=True")
def backward_twice(L):
    def f(x):
        y = (x * x).sum()
        y.backward()
        y.backward()
        return y
    return f, (R(L, 3).requires_grad_(),), None, ()


@case(r"grad can be implicitly created only for scalar outputs; output 0 has shape \(3,\)")
def backward_of_non_scalar(L):
    def f(x):
        y = x * 2
        y.backward()
        return y
    return f, (R(L, 3).requires_grad_(),), None, ()


@case(r"add_: a leaf tensor that requires grad is being used in an in-place operation")
def inplace_on_leaf(L):
    def f(x):
        x.add_(1)
        return x
    return f, (R(L, 3).requires_grad_(),), None, ()


@case(r"modified by an in-place operation: output of ExpBackward0 was saved at version 0 and is now at version 1")
def saved_tensor_modified(L):
    def f(x):
        y = x.exp()
        z = y.exp()
        y.mul_(2)
        z.sum().backward()
        return z
    return f, (R(L, 3).requires_grad_(),), None, ()


@case(r"index_add: self \(float32\) and source \(int64\) must have the same dtype")
def index_add_dtypes(L):
    f = (lambda x, i, s: x.index_add(0, i, s))
    return f, (R(L, 4, 3), L.tensor([0, 1]), L.tensor([[1, 2, 3], [4, 5, 6]])), None, ()


@case(r"index_copy: self \(float32\) and source \(int64\) must have the same dtype")
def index_copy_dtypes(L):
    f = (lambda x, i, s: x.index_copy(0, i, s))
    return f, (R(L, 4, 3), L.tensor([0, 1]), L.tensor([[1, 2, 3], [4, 5, 6]])), None, ()


@case(r"scatter: self \(float32\) and src \(int64\) must have the same dtype")
def scatter_dtypes(L):
    f = (lambda x, i, s: x.scatter(0, i, s))
    return f, (R(L, 4, 3), L.tensor([[0, 1, 2]]), L.tensor([[1, 2, 3]])), None, ()


@case(r"matmul: expected both operands to have the same dtype, got float32 and int64")
def matmul_dtypes(L):
    return (lambda a, b: a @ b), (R(L, 2, 3), L.tensor([[1, 2], [3, 4], [5, 6]])), None, ()


@case(r"gather: index must be an integer tensor, got float32")
def gather_float_index(L):
    return (lambda a, i: a.gather(1, i)), (R(L, 2, 3), P(L, 0, 1).reshape(2, 1)), None, ()


@case(r"cat: sizes must match except in dim 0, .*tensor 1 has size 4 at dim 1, tensor 0 has 3")
def cat_shapes(L):
    f = (lambda a, b: L.cat([a, b], 0))
    return f, (R(L, 2, 3), R(L, 2, 4)), (R(L, 2, 3), R(L, 1, 3)), ()


@case(r"stack: expects each tensor to be equal size, got shapes \[\(2, 3\), \(2, 4\)\]: tensor 1")
def stack_sizes(L):
    return (lambda a, b: L.stack([a, b])), (R(L, 2, 3), R(L, 2, 4)), None, ()


@case(r"squeeze: dim 3 is out of range for a tensor of rank 2")
def squeeze_bad_dim(L):
    return (lambda a: a.squeeze(3)), (R(L, 2, 3),), None, ()


@case(r"permute: dims \(0, 0\) are not a permutation of the 2 dims of shape \(2, 3\)")
def permute_repeated_dim(L):
    return (lambda a: a.permute(0, 0)), (R(L, 2, 3),), None, ()


@case(r"transpose: dim 2 is out of range for a tensor of rank 2")
def transpose_bad_dim(L):
    return (lambda a: a.transpose(0, 2)), (R(L, 2, 3),), None, ()


@case(r"sum: dim 2 is out of range for a tensor of rank 2")
def sum_bad_dim(L):
    return (lambda a: a.sum(2)), (R(L, 2, 3),), None, ()


@case(r"softmax: dim 2 is out of range for a tensor of rank 2")
def softmax_bad_dim(L):
    return (lambda a: a.softmax(2)), (R(L, 2, 3),), None, ()


@case(r"index 5 is out of bounds for dimension 0 with size 2")
def index_out_of_bounds(L):
    return (lambda a: a[5]), (R(L, 2, 3),), None, ()


@case(r"a tensor with 6 elements cannot be converted to a Python scalar")
def item_of_many(L):
    return (lambda a: a.item()), (R(L, 2, 3),), None, ()


@case(r"can't call numpy\(\) on a tensor that requires grad; use tensor.detach\(\).numpy\(\)")
def numpy_of_requires_grad(L):
    return (lambda a: a.numpy()), (R(L, 2, 3).requires_grad_(),), None, ()


@case(r"Linear.forward\(\) takes 2 positional arguments but 3 were given")
def module_given_two_inputs(L):
    m = L.nn.Linear(3, 2)
    return (lambda a: m(a, a)), (R(L, 2, 3),), None, (m,)


@case(r"only floating-point and complex tensors can require gradients, got tracejit.int64")
def requires_grad_on_integers(L):
    return (lambda a: a.requires_grad_()), (L.tensor([1, 2]),), None, ()


@case(r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast together \(dim -1: 3 vs 4\)")
def broadcast_mismatch(L):
    return (lambda a, b: a + b), (R(L, 2, 3), R(L, 4)), (R(L, 2, 3), R(L, 3)), ()


@case(r"reshape: shape \(4, 2\) is invalid for input of shape \(2, 3\)")
def reshape_wrong_size(L):
    return (lambda a: a.reshape(4, 2)), (R(L, 2, 3),), None, ()


@case(r"expand: the expanded size 4 must match the existing size 2 at dim 0")
def expand_non_singleton(L):
    return (lambda a: a.expand(4, 4)), (R(L, 2, 3),), None, ()


@case(r"where: expected condition to be a bool tensor, but got a tensor with dtype float32")
def where_float_condition(L):
    return (lambda c, a: L.where(c, a, a)), (R(L, 3), R(L, 3)), None, ()


@case(r"BatchNorm1d: expected input with 5 channels \(num_features\) at dim 1, got input of shape \(4, 3\)")
def batchnorm_features(L):
    m = L.nn.BatchNorm1d(5)
    return (lambda x: m(x)), (R(L, 4, 3),), (R(L, 4, 5),), (m,)


@case(r"layer_norm: normalized_shape \(5,\) .*does not match the last dims of input shape \(4, 3\)")
def layernorm_shape(L):
    m = L.nn.LayerNorm(5)
    return (lambda x: m(x)), (R(L, 4, 3),), (R(L, 4, 5),), (m,)


@case(r"LSTM: input.size\(-1\) must be equal to input_size. Expected 4, got 6")
def lstm_input_size(L):
    m = L.nn.LSTM(4, 3, batch_first=True)
    return (lambda x: m(x)[0]), (R(L, 2, 5, 6),), None, (m,)


def _state(mods):
    return [{k: v.detach().numpy().copy() for k, v in m.state_dict().items()} for m in mods]


def _in_user_code(exc, fn):
    """The frames of `exc`'s traceback in `fn`'s own lines (the user's mistake)."""
    lines = {ln for _, _, ln in fn.__code__.co_lines() if ln}
    return [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == __file__ and f.lineno in lines]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_mistake_raises_pytorchs_error_at_the_users_line(name, compiled):
    build, message, runtime = CASES[name]
    fn_t, bad_t, _, _ = build(torch)
    with pytest.raises(Exception) as theirs:
        fn_t(*bad_t)
    fn, bad, good, mods = build(tj)
    run = tj.compile(fn) if compiled else fn
    if compiled and good is not None:
        run(*good)
    before, compiles = _state(mods), compiled and run.cache_stats()["compiles"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (a graph break's warning: backward inside)
        with pytest.raises(type(theirs.value), match=message) as ours:
            run(*bad)
    assert _in_user_code(ours.value, fn), traceback.format_exception(ours.value)
    if runtime and compiled:   # a check inside the compiled program: its line is the last one
        last = traceback.extract_tb(ours.value.__traceback__)[-1]
        assert (last.filename, last.lineno) == (__file__, fn.__code__.co_firstlineno)
    for a, b in zip(before, _state(mods)):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    if good is not None:
        run(*good)
        if compiled:
            assert run.cache_stats()["compiles"] == compiles


def _inner(w, i):
    return tj.nn.functional.embedding(i, w * 2)


def _outer(w, i):
    return _inner(w, i).sum()


def _branchy(w, i):
    if w.sum() > 0:
        return _inner(w, i).sum()
    return w.sum()


@pytest.mark.parametrize("make", [tj.compile, lambda f: tj.trace(f, compiler="interpret"), tj.script],
                         ids=["compiled", "interpreted", "script-branch"])
def test_a_compiled_check_points_at_the_nested_users_line(make):
    # The check failing in the compiled program is raised from the line of the op, in the
    # function the compiled one called (inside a graph branch too), before and after its
    # kernels are in.
    f = make(_branchy if make is tj.script else _outer)
    w = R(tj, 10, 3).abs()
    for _ in range(3):
        f(w, tj.tensor([1, 2]))
        with pytest.raises(IndexError, match="index 12 is out of range") as info:
            f(w, tj.tensor([1, 12]))
        last = traceback.extract_tb(info.value.__traceback__)[-1]
        assert (last.filename, last.lineno) == (__file__, _inner.__code__.co_firstlineno + 1)
        assert "embedding(i, w * 2)" in last.line


def test_data_dependent_control_flow_says_what_to_do():
    def f(a):
        if a.sum() > 0:
            return a * 2
        return a
    with pytest.raises(TraceError, match=r"at .*test_user_errors_torch.py:\d+.*tracejit.cond\(pred, true_fn, "
                                         r"false_fn, operands\).*tracejit.where.*\.item\(\) there\) and pass it "
                                         r"in.*tracejit.eager\(\)"):
        tj.compile(f, fullgraph=True)(R(tj, 3))
    with pytest.warns(RuntimeWarning, match="cannot be captured as one graph"):
        g = tj.compile(f)
        np.testing.assert_allclose(g(R(tj, 3)).numpy(), f(R(tj, 3)).numpy())


def test_cond_the_message_suggests_is_captured_as_graph_control_flow():
    def f(a):
        return tj.cond(a.sum() > 0, lambda x: x * 2, lambda x: x - 1, (a,))

    def f_torch(a):
        return torch.cond(a.sum() > 0, lambda x: x * 2, lambda x: x - 1, (a,))

    g = tj.compile(f, fullgraph=True)
    for sign in (1.0, -1.0, 1.0):
        x0 = np.abs(np.random.default_rng(1).standard_normal(3)).astype(np.float32) * sign
        x, xt = tj.tensor(x0).requires_grad_(), torch.tensor(x0, requires_grad=True)
        y, yt = g(x), f_torch(xt)
        np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-6)
        y.sum().backward()
        yt.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())
    assert g.cache_stats()["compiles"] == 1   # (one graph for both branches)
    two = tj.compile(lambda a: tj.cond(a.sum() > 0, lambda x: (x, x + 1), lambda x: (x - 1, x), (a,)), fullgraph=True)
    assert [t.tolist() for t in two(tj.ones(2))] == [[1.0, 1.0], [2.0, 2.0]]


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_load_state_dict_reports_every_key_at_once(lib):
    m = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Linear(4, 2))
    before = _state([m])
    sd = dict(m.state_dict())
    sd["0.weight"] = lib.zeros(4, 3)   # (a key that fits: PyTorch copies it before raising, we do not)
    sd.pop("0.bias")
    sd["extra"] = R(lib, 1)
    sd["1.weight"] = R(lib, 3, 4)
    with pytest.raises(RuntimeError, match=r'(?s)loading state_dict for Sequential:.*Missing key\(s\) in state_dict: '
                                           r'"0.bias".*Unexpected key\(s\) in state_dict: "extra".*size mismatch for '
                                           r'1.weight: copying a param with shape .*3, 4.* the shape in current model '
                                           r'is .*2, 4'):
        m.load_state_dict(sd)
    if lib is tj:
        assert all(np.array_equal(before[0][k], v) for k, v in _state([m])[0].items())


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_optimizer_refuses_non_leaves_and_shared_parameters(lib):
    y = R(lib, 3).requires_grad_() * 2
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        lib.optim.SGD([y], lr=0.1)
    p = lib.nn.Parameter(R(lib, 3))
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        lib.optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_collating_ragged_samples_names_their_shapes(lib):
    loader = lib.utils.data.DataLoader([R(lib, 3), R(lib, 4)], batch_size=2)
    with pytest.raises(RuntimeError, match=r"stack expects each .* equal size.*(\[3\]|\(3,\)).*(\[4\]|\(4,\))"):
        next(iter(loader))


@pytest.mark.skipif(torch.cuda.is_available() or tj.cuda.is_available(), reason="a GPU is present")
@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_asking_for_cuda_without_one_raises_an_assertion_error(lib):
    with pytest.raises(AssertionError):
        R(lib, 2).to("cuda")
    with pytest.raises(RuntimeError if lib is tj else AssertionError):   # (ours is both)
        R(lib, 2).cuda()


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_training_code_mistakes_with_autograd_and_losses(lib):
    p = lib.nn.Parameter(R(lib, 3))
    with pytest.raises(RuntimeError, match=r"(?i)grad.*(size|\[4\])"):
        p.grad = R(lib, 4)
    assert p.grad is None
    with pytest.raises(RuntimeError, match=r"element 0 of .* does not require grad"):
        (R(lib, 3) * 2).sum().backward()
    with pytest.raises(RuntimeError, match=r"(?i)mat1 and mat2 must have the same dtype|input is float64 but weight "
                                           r"is float32"):
        lib.nn.Linear(3, 2)(lib.tensor(np.ones((2, 3))))
    with pytest.raises(RuntimeError, match=r"multi-target not supported|got \(4, 3\) and \(4, 1\)"):
        lib.nn.functional.cross_entropy(R(lib, 4, 3), lib.tensor([[0], [1], [2], [1]]))
    with pytest.raises(ValueError, match=r"(?i)target size .*must be the same as input size|input shape \(4, 1\) and "
                                         r"target shape \(4,\) differ"):
        lib.nn.functional.binary_cross_entropy_with_logits(R(lib, 4, 1), R(lib, 4))
    x = R(lib, 3).requires_grad_()
    with pytest.raises(RuntimeError, match=r"allow_unused=True"):
        lib.autograd.grad((x * 2).sum(), [x, R(lib, 3).requires_grad_()])


def _exp_of_square(x):
    return (x * x).exp()


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_backward_mistakes_through_a_compiled_forward(lib):
    f = tj.compile(_exp_of_square) if lib is tj else _exp_of_square
    x = R(lib, 3).requires_grad_()
    for _ in range(3):   # (past the first calls: the compiled program, where its kernels are in)
        loss = f(x * 1).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match=r"(?i)backward through the graph a second time.*retain_graph=True"):
        loss.backward()
    z = x * 1
    y = f(z)
    z.add_(1)
    with pytest.raises(RuntimeError, match=r"modified (by an inplace operation|by an in-place operation|in place)"):
        y.sum().backward()
    with pytest.raises(RuntimeError, match=r"grad can be implicitly created only for scalar outputs"):
        f(x).backward()


def _narrow_past_end(a, b):
    return a.narrow(0, 2, 2) * b.sum()


def _column_past_end(a, b):
    return a[:, 4] + b


def _index_past_end(a, b):
    return a[b.long()]


def _index_put_past_end(a, b):
    return a.index_put((b.long(),), b)


@pytest.mark.parametrize("mode", [None, "max-autotune"], ids=["tier0", "compiled"])
@pytest.mark.parametrize("fn,good,bad,message", [
    (_narrow_past_end, (6,), (3,), r"narrow: start \(2\) \+ length \(2\) exceeds dim 0 of size 3"),
    (_column_past_end, (2, 6), (2, 3), r"getitem: index 4 is out of bounds for dimension 1 with size 3"),
    (_index_past_end, (8,), (3,), r"getitem: index 3 is out of bounds for dimension 0 with size 3"),
    (_index_put_past_end, (8,), (3,), r"index_put: index 3 is out of bounds for dimension 0 with size 3"),
], ids=["narrow", "column", "index", "index_put"])
def test_an_index_past_a_symbolic_dims_end_raises_at_the_users_line(fn, good, bad, message, mode):
    # Sizes that changed between calls are symbolic, so a bound is checked only when the
    # program runs: it raises PyTorch's IndexError from the user's line (never a silently
    # short result), the inputs are unchanged and the next good call needs no new capture.
    def args(lib, shape):
        return R(lib, *shape), P(lib, 1, 3)
    with pytest.raises((IndexError, RuntimeError)) as theirs:
        fn(*args(torch, bad))
    f = tj.compile(fn, dynamic=True, mode=mode)
    f(*args(tj, good))
    compiles = f.cache_stats()["compiles"]
    a, b = args(tj, bad)
    before = a.numpy().copy()
    with pytest.raises(type(theirs.value), match=message) as info:
        f(a, b)
    assert (__file__, fn.__code__.co_firstlineno + 1) in [
        (t.filename, t.lineno) for t in traceback.extract_tb(info.value.__traceback__)]
    np.testing.assert_array_equal(a.numpy(), before)
    shape = list(good)
    shape[-1] += 2
    np.testing.assert_allclose(f(*args(tj, shape)).numpy(), fn(*args(tj, shape)).numpy())
    assert f.cache_stats()["compiles"] == compiles


def _scaled_by_next(x, it):
    return x * next(it)


def test_an_iterator_argument_is_not_frozen_into_the_graph():
    # Each call takes the iterator's next item, as under PyTorch: compiled, the function
    # runs eagerly with one warning naming the argument; fullgraph=True raises that.
    want = [float(_scaled_by_next(torch.ones(1), it)) for it in [iter([1.0, 2.0, 3.0])] for _ in range(3)]
    f, it = tj.compile(_scaled_by_next), iter([1.0, 2.0, 3.0])
    with pytest.warns(RuntimeWarning, match=r"argument 'it' is an iterator \(list_iterator\).*pass its items"):
        got = [float(f(tj.ones(1), it)) for _ in range(3)]
    assert got == want == [1.0, 2.0, 3.0]
    with pytest.raises(TraceError, match="argument 'it' is an iterator"):
        tj.compile(_scaled_by_next, fullgraph=True)(tj.ones(1), (v for v in [1.0]))
    items = iter([1.0, 2.0, 3.0])   # (the same read from a closure)
    g = tj.compile(lambda x: x * next(items))
    with pytest.warns(RuntimeWarning, match=r"closure variable 'items' is an iterator \(list_iterator\)"):
        assert [float(g(tj.ones(1))) for _ in range(3)] == want


_LOG = io.StringIO()   # (a file object is an iterator of its lines)


def _logged(x, verbose=False):
    if verbose:
        print("step", file=_LOG)
    return x * 2


def test_a_global_log_file_does_not_stop_a_capture():
    f = tj.compile(_logged, fullgraph=True)
    assert f(tj.ones(2)).tolist() == [2.0, 2.0] and f.cache_stats()["compiles"] == 1

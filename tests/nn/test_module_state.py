"""Module state-dict hooks, extra state, set_submodule and to_empty, against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")
LIBS = pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])


def _net(lib):
    nn = lib.nn

    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.n = 5

        def get_extra_state(self):
            return {"n": self.n}

        def set_extra_state(self, state):
            self.n = state["n"]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Counter(), nn.Linear(2, 3)
            self.register_buffer("buf", lib.zeros(2))
            self.register_buffer("scratch", lib.ones(1), persistent=False)
    return Net()


def _state_dict_run(lib):
    lib.manual_seed(0)
    log, net = [], _net(lib)
    net.register_state_dict_pre_hook(lambda m, p, kv: log.append(("pre", type(m).__name__, p, kv)))
    net.a.register_state_dict_pre_hook(lambda m, p, kv: log.append(("pre", type(m).__name__, p, kv)))

    def post(m, sd, prefix, meta):
        log.append(("post", prefix, sorted(meta.items())))
        sd[prefix + "added"] = lib.ones(1)
    net.b.register_state_dict_post_hook(post)
    sd = net.state_dict(keep_vars=True)
    replaced = net._register_state_dict_hook(lambda m, sd, p, md: {"only": 1})
    only = net.state_dict()
    replaced.remove()
    net.b.register_state_dict_post_hook(lambda *a: {})
    with pytest.raises(RuntimeError, match="must return None"):
        net.state_dict()
    return (list(sd), dict(sd._metadata), sd["a._extra_state"], log, only,
            sd["b.weight"].requires_grad)


@LIBS
def test_state_dict_hooks_metadata_and_extra_state_match_pytorch(lib):
    assert _state_dict_run(lib) == _state_dict_run(torch)


def _load_run(lib):
    lib.manual_seed(0)
    log, src, dst = [], _net(lib), _net(lib)
    dst.a.n = 0

    def pre(m, sd, prefix, meta, strict, missing, unexpected, errors):
        log.append(("pre", type(m).__name__, prefix, sorted(meta.items()), strict))
        if prefix + "old_weight" in sd:   # a renamed key, as version migrations do
            sd[prefix + "weight"] = sd.pop(prefix + "old_weight")
    dst.b.register_load_state_dict_pre_hook(pre)

    def post(m, keys):
        log.append(("post", type(m).__name__, list(keys.missing_keys), list(keys.unexpected_keys)))
        keys.unexpected_keys[:] = [k for k in keys.unexpected_keys if k != "stray"]
    dst.register_load_state_dict_post_hook(post)
    sd = src.state_dict()
    sd["b.old_weight"] = sd.pop("b.weight")
    sd["a._extra_state"] = {"n": 7}
    sd["stray"] = lib.ones(1)
    result = dst.load_state_dict(sd)
    del sd["a._extra_state"]
    with pytest.raises(RuntimeError, match='Missing key.*"a._extra_state"'):
        _net(lib).load_state_dict(sd, strict=True)
    scalar = lib.nn.Module()
    scalar.register_buffer("t", lib.tensor(0.0))
    scalar.load_state_dict({"t": lib.tensor([3.0])})   # a 1-element tensor into a 0-d one
    same = np.array_equal(dst.b.weight.detach().numpy(), src.b.weight.detach().numpy())
    return repr(result), dst.a.n, log, same, float(scalar.t)


@LIBS
def test_load_hooks_extra_state_and_metadata_match_pytorch(lib):
    assert _load_run(lib) == _load_run(torch)


def test_failed_load_puts_back_what_it_had_copied():
    net, other = _net(tj), _net(tj)
    before = {k: v.numpy().copy() for k, v in net.state_dict().items() if k != "a._extra_state"}
    weight = net.b.weight
    bad = other.state_dict()
    bad["b.bias"] = tj.zeros(5)   # loaded after a.lin's weights
    for assign in (False, True):
        with pytest.raises(RuntimeError, match="size mismatch for b.bias"):
            net.load_state_dict(bad, assign=assign)
        for k, v in net.state_dict().items():
            if k != "a._extra_state":
                np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
    assert net.b.weight is weight
    assert net.load_state_dict(other.state_dict(), assign=True).missing_keys == []
    assert net.b.weight is weight
    np.testing.assert_array_equal(weight.detach().numpy(), other.b.weight.detach().numpy())


def test_compiled_module_state_dict_runs_the_wrapped_modules_hooks():
    net = _net(tj)
    seen = []
    compiled = tj.compile(net)
    compiled.register_state_dict_pre_hook(lambda m, p, kv: seen.append(m))
    assert "a._extra_state" in compiled.state_dict() and seen == [net]
    assert repr(compiled.load_state_dict(net.state_dict())) == "<All keys matched successfully>"


@LIBS
def test_set_submodule_as_pytorch(lib):
    nn = lib.nn
    net = _net(lib)
    net.set_submodule("a.lin", nn.Linear(2, 4))
    net.set_submodule("a.extra", nn.ReLU())
    assert net.a.lin.out_features == 4 and [n for n, _ in net.a.named_children()] == ["lin", "extra"]
    with pytest.raises(AttributeError, match="has no attribute `zz`"):
        net.set_submodule("a.zz", nn.ReLU(), strict=True)
    with pytest.raises(AttributeError, match="`n` is not an nn.Module"):
        net.set_submodule("a.n", nn.ReLU())
    with pytest.raises(ValueError, match="without a target name"):
        net.set_submodule("", nn.ReLU())
    with pytest.raises(ValueError, match="is not an nn.Module"):
        net.set_submodule("a.lin", 3)
    with pytest.raises(AttributeError):
        net.set_submodule("q.x", nn.ReLU())
    assert net.a.lin.out_features == 4 and not hasattr(net, "q")


@LIBS
def test_to_empty_keeps_shapes_dtypes_and_parameters(lib):
    net = _net(lib)
    weight = net.b.weight
    assert net.to_empty(device="cpu") is net
    assert net.b.weight is weight and tuple(weight.shape) == (3, 2) and weight.requires_grad
    net.double()
    net.a.to_empty(device="cpu", recurse=False)
    assert str(net.a.lin.weight.dtype).endswith("float64") and tuple(net.buf.shape) == (2,)


def test_module_to_memory_format_lays_out_4d_parameters():
    ms = [m.nn.Sequential(m.nn.Conv2d(3, 4, 3), m.nn.BatchNorm2d(4), m.nn.Linear(2, 2)) for m in (torch, tj)]
    ms[1].load_state_dict({k: tj.tensor(v.numpy()) for k, v in ms[0].state_dict().items()})
    for m, lib in zip(ms, (torch, tj)):
        m.to(memory_format=lib.channels_last)
    for (k, a), b in zip(ms[0].state_dict().items(), ms[1].state_dict().values()):
        assert a.stride() == b.stride(), k
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert ms[1][0].weight.is_contiguous(memory_format=tj.channels_last)


@LIBS
def test_a_model_built_on_the_meta_device_loads_its_weights(lib):
    """``with device("meta")`` construction, then to_empty or load_state_dict(assign=True)
    (HF/accelerate's empty-weights loading): the same results as PyTorch's."""
    with lib.device("meta"):
        net = lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.LayerNorm(3))
    assert lib.device("meta").type == "meta" and str(lib.device("meta")) == "meta"
    head = lib.nn.Linear(3, 2, device="meta")
    sd = {"0.weight": lib.ones(3, 4), "0.bias": lib.zeros(3), "1.weight": lib.full((3,), 2.0), "1.bias": lib.ones(3)}
    res = net.load_state_dict(sd, assign=True)
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert isinstance(net[0].weight, lib.nn.Parameter) and net[0].weight.requires_grad
    head.to_empty(device="cpu")
    lib.nn.init.constant_(head.weight, 0.5)
    lib.nn.init.zeros_(head.bias)
    x = lib.tensor(np.arange(8, dtype=np.float32).reshape(2, 4))
    y = head(net(x))
    assert y.device.type == "cpu" and head.weight.device.type == "cpu"
    np.testing.assert_allclose(y.detach().numpy(), [[1.5, 1.5], [1.5, 1.5]], rtol=1e-5)
    with pytest.raises((RuntimeError, ValueError), match="devic"):
        lib.device("metal:0")

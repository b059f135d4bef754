"""swa_utils against PyTorch: AveragedModel (SWA's running mean, EMA by multi_avg_fn and by
avg_fn, buffers averaged or copied), SWALR's annealed rates, and update_bn's statistics."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _net(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))


def _copy(src, dst):
    dst.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in src.state_dict().items()})


@pytest.mark.parametrize("kind", ["swa", "ema_multi", "ema_fn", "swa_buffers", "ema_multi_buffers"])
def test_averaged_model_matches_torch(kind):
    torch.manual_seed(0)
    ref = _net(torch)
    m = _net(tj)
    _copy(ref, m)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(4)]
    res = []
    for lib, model in ((torch, ref), (tj, m)):
        S = lib.optim.swa_utils
        kw = {"swa": {}, "swa_buffers": {"use_buffers": True},
              "ema_multi": {"multi_avg_fn": S.get_ema_multi_avg_fn(0.9)},
              "ema_fn": {"avg_fn": S.get_ema_avg_fn(0.8)},
              # (BatchNorm's int64 num_batches_tracked averaged too, truncated)
              "ema_multi_buffers": {"multi_avg_fn": S.get_ema_multi_avg_fn(0.9), "use_buffers": True}}[kind]
        avg = S.AveragedModel(model, **kw)
        opt = lib.optim.SGD(model.parameters(), lr=0.1)
        for x in xs:
            loss = model(lib.tensor(x)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            avg.update_parameters(model)
        res.append({k: v.detach().numpy() for k, v in avg.state_dict().items()})
    assert list(res[1]) == list(res[0])
    for k in res[0]:
        np.testing.assert_allclose(res[1][k], res[0][k], rtol=1e-5, atol=1e-7, err_msg=k)



def test_multi_avg_fn_gets_one_dtype_per_call():
    seen = []

    def record(avg, cur, n):
        seen.append(sorted({str(t.dtype) for t in avg + cur}))

    avg = tj.optim.swa_utils.AveragedModel(_net(tj), multi_avg_fn=record, use_buffers=True)
    for _ in range(2):
        avg.update_parameters(_net(tj))
    assert sorted(map(tuple, seen)) == [("tracejit.float32",), ("tracejit.int64",)]


@pytest.mark.parametrize("strategy,epochs", [("cos", 3), ("linear", 2), ("cos", 0)])
def test_swalr_rates_match_torch(strategy, epochs):
    lrs = []
    for lib in (torch, tj):
        p = lib.nn.Parameter(lib.ones(2))
        opt = lib.optim.SGD([p], lr=0.5)
        s = lib.optim.swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=epochs, anneal_strategy=strategy)
        seq = []
        for _ in range(5):
            opt.step()
            s.step()
            seq.append(opt.param_groups[0]["lr"])
        lrs.append(seq)
    np.testing.assert_allclose(lrs[1], lrs[0], rtol=1e-12)
    with pytest.raises(ValueError, match="anneal_strategy"):
        tj.optim.swa_utils.SWALR(tj.optim.SGD([tj.nn.Parameter(tj.ones(1))], lr=1), 0.1,
                                 anneal_strategy="exp")


def test_update_bn_recomputes_statistics_like_torch():
    torch.manual_seed(1)
    ref = _net(torch)
    m = _net(tj)
    _copy(ref, m)
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((6, 3)).astype(np.float32) for _ in range(3)]
    torch.optim.swa_utils.update_bn([(torch.tensor(b), 0) for b in batches], ref)
    tj.optim.swa_utils.update_bn([(tj.tensor(b), 0) for b in batches], m)
    for k in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
        np.testing.assert_allclose(m.state_dict()[k].numpy(), ref.state_dict()[k].numpy(), rtol=1e-5)
    assert m[1].momentum == ref[1].momentum == 0.1

"""Window functions and stft/istft (tracejit/signal.py) against numpy: numpy's symmetric
windows, a direct framing + numpy.fft for stft, the round trip for istft, finite
differences for the gradient, and the argument errors."""
import numpy as np
import pytest

import tracejit as tj


@pytest.mark.parametrize("name,ref", [("hann_window", np.hanning), ("hamming_window", np.hamming),
                                      ("blackman_window", np.blackman), ("bartlett_window", np.bartlett),
                                      ("kaiser_window", lambda n: np.kaiser(n, 12.0))])
def test_windows_match_numpy(name, ref):
    fn = getattr(tj, name)
    for n in (1, 2, 7, 8):
        sym = fn(n, periodic=False, dtype=tj.float64).numpy()
        np.testing.assert_allclose(sym, ref(n), atol=1e-12)
        per = fn(n, dtype=tj.float64).numpy()            # periodic: n of the n + 1 window
        np.testing.assert_allclose(per, ref(n + 1)[:n] if n > 1 else [1.0], atol=1e-12)
    w = fn(8)
    assert w.dtype == tj.float32 and tuple(w.shape) == (8,)
    assert tuple(fn(0).shape) == (0,)


def test_window_errors():
    with pytest.raises(ValueError, match="window_length"):
        tj.hann_window(-1)
    with pytest.raises(TypeError, match="floating point dtype"):
        tj.hann_window(4, dtype=tj.int64)


def _stft_ref(x, n_fft, hop, window, onesided=True):
    pad = n_fft // 2
    xp = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    n = 1 + (xp.shape[-1] - n_fft) // hop
    frames = np.stack([xp[..., i * hop:i * hop + n_fft] * window for i in range(n)], -2)
    spec = np.fft.rfft(frames, axis=-1) if onesided else np.fft.fft(frames, axis=-1)
    return np.swapaxes(spec, -1, -2)


@pytest.mark.parametrize("onesided", [True, False])
def test_stft_matches_numpy_and_inverts(onesided):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 64))
    w = np.hanning(17)[:16]
    spec = tj.stft(tj.tensor(x), 16, 4, window=tj.hann_window(16, dtype=tj.float64),
                   onesided=onesided, return_complex=True)
    assert spec.dtype == tj.complex128
    np.testing.assert_allclose(spec.numpy(), _stft_ref(x, 16, 4, w, onesided), atol=1e-10)
    back = tj.istft(spec, 16, 4, window=tj.hann_window(16, dtype=tj.float64), length=64)
    np.testing.assert_allclose(back.numpy(), x, atol=1e-10)


def test_stft_gradient_by_finite_differences():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(24)
    w = tj.hann_window(8, dtype=tj.float64)

    def f(a):
        return float((np.abs(_stft_ref(a[None], 8, 2, w.numpy())) ** 2).sum())
    t = tj.tensor(x, requires_grad=True)
    (tj.abs(tj.stft(t, 8, 2, window=w, return_complex=True)) ** 2).sum().backward()
    eps = 1e-6
    fd = np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(24)])
    np.testing.assert_allclose(t.grad.numpy(), fd, rtol=1e-6, atol=1e-6)


def test_stft_istft_errors():
    x = tj.randn(32)
    with pytest.raises(ValueError, match="return_complex"):
        tj.stft(x, 8)
    with pytest.raises(ValueError, match="n_fft"):
        tj.stft(x, 0, return_complex=True)
    with pytest.raises(ValueError, match="win_length"):
        tj.stft(x, 8, win_length=9, return_complex=True)
    with pytest.raises(ValueError, match="pad_mode"):
        tj.stft(x, 8, pad_mode="wrap", return_complex=True)
    with pytest.raises(TypeError, match="complex input"):
        tj.istft(tj.randn(5, 9), 8)
    with pytest.raises(ValueError, match="overlap-add"):
        tj.istft(tj.stft(x, 8, 2, window=tj.hann_window(8, periodic=False), center=False, return_complex=True),
                 8, 2, window=tj.hann_window(8, periodic=False), center=False)


def _speech_net(lib):
    """kws's model with its log-spectrogram front-end inside the forward."""
    nn = lib.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("window", lib.hann_window(32))
            self.conv = nn.Conv1d(17, 8, 3)
            self.fc = nn.Linear(8, 4)

        def forward(self, wav):
            spec = lib.stft(wav, 32, hop_length=8, window=self.window, return_complex=True)
            feats = lib.log(spec.abs().pow(2) + 1e-6)
            back = lib.istft(spec, 32, hop_length=8, window=self.window, length=wav.shape[-1])
            h = lib.relu(self.conv(feats)).mean(-1)
            return self.fc(h), back
    return Net()


def test_a_compiled_stft_front_end_trains_as_one_graph_like_torch():
    torch = pytest.importorskip("torch")
    tn, jn = _speech_net(torch), _speech_net(tj)
    jn.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tn.state_dict().items()})
    cn = tj.compile(jn, fullgraph=True)
    rng = np.random.default_rng(0)
    for _ in range(3):
        wav = rng.standard_normal((3, 400)).astype(np.float32)
        (got, back), (want, wback) = cn(tj.tensor(wav)), tn(torch.tensor(wav))
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(back.numpy(), wback.numpy(), atol=1e-5)
        got.square().sum().backward()
        want.square().sum().backward()
        for (name, p), q in zip(jn.named_parameters(), tn.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    assert cn.cache_stats()["compiles"] == 1


@pytest.mark.parametrize("pad_mode", ["reflect", "constant", "replicate", "circular"])
def test_an_stft_of_signals_of_several_lengths_is_one_capture(pad_mode, monkeypatch):
    """The frames' indices are computed from each call's length, padding included; the
    compiled kernels give torch's spectra and the gradient flows to the signal."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # (the kernels run from the first call)

    def f(m, x):
        return m.stft(x, 16, hop_length=4, window=m.hann_window(16), pad_mode=pad_mode, return_complex=True).abs()

    cf = tj.compile(lambda x: f(tj, x), dynamic=True)
    for n in (40, 47, 64):
        x = np.random.default_rng(n).standard_normal((2, n)).astype(np.float32)
        xt, xr = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        got, want = cf(xt), f(torch, xr)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-4)
        got.sum().backward()
        want.sum().backward()
        np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


@pytest.mark.parametrize("center,pad_mode", [(True, "reflect"), (True, "constant"), (True, "replicate"),
                                             (True, "circular"), (False, "reflect")])
@pytest.mark.parametrize("normalized,onesided", [(False, True), (True, False)])
def test_stft_options_match_torch(center, pad_mode, normalized, onesided):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 300)).astype(np.float32)

    def run(m):
        return m.stft(m.tensor(x), 64, hop_length=37, win_length=48, window=m.hann_window(48), center=center,
                      pad_mode=pad_mode, normalized=normalized, onesided=onesided, return_complex=True).numpy()
    np.testing.assert_allclose(run(tj), run(torch), atol=2e-5)


def test_stft_errors_are_runtime_errors_as_torchs():
    torch = pytest.importorskip("torch")
    for m in (tj, torch):
        x, w = m.randn(2, 100), m.hann_window(64)
        for call in (lambda: m.stft(x, 0, return_complex=True),
                     lambda: m.stft(x, 64, hop_length=0, window=w, return_complex=True),
                     lambda: m.stft(x, 64, win_length=80, return_complex=True),
                     lambda: m.stft(x, 64, window=w),
                     lambda: m.stft(m.randn(20), 64, window=w, center=False, return_complex=True),
                     lambda: m.istft(m.randn(33, 5), 64, window=w)):
            with pytest.raises(RuntimeError):
                call()

"""SummaryWriter writes real event files: read back with tensorboard's own event reader."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tracejit as tj


def test_scalars_and_histograms_read_back(tmp_path):
    pytest.importorskip("tensorboard", reason="SummaryWriter is built on the optional tensorboard package")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tracejit.utils.tensorboard import SummaryWriter

    values = np.random.default_rng(0).standard_normal(1000)
    with SummaryWriter(str(tmp_path)) as w:
        for step in range(5):
            w.add_scalar("loss", tj.tensor(1.0 / (step + 1)), step)
        w.add_scalar("lr", 0.5, global_step=3)
        w.add_histogram("weights", tj.tensor(values), 7)
        w.add_scalars("acc", {"train": 0.9, "val": 0.8}, 2)
        w.flush()
    acc = EventAccumulator(str(tmp_path), size_guidance={"histograms": 0, "scalars": 0})
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"loss", "lr"}
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == [0, 1, 2, 3, 4]
    np.testing.assert_allclose([e.value for e in loss], [1.0 / (s + 1) for s in range(5)], rtol=1e-6)
    assert acc.Scalars("lr")[0].step == 3 and acc.Scalars("lr")[0].value == 0.5
    (h,) = acc.Histograms("weights")
    hv = h.histogram_value
    assert h.step == 7 and hv.num == 1000 and sum(hv.bucket) == 1000
    assert hv.min == pytest.approx(values.min()) and hv.max == pytest.approx(values.max())
    assert hv.sum == pytest.approx(values.sum()) and hv.sum_squares == pytest.approx((values ** 2).sum())
    for sub, expect in (("acc_train", 0.9), ("acc_val", 0.8)):
        sacc = EventAccumulator(str(tmp_path / sub))
        sacc.Reload()
        (e,) = sacc.Scalars("acc")
        assert e.step == 2 and e.value == pytest.approx(expect)


def test_missing_tensorboard_gives_clear_error(tmp_path):
    # A fresh interpreter in which importing tensorboard fails: tracejit still imports, and
    # creating a writer says what to install.
    code = ("import sys; sys.modules['tensorboard'] = None\n"
            "import tracejit.utils.tensorboard as t\n"
            "try:\n    t.SummaryWriter(sys.argv[1])\n"
            "except ImportError as e:\n    print('ERR', e)\n")
    root = str(pathlib.Path(tj.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env=env)
    assert "ERR" in out.stdout and "pip install" in out.stdout and "tensorboard" in out.stdout, out.stderr

"""tracejit.profiler: op events from dispatch, ranges, schedules, traces; nothing recorded
(and no dispatch change) outside a profile."""
import json
import threading

import numpy as np
import pytest

import tracejit as tj
from tracejit import profiler as P
from tracejit.ops import eager as _eager


def _step(m, x):
    m(x).sum().backward()


def test_ops_and_ranges_are_recorded_with_self_time():
    m = tj.nn.Sequential(tj.nn.Linear(4, 8), tj.nn.ReLU(), tj.nn.Linear(8, 2))
    x = tj.randn(3, 4)
    with P.profile(record_shapes=True) as prof:
        with P.record_function("step"):
            _step(m, x)
    names = [e.name for e in prof.events()]
    assert names[0] == "step" and "relu" in names and "relu_backward" in names
    step = prof.events()[0]
    assert step.children and step.self_cpu_time_total == pytest.approx(
        step.cpu_time_total - sum(c.cpu_time_total for c in step.children))
    avg = {a.key: a for a in prof.key_averages()}
    assert avg["relu"].count == 1 and avg["step"].count == 1
    assert avg["step"].cpu_time_total >= avg["relu"].cpu_time_total
    by_shape = prof.key_averages(group_by_input_shape=True)
    assert [(3, 8)] in [a.input_shapes for a in by_shape if a.key == "relu"]
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=3)
    assert "Self CPU %" in table and len([ln for ln in table.splitlines() if ln.strip()]) == 3 + 3 + 2


def test_nothing_is_recorded_outside_and_dispatch_is_restored():
    before = _eager._tracers_active
    with P.profile() as prof:
        tj.ones(2) + 1
    n = len(prof.events())
    tj.ones(2) * 3
    assert len(prof.events()) == n == 1 and _eager._tracers_active == before
    assert _eager.trace_state.profiler is None


def test_another_threads_ops_are_not_recorded():
    with P.profile() as prof:
        t = threading.Thread(target=lambda: tj.ones(3).exp())
        t.start()
        t.join()
        tj.ones(3).neg()
    assert [e.name for e in prof.events()] == ["neg"]


def test_a_traced_function_inside_a_profile_still_compiles():
    f = tj.trace(lambda a: (a * 2).sum())
    with P.profile():
        assert f(tj.ones(3)).item() == 6.0
        assert f(tj.ones(3)).item() == 6.0


def test_schedule_actions_and_trace_ready_cycles():
    A = P.ProfilerAction
    s = P.schedule(wait=1, warmup=1, active=2, repeat=1)
    assert [s(i) for i in range(6)] == [A.NONE, A.WARMUP, A.RECORD, A.RECORD_AND_SAVE, A.NONE, A.NONE]
    s2 = P.schedule(wait=0, warmup=0, active=1, repeat=0, skip_first=2)
    assert [s2(i) for i in range(4)] == [A.NONE, A.NONE, A.RECORD_AND_SAVE, A.RECORD_AND_SAVE]
    with pytest.raises(ValueError, match="active > 0"):
        P.schedule(wait=0, warmup=0, active=0)
    cycles = []
    with P.profile(schedule=P.schedule(wait=1, warmup=1, active=2, repeat=1),
                   on_trace_ready=lambda p: cycles.append([e.name for e in p.events()])) as prof:
        for i in range(6):
            tj.ones(2).mul(float(i))
            prof.step()
    assert cycles == [["mul", "mul"]]      # steps 2 and 3 only; the warm-up step is dropped


def test_chrome_trace_and_tensorboard_handler(tmp_path):
    with P.profile(on_trace_ready=P.tensorboard_trace_handler(str(tmp_path / "tb"), "w0")) as prof:
        tj.ones(2).exp()
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    data = json.loads(path.read_text())
    assert [e["name"] for e in data["traceEvents"]] == ["exp"] and data["traceEvents"][0]["ph"] == "X"
    files = list((tmp_path / "tb").glob("w0.*.pt.trace.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["traceEvents"][0]["name"] == "exp"


def test_torch_style_access_paths():
    with tj.autograd.profiler.profile() as prof:
        with tj.profiler.record_function("r"):
            tj.ones(2).sin()
    assert [e.name for e in prof.function_events] == ["r", "sin"]

    @tj.profiler.record_function("decorated")
    def f():
        return np.float32(tj.ones(1).cos().item())
    with tj.profiler.profile(activities=[tj.profiler.ProfilerActivity.CPU]) as p2:
        f()
    assert [e.name for e in p2.events()] == ["decorated", "cos"]

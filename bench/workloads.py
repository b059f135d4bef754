"""The workload catalog: what each benchmark computes, its sizes, and its shared inputs.

Every system gets bit-identical inputs and initial weights, drawn here with numpy from
fixed seeds, so the "check" values the systems report (a loss, a sum) can be compared
and a system that computes something else is caught rather than timed.

The per-system code lives in ``bench/impls/``; this module only says *what* to run.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace

import numpy as np

# GELU chain constants, as float32 everywhere (a float64 constant would widen numpy
# arithmetic on some paths and slow numba kernels).
GELU_C = 0.79788456
GELU_K = 0.044715


@dataclass(frozen=True)
class Metric:
    key: str          # key in a system's result dict
    label: str        # row label in the table
    unit: str         # "ms", "us", "x", "count", ...
    lower_is_better: bool = True
    timed: bool = True  # a time: gets a "vs numpy" ratio and a bar in the chart


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    what: str
    metrics: tuple
    compiled_only: bool = False   # only meaningful for systems that compile


WORKLOADS: tuple[Workload, ...] = (
    Workload("gelu", "GELU chain, float32",
             "a=x*y+z; 0.5*a*(1+tanh(0.79788456*(a+0.044715*a**3))); forward, and forward+backward "
             "of its sum (grads wrt x, y, z)",
             (Metric("fwd_ms", "gelu fwd", "ms"),
              Metric("fwd_x_bound", "gelu fwd / bandwidth bound", "x", timed=False),
              Metric("fwdbwd_ms", "gelu fwd+bwd", "ms"),
              Metric("fwdbwd_x_bound", "gelu fwd+bwd / bandwidth bound", "x", timed=False),
              # the same calls, each timed right after a copy of the yardstick: the median
              # of the per-pair ratios (bench/machine.py `paired`)
              Metric("fwd_x_paired", "gelu fwd / bound, paired with the copy", "x", timed=False),
              Metric("fwdbwd_x_paired", "gelu fwd+bwd / bound, paired with the copy", "x",
                     timed=False))),
    Workload("mlp2", "two-layer net training step",
             "N=64, 1000->100->10, clamp(min=0) as ReLU, squared-error sum loss, manual SGD",
             (Metric("step_us", "two-layer train step", "us"),)),
    Workload("mlp", "MLP training step",
             "batch 256, 784->1024->1024->10, LayerNorm + GELU(tanh) per hidden layer, "
             "cross-entropy, Adam",
             (Metric("step_ms", "MLP train step (Adam)", "ms"),)),
    Workload("overhead", "per-call overhead",
             "a=x*y+z; tanh(a)*a-z (5 ops) on 16-element float32 inputs",
             (Metric("call_us", "5-op call on 16 elems", "us"),
              Metric("call_grad_us", "5-op call on 16 elems, inputs require grad", "us"))),
    Workload("models", "model training steps",
             "one step (forward, cross-entropy, backward, SGD) of each model PyTorch users port: "
             "a LeNet-style CNN with BatchNorm (batch 64, 28x28), an LSTM language model (batch 32, "
             "sequence 64, hidden 256, two layers), a TransformerEncoderLayer (batch 16, sequence "
             "128, d_model 256, 4 heads), a DCGAN generator through its discriminator (batch 32, "
             "32x32); bench/impls/models.py",
             (Metric("cnn_ms", "CNN step (BatchNorm)", "ms"),
              Metric("lstm_ms", "LSTM language-model step", "ms"),
              Metric("transformer_ms", "Transformer encoder step", "ms"),
              Metric("dcgan_ms", "DCGAN generator+discriminator step", "ms"))),
    Workload("opcost", "eager per-op cost",
             "chains of y*1.001 / y+0.5: 100 ops on 16 float32 elements (no grad, with graph "
             "recording, with backward) and 10 ops on 1M elements (256K quick); per op",
             (Metric("small_op_us", "eager op, 16 elems, no grad", "us"),
              Metric("small_op_grad_us", "eager op, 16 elems, recording", "us"),
              Metric("small_node_bwd_us", "backward per node, 16 elems", "us"),
              Metric("small_fwdbwd_us", "eager op fwd+bwd, 16 elems", "us"),
              Metric("large_op_us", "eager op, 1M elems", "us"),
              Metric("large_fwdbwd_us", "eager op fwd+bwd, 1M elems", "us"))),
    Workload("compile", "compile latency",
             "GELU chain forward on (256, 1024): first call in a fresh process with an empty "
             "cache, first call in a fresh process with a warm disk cache, first call with a "
             "never-seen batch size (100), and a steady call for scale; then, in fresh "
             "processes of their own, the same three for the two-layer training step "
             "(forward + backward + SGD, N=64 then N=32)",
             (Metric("cold_ms", "first call, cold", "ms"),
              Metric("warm_disk_ms", "first call, warm disk cache", "ms"),
              Metric("new_batch_ms", "first call, new batch size", "ms"),
              Metric("steady_ms", "steady call (256x1024)", "ms"),
              Metric("step_cold_ms", "two-layer step: first call, cold", "ms"),
              Metric("step_warm_disk_ms", "two-layer step: first call, warm disk", "ms"),
              Metric("step_new_batch_ms", "two-layer step: first call, new batch", "ms"),
              Metric("mlp_cold_ms", "MLP step: first call, cold", "ms"),
              Metric("mlp_warm_disk_ms", "MLP step: first call, warm disk", "ms"),
              Metric("mlp_bg_cold_ms", "MLP step, background tiers: first call, cold", "ms"),
              Metric("mlp_bg_full_speed_s", "MLP step, background tiers: time to full speed", "s"),
              Metric("mlp_bg_warm_disk_ms", "MLP step, background tiers: first call, warm disk", "ms")),
             compiled_only=True),
    Workload("amp", "bf16 mixed precision (autocast) beside float32",
             "the MLP, CNN and Transformer training steps of `mlp` and `models`, each run in "
             "float32 and under CPU autocast (bfloat16 products, float32 weights and losses), "
             "in one process; x: float32 step / autocast step",
             (Metric("mlp_f32_ms", "MLP step, float32", "ms"),
              Metric("mlp_bf16_ms", "MLP step, bf16 autocast", "ms"),
              Metric("mlp_bf16_x", "MLP step: float32 / autocast", "x", lower_is_better=False, timed=False),
              Metric("cnn_f32_ms", "CNN step, float32", "ms"),
              Metric("cnn_bf16_ms", "CNN step, bf16 autocast", "ms"),
              Metric("cnn_bf16_x", "CNN step: float32 / autocast", "x", lower_is_better=False, timed=False),
              Metric("transformer_f32_ms", "Transformer step, float32", "ms"),
              Metric("transformer_bf16_ms", "Transformer step, bf16 autocast", "ms"),
              Metric("transformer_bf16_x", "Transformer step: float32 / autocast", "x",
                     lower_is_better=False, timed=False))),
    Workload("dynamic", "dynamic shapes",
             "GELU chain forward on (B, 1024) for B = 1..64 in random order, in a fresh process: "
             "compilations and total time including them",
             (Metric("compiles", "dynamic: compilations", "count", timed=False),
              Metric("total_ms", "dynamic: total time, all shapes", "ms"),
              Metric("after_first_ms", "dynamic: time after the first shape", "ms"))),
)

WORKLOAD_NAMES = tuple(w.name for w in WORKLOADS)


def by_name(name: str) -> Workload:
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOAD_NAMES)}")


@dataclass(frozen=True)
class Config:
    """Sizes and repeat counts; ``QUICK`` is the reduced version for the smoke test."""
    quick: bool
    gelu_n: int = 4 * 1024 * 1024
    repeat: int = 15                 # timed samples for the large-array workloads
    warmup: int = 3
    mlp2_steps: int = 500
    mlp2_warmup: int = 20
    mlp_steps: int = 30
    mlp_warmup: int = 5
    models_steps: int = 10
    models_warmup: int = 3
    # Training workloads also warm up for at least this long: two samples of tracejit's
    # thread policy (coreshare.INTERVAL 0.25 s) over stepping alone, so the timed steps run
    # on the thread count a user's training loop settles on (harness.step_times). The
    # loss check's warmup + steps steps run first, as part of it (impls/base._train_steps).
    train_warmup_s: float = 0.6
    models: tuple = ("cnn", "lstm", "transformer", "dcgan")   # bench/impls/models.py's names
    paired_rounds: int = 11          # GELU against the copy timed beside it (machine.paired)
    overhead_repeat: int = 15        # samples, each a loop sized to take >= sample_s
    sample_s: float = 0.02
    compile_batch: int = 256
    compile_new_batch: int = 100
    features: int = 1024
    dynamic_max_batch: int = 64
    child_timeout_s: float = 300.0
    stat: str = "median"             # or "min": the best sample, for a shared, noisy machine
    extra: dict = field(default_factory=dict)


FULL = Config(quick=False)
QUICK = Config(quick=True, gelu_n=1024 * 1024, repeat=5, warmup=1, mlp2_steps=60, mlp2_warmup=5,
               mlp_steps=4, mlp_warmup=1, models_steps=1, models_warmup=1, models=("cnn",), paired_rounds=3,
               train_warmup_s=0.02,
               overhead_repeat=5, sample_s=0.005,
               dynamic_max_batch=8, child_timeout_s=120.0)


def config(quick: bool, stat: str = "median") -> Config:
    return replace(QUICK if quick else FULL, stat=stat)


# ---------------------------------------------------------------- byte models
def gelu_bytes(n: int) -> dict:
    """Bytes the GELU workloads must move at the least, for the bandwidth bound.

    fwd: read x, y, z and write the output: 4 arrays of n float32.
    fwd+bwd: read x, y, z and write dx, dy, dz: 6 arrays. This assumes the best case, a
    single fused pass that recomputes ``a`` instead of storing it, a ones cotangent that
    is never materialised, and a loss that is a register reduction, not an array.
    """
    return {"fwd": 4 * n * 4, "fwdbwd": 6 * n * 4}


# ---------------------------------------------------------------- shared inputs
def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def gelu_inputs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = _rng(1)
    return tuple(r.standard_normal(n, dtype=np.float32) for _ in range(3))


def gelu_batch_inputs(batch: int, features: int, seed: int = 2):
    r = _rng(seed + batch)
    return tuple(r.standard_normal((batch, features), dtype=np.float32) for _ in range(3))


def overhead_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = _rng(3)
    return tuple(r.standard_normal(16, dtype=np.float32) for _ in range(3))


def dynamic_batches(max_batch: int) -> list[int]:
    order = list(range(1, max_batch + 1))
    _rng(4).shuffle(order)
    return order


MLP2_SHAPE = dict(n=64, d_in=1000, hidden=100, d_out=10)
MLP2_LR = 1e-6


def mlp2_data(n: int | None = None) -> dict:
    """The classic example's data: randn inputs, targets and weights (float32); `n`
    overrides the batch size (the compile probe's new batch)."""
    r = _rng(5)
    s = MLP2_SHAPE
    n = s["n"] if n is None else n
    f = np.float32
    return {"x": r.standard_normal((n, s["d_in"]), dtype=f),
            "y": r.standard_normal((n, s["d_out"]), dtype=f),
            "w1": r.standard_normal((s["d_in"], s["hidden"]), dtype=f),
            "w2": r.standard_normal((s["hidden"], s["d_out"]), dtype=f)}


MLP_SIZES = (784, 1024, 1024, 10)
MLP_BATCH = 256
MLP_LR = 1e-3
LN_EPS = 1e-5


def mlp_data() -> dict:
    """Weights in PyTorch's layout (``W`` is out x in, init like nn.Linear) and one batch.

    The same batch is used at every step: the benchmark measures the step, not a data
    pipeline. Keys: x, labels, and per layer i: w{i}, b{i}; per hidden layer: g{i}, be{i}
    (LayerNorm weight and bias).
    """
    r = _rng(6)
    f = np.float32
    d = {"x": r.standard_normal((MLP_BATCH, MLP_SIZES[0]), dtype=f),
         "labels": r.integers(0, MLP_SIZES[-1], MLP_BATCH).astype(np.int64)}
    for i, (fan_in, fan_out) in enumerate(zip(MLP_SIZES[:-1], MLP_SIZES[1:]), start=1):
        bound = 1.0 / np.sqrt(fan_in)
        d[f"w{i}"] = r.uniform(-bound, bound, (fan_out, fan_in)).astype(f)
        d[f"b{i}"] = r.uniform(-bound, bound, fan_out).astype(f)
        if i < len(MLP_SIZES) - 1:
            d[f"g{i}"] = np.ones(fan_out, f)
            d[f"be{i}"] = np.zeros(fan_out, f)
    return d


def mlp_param_names() -> list[str]:
    names = []
    n_layers = len(MLP_SIZES) - 1
    for i in range(1, n_layers + 1):
        names += [f"w{i}", f"b{i}"]
        if i < n_layers:
            names += [f"g{i}", f"be{i}"]
    return names


# ---------------------------------------------------------------- models workload
def model_param(model: str, key: str, shape: tuple) -> np.ndarray:
    """The shared initial value of parameter `key` of model `model` (float32).

    Uniform in +-1/sqrt(fan_in) like PyTorch's default init of Linear/Conv/LSTM weights
    (fan_in: the product of all dims but the first; 1-D parameters use their length), drawn
    from a seed made of the model and parameter names so every system gets the same values
    whatever order it visits the parameters in."""
    seed = zlib.crc32(f"{model}/{key}".encode())
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
    bound = 1.0 / np.sqrt(max(fan_in, 1))
    return _rng(seed).uniform(-bound, bound, shape).astype(np.float32)


def model_batch(model: str, xspec, tspec) -> tuple[np.ndarray, np.ndarray]:
    """The models workload's one batch: float32 inputs or int64 token ids, int64 targets."""
    r = _rng(zlib.crc32(model.encode()))
    shape, kind = xspec
    x = (r.standard_normal(shape, dtype=np.float32) if kind == "float"
         else r.integers(0, kind, shape).astype(np.int64))
    y = r.integers(0, tspec[1], tspec[0]).astype(np.int64)
    return x, y

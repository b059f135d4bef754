"""Differential fuzzing: random programs run eagerly, through the IR interpreter and
compiled must agree (outputs, gradients, nan/inf positions).

A hypothesis strategy draws a small program over the op set -- elementwise chains with
broadcasting, reductions over random dims with random keepdim, reshapes / transposes /
slices, matmuls, and (under ``@script``) conditionals and Python-scalar arguments -- on
random shapes including 0- and 1-sized dims, float32 or float64, with inputs that may be
non-contiguous views (transposed, strided, expanded), repeated (aliased) arguments or
overlapping rows of one buffer, or hold inf/nan. Programs may also write to arguments in
place, return a view of an argument, or return a 0-d loss; `check_side_effects` then
compares the arguments after the call, the version counters of view outputs and the
``.grad`` a scaled ``backward()`` accumulates with eager. The program is Python source (written to a file, so ``@script`` can read
it); a failure shows that source and the captured IR, and hypothesis shrinks it first.

Tolerances (see `differential.assert_same`): float32 rtol 2e-3, atol 2e-4 x scale;
float64 rtol 1e-7, atol 1e-9 x scale, where scale is the largest finite magnitude of the
expected value (random chains amplify the few-ulp differences of the vectorized
transcendentals); nan/+inf/-inf positions and integer values must match exactly.

Runs:

- CI (default): a fixed-seed batch (``derandomize=True``) plus a few fresh examples;
  about a minute, most of it numba compiling kernels (they are cached on disk in a
  session temporary directory).
- Soak: ``python -m pytest -m slow tests/robustness`` runs the long test below
  (``TRACEJIT_FUZZ_EXAMPLES`` examples, default 2000, fresh random programs each run;
  about 12 minutes on 2 cores from a cold kernel cache). Pass ``--hypothesis-seed N``
  to repeat a run.
- ``TRACEJIT_FUZZ_CI_EXAMPLES`` (default 40) scales the fixed-seed batches.
"""
from __future__ import annotations

import itertools
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tracejit as tj
from differential import Mismatch, assert_compiled_matches, assert_same, assert_valid_partition

TOLERANCES = {"float32": (2e-3, 2e-4), "float64": (1e-7, 1e-9)}

UNARY = [
    "tj.tanh({0})", "tj.sigmoid({0})", "tj.exp({0})", "tj.sin({0})", "tj.abs({0})", "tj.relu({0})",
    "({0} * {0})", "tj.log(tj.abs({0}) + 1.0)", "tj.sqrt(tj.abs({0}))", "(-{0})", "tj.erf({0})",
    "{0}.clamp(-1.0, 1.0)", "({0} ** 3)", "({0} * 0.5 + 1.5)", "(2.0 - {0})",
]
BINARY = [
    "({0} + {1})", "({0} - {1})", "({0} * {1})", "({0} / ({1} * {1} + 1.0))", "tj.maximum({0}, {1})",
    "tj.minimum({0}, {1})", "tj.where({0} > {1}, {0}, {1})",
]
REDUCTIONS = ["sum", "mean", "amax", "amin"]
DIMS = [1, 2, 3, 0, 4, 5]  # hypothesis shrinks towards the first entries


@dataclass
class Arg:
    name: str
    kind: str                      # "tensor" | "scalar"
    shape: tuple = ()
    layout: str = "contig"         # contig | transposed | strided | expanded
    special: bool = False          # holds inf / nan / 0
    requires_grad: bool = True
    alias_of: int | None = None    # index of the argument this one repeats
    overlap: bool = False          # with alias_of: leaf[1:] of the other's leaf[:-1] (shares rows)
    value: float = 0.0             # for scalars
    seed: int = 0


@dataclass
class Program:
    mode: str
    dtype: str
    args: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    mutates: bool = False          # writes to an argument in place
    loss: bool = False             # returns one 0-d value: also checked with a scaled .backward()

    def source(self) -> str:
        params = ", ".join(a.name for a in self.args)
        body = "\n".join("    " + ln for ln in self.lines)
        return f"def prog({params}):\n{body}\n    return ({', '.join(self.outputs)},)\n"


class _Gen:
    """Draws one program; `vals` maps value names to (shape) of values computed so far."""

    def __init__(self, draw, mode: str):
        self.draw = draw
        self.mode = mode
        self.vals: dict = {}
        self.tensor_args = 0
        self.counter = itertools.count()
        self.viewed: set = set()   # argument names some view was taken of (no in-place after)
        self.view_root: dict = {}  # view value -> the argument it views

    def fresh(self) -> str:
        return f"v{next(self.counter)}"

    def pick(self, pred=lambda s: True, recent: bool = False):
        names = [n for n, s in self.vals.items() if pred(s)]
        if not names:
            return None
        if recent:  # favour the latest values: longer dependency chains, more fusion
            names = names[-3:]
        return self.draw(st.sampled_from(names))


def _bcast(a, b):
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


@st.composite
def programs(draw, mode: str = "trace"):
    dtype = draw(st.sampled_from(["float32", "float64"]))
    p = Program(mode, dtype)
    g = _Gen(draw, mode)
    rank = draw(st.sampled_from([2, 1, 3, 0]))
    base = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))

    def new_tensor(shape, rg=True):
        name = f"x{len(p.args)}"
        a = Arg(name, "tensor", tuple(shape), seed=draw(st.integers(0, 3)))
        a.requires_grad = rg and draw(st.integers(0, 4)) > 0
        layouts = ["contig", "strided"] + (["transposed"] if len(shape) >= 2 else [])
        if any(d > 1 for d in shape):
            layouts.append("expanded")
        a.layout = draw(st.sampled_from(layouts))
        a.special = draw(st.integers(0, 5)) == 0
        same = [i for i, b in enumerate(p.args) if b.kind == "tensor" and b.shape == a.shape and b.alias_of is None]
        if same and draw(st.integers(0, 3)) == 0:
            a.alias_of = same[0]
            other = p.args[same[0]]
            if other.layout == "contig" and len(shape) >= 1 and draw(st.booleans()):
                # Overlapping rows of one buffer: other = base[:-1], this = base[1:].
                other.layout = "head"
                a.overlap = True
        p.args.append(a)
        g.vals[name] = tuple(shape)
        return name

    n_in = draw(st.integers(1, 3))
    for _ in range(n_in):
        # Each input broadcasts against the base shape: some dims 1, maybe fewer dims.
        keep = draw(st.integers(0, rank)) if rank else 0
        shape = list(base[rank - keep:])
        for j in range(len(shape)):
            if draw(st.integers(0, 3)) == 0:
                shape[j] = 1
        new_tensor(shape)
    scalars = []
    if mode == "script" and draw(st.booleans()):
        name = f"s{len(p.args)}"
        p.args.append(Arg(name, "scalar", value=draw(st.sampled_from([0.5, -1.25, 2.0, 0.0]))))
        scalars.append(name)

    n_ops = draw(st.integers(1, 6))
    for _ in range(n_ops):
        kinds = ["unary", "binary", "binary", "scalar", "reduce", "shape", "matmul", "inplace"]
        if mode == "script":
            kinds += ["cond", "cond"]
        kind = draw(st.sampled_from(kinds))
        out = g.fresh()
        if kind == "inplace":
            # An in-place op on an argument (eager allows it: no grad, writable, no view of
            # it taken yet -- a captured function raises for views used across the write).
            # Only arguments no earlier line read: eagerly an op may have saved the old value
            # for its gradient, and writing it then makes backward() raise (as in PyTorch).
            ok = [a.name for a in p.args if a.kind == "tensor" and _writable(p, a)
                  and not any(n in g.viewed or any(re.search(rf"\b{n}\b", ln) for ln in p.lines)
                              for n in _sharing(p, a))]
            if not ok:
                continue
            x = draw(st.sampled_from(ok))
            # Operands that need no gradient: the written argument stays out of the graph (a
            # compiled function's internal values have no gradients of their own to ask for).
            others = [a.name for a in p.args if a.kind == "tensor" and a.name != x and _writable(p, a)
                      and _bcast(g.vals[a.name], g.vals[x]) == g.vals[x]]
            xa = next(a for a in p.args if a.name == x)
            if xa.overlap or (p.args[xa.alias_of] if xa.alias_of is not None else xa).layout != "contig":
                others = []  # a view of a leaf: eager supports only writes that need no graph
            form = draw(st.sampled_from(["mul", "add", "sub"] if others else ["mul"]))
            if form == "mul":
                p.lines.append(f"{x}.mul_({draw(st.sampled_from([0.5, -2.0, 1.5]))!r})")
            else:
                p.lines.append(f"{x}.{form}_({draw(st.sampled_from(others))})")
            p.mutates = True
            continue
        if kind == "unary":
            v = g.pick(recent=True)
            p.lines.append(f"{out} = {draw(st.sampled_from(UNARY)).format(v)}")
            g.vals[out] = g.vals[v]
        elif kind == "binary":
            u = g.pick(recent=True)
            v = g.pick(lambda s: _bcast(s, g.vals[u]) is not None)
            p.lines.append(f"{out} = {draw(st.sampled_from(BINARY)).format(u, v)}")
            g.vals[out] = _bcast(g.vals[u], g.vals[v])
        elif kind == "scalar":
            v = g.pick(recent=True)
            c = draw(st.sampled_from(scalars)) if scalars and draw(st.booleans()) else \
                repr(draw(st.sampled_from([0.5, -2.0, 3.0, 1e-3])))
            op = draw(st.sampled_from(["{0} * {1}", "{0} + {1}", "{0} - {1} * {0}"]))
            p.lines.append(f"{out} = {op.format(v, c)}")
            g.vals[out] = g.vals[v]
        elif kind == "reduce":
            v = g.pick(lambda s: len(s) >= 1, recent=True)
            if v is None:
                continue
            s = g.vals[v]
            red = draw(st.sampled_from(REDUCTIONS))
            dims = sorted(set(draw(st.lists(st.integers(0, len(s) - 1), min_size=1, max_size=len(s)))))
            if red in ("amax", "amin") and any(s[d] == 0 for d in dims):
                red = "sum"
            keep = draw(st.booleans())
            neg = draw(st.booleans())
            dims_src = tuple(d - len(s) if neg else d for d in dims)
            p.lines.append(f"{out} = {v}.{red}({dims_src!r}, keepdim={keep})")
            g.vals[out] = tuple(1 if d in dims else n for d, n in enumerate(s)) if keep else \
                tuple(n for d, n in enumerate(s) if d not in dims)
        elif kind == "shape":
            v = g.pick(recent=True)
            s = g.vals[v]
            root = g.view_root.get(v, v)
            if any(a.name == root for a in p.args):
                g.viewed.add(root)
                g.view_root[out] = root
            choices = ["reshape_flat", "unsqueeze"]
            if len(s) >= 2:
                choices += ["transpose", "reshape_merge"]
            if len(s) >= 1:
                choices += ["slice_step", "slice_from", "expand"]
            c = draw(st.sampled_from(choices))
            if c == "reshape_flat":
                p.lines.append(f"{out} = {v}.reshape({int(np.prod(s))},)")
                g.vals[out] = (int(np.prod(s)),)
            elif c == "unsqueeze":
                p.lines.append(f"{out} = {v}.unsqueeze(0)")
                g.vals[out] = (1,) + s
            elif c == "transpose":
                i, j = draw(st.sampled_from([(a, b) for a in range(len(s)) for b in range(a + 1, len(s))]))
                p.lines.append(f"{out} = {v}.transpose({i}, {j})")
                t = list(s)
                t[i], t[j] = t[j], t[i]
                g.vals[out] = tuple(t)
            elif c == "reshape_merge":
                new = (s[0] * s[1],) + s[2:]
                p.lines.append(f"{out} = {v}.reshape{new!r}")
                g.vals[out] = new
            elif c == "slice_step":
                p.lines.append(f"{out} = {v}[::2]")
                g.vals[out] = ((s[0] + 1) // 2,) + s[1:]
            elif c == "slice_from":
                p.lines.append(f"{out} = {v}[1:]")
                g.vals[out] = (max(s[0] - 1, 0),) + s[1:]
            else:  # expand a size-1 dim (or add a leading one)
                ones = [d for d, n in enumerate(s) if n == 1]
                new = list(s)
                if ones:
                    new[ones[0]] = 3
                    p.lines.append(f"{out} = {v}.expand{tuple(new)!r}")
                else:
                    new = [2] + new
                    p.lines.append(f"{out} = {v}.expand{tuple(new)!r}")
                g.vals[out] = tuple(new)
        elif kind == "matmul":
            v = g.pick(lambda s: 1 <= len(s) <= 2, recent=True)
            if v is None:
                continue
            s = g.vals[v]
            m = draw(st.sampled_from([2, 1, 3]))
            w = new_tensor((s[-1], m))
            p.lines.append(f"{out} = {v} @ {w}")
            g.vals[out] = s[:-1] + (m,)
        elif kind == "cond":
            pv = g.pick()
            u = g.pick(recent=True)
            red = draw(st.sampled_from(["sum", "amax"])) if 0 not in g.vals[pv] else "sum"
            if red == "amax" and not g.vals[pv]:
                red = "sum"
            thr = draw(st.sampled_from(["0.0", "1.0", "-0.5"]))
            t_expr = draw(st.sampled_from(UNARY)).format(u)
            f_expr = draw(st.sampled_from(UNARY)).format(u)
            p.lines += [f"if {pv}.{red}() > {thr}:", f"    {out} = {t_expr}", "else:", f"    {out} = {f_expr}"]
            g.vals[out] = g.vals[u]
    if draw(st.integers(0, 3)) == 0:
        # A view of an argument returned as is: it must share the argument's version counter.
        x = draw(st.sampled_from([a.name for a in p.args if a.kind == "tensor"]))
        sh = g.vals[x]
        views = [".unsqueeze(0)"] + ([".t()"] if len(sh) == 2 else []) + ([f".reshape({int(np.prod(sh))})"]
                                                                          if len(sh) >= 1 else [])
        if sh and sh[0] >= 2:
            views.append("[1:]")
        out = g.fresh()
        p.lines.append(f"{out} = {x}{draw(st.sampled_from(views))}")
        g.vals[out] = sh  # (shape unused from here on)
        p.outputs = [out, list(g.vals)[-2]]
        return p
    names = list(g.vals)
    if draw(st.integers(0, 3)) == 0:
        # A loss: one 0-d output, differentiated below with a scaled .backward() too.
        out = g.fresh()
        p.lines.append(f"{out} = ({names[-1]} * {names[-1]}).sum()" if draw(st.booleans())
                       else f"{out} = {names[-1]}.sum()")
        p.outputs = [out]
        p.loss = True
        return p
    k = draw(st.integers(1, min(3, len(names))))
    outs = [names[-1]] + draw(st.lists(st.sampled_from(names), max_size=k - 1))
    p.outputs = list(dict.fromkeys(outs)) if draw(st.booleans()) else outs  # sometimes repeated
    return p


def _sharing(p: Program, a: Arg) -> list:
    """Names of the arguments sharing memory with `a` (itself included)."""
    root = a.alias_of if a.alias_of is not None else p.args.index(a)
    return [b.name for i, b in enumerate(p.args) if i == root or b.alias_of == root]


def _writable(p: Program, a: Arg) -> bool:
    """Eager allows an in-place op on argument `a`: it does not require grad (a leaf, or a
    view of one), is not a broadcast (read-only) view, and neither is what it repeats."""
    src = p.args[a.alias_of] if a.alias_of is not None else a
    return not src.requires_grad and src.layout != "expanded"


# --------------------------------------------------------------------------- running

def _function(p: Program, tmpdir: Path):
    src = p.source()
    path = tmpdir / f"fuzz_{abs(hash(src)) % 10**12}.py"
    path.write_text("import tracejit as tj\n\n" + src)
    ns: dict = {"__name__": path.stem}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns["prog"]


def _leaves_and_prep(p: Program):
    dt = np.dtype(p.dtype)
    leaves, makers = [], []
    for a in p.args:
        if a.kind == "scalar":
            leaves.append(a.value)
            makers.append(("leaf", len(leaves) - 1, None))
            continue
        if a.alias_of is not None:
            makers.append(("overlap" if a.overlap else "alias", a.alias_of, None))
            continue
        rng = np.random.default_rng(a.seed * 1000 + len(leaves))
        shape = a.shape
        if a.layout == "transposed":
            base_shape = shape[::-1]
            view = lambda t, r=len(shape): t.permute(*range(r - 1, -1, -1))
        elif a.layout == "strided":
            base_shape = shape[:-1] + (shape[-1] * 2,) if shape else ()
            view = (lambda t: t[..., ::2]) if shape else (lambda t: t)
        elif a.layout == "head":  # rows [:-1] of a buffer another argument reads [1:] of
            base_shape = (shape[0] + 1,) + shape[1:]
            view = lambda t: t[:-1]
        elif a.layout == "expanded":
            d = next(i for i, n in enumerate(shape) if n > 1)
            base_shape = shape[:d] + (1,) + shape[d + 1:]
            view = lambda t, s=shape: t.expand(*s)
        else:
            base_shape, view = shape, (lambda t: t)
        data = rng.standard_normal(base_shape).astype(dt)
        if a.special and data.size:
            flat = data.reshape(-1)
            for k, v in zip(rng.integers(0, flat.size, 3), (np.nan, np.inf, -np.inf)):
                flat[k] = v
        t = tj.tensor(data)
        if a.requires_grad:
            t.requires_grad_()
        leaves.append(t)
        makers.append(("view", len(leaves) - 1, view))

    def prep(*ls):
        args = []
        for kind, i, view in makers:
            if kind == "alias":
                args.append(args[i])
            elif kind == "overlap":
                args.append(args[i]._base[1:] if args[i]._base is not None else args[i])
            elif kind == "leaf":
                args.append(ls[i])
            else:
                args.append(view(ls[i]))
        return tuple(args)
    return leaves, prep


def intended_fp_errors(p: Program):
    """numpy's RuntimeWarnings silenced while a fuzz program runs: its inputs may hold
    inf/nan on purpose, and random arithmetic makes them from finite inputs too
    (``x / (y - y)``). What matters is checked instead: nan/inf positions must match eager's.
    Everywhere else in the suite the warnings are kept (they would point at a real bug)."""
    del p
    return np.errstate(all="ignore")


def check_program(p: Program, tmpdir: Path) -> None:
    src = p.source()
    note(f"program ({p.mode}, {p.dtype}):\n{src}")
    fn = _function(p, tmpdir)
    leaves, prep = _leaves_and_prep(p)
    rtol, atol = TOLERANCES[p.dtype]
    try:
        with intended_fp_errors(p):
            cf = assert_compiled_matches(fn, *leaves, prep=prep, mode=p.mode, rtol=rtol, atol=atol)
            if p.mutates or p.loss or any(a.alias_of is not None for a in p.args) or _returns_arg_view(p):
                check_side_effects(p, fn, cf, rtol, atol)
    except Mismatch as exc:
        raise Mismatch(f"program ({p.mode}, {p.dtype}):\n{src}\n{exc}") from None


def _returns_arg_view(p: Program) -> bool:
    return any(ln.startswith(f"{p.outputs[0]} = x") for ln in p.lines)


def check_side_effects(p: Program, fn, cf, rtol, atol) -> None:
    """What `assert_compiled_matches` does not see: the arguments after the call (in-place
    ops, aliasing), outputs that are views of an argument (they must share its version
    counter, as eager views do), and gradients accumulated into ``.grad`` by a scaled
    ``.backward()`` of a 0-d loss. Runs eagerly and compiled (twice: capture, then the
    cached entry) on fresh copies of the same inputs."""
    runs = []
    for label, f in [("eager", fn), ("compiled (call 1)", cf), ("compiled (call 2)", cf)]:
        leaves, prep = _leaves_and_prep(p)
        args = prep(*leaves)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            outs = f(*args)
            for k, o in enumerate(outs):
                if not isinstance(o, tj.Tensor):
                    continue
                for j, x in enumerate(leaves):
                    if isinstance(x, tj.Tensor) and np.shares_memory(o._data, x._data) and o._vbox is not x._vbox:
                        raise Mismatch(f"{label}: output {k} shares memory with input leaf {j} but not its "
                                       f"version counter (an in-place write through it would go unseen)")
            if p.loss and outs[0].requires_grad:
                (outs[0] * 0.25).backward()
        runs.append((label, leaves))
    (_, expect), *got = runs
    for label, leaves in got:
        for j, (a, e) in enumerate(zip(leaves, expect)):
            if not isinstance(e, tj.Tensor):
                continue
            assert_same(a.detach(), e.detach(), f"{label}: input leaf {j} after the call", rtol, atol)
            if p.loss and (a.grad is None) != (e.grad is None):
                raise Mismatch(f"{label}: leaf {j}.grad is {a.grad}, eager gives {e.grad}")
            if p.loss and e.grad is not None:
                assert_same(a.grad, e.grad, f"{label}: leaf {j}.grad after (loss * 0.25).backward()", rtol, atol)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz-programs")
    sys.path.insert(0, str(d))
    yield d
    sys.path.remove(str(d))


_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)


@settings(max_examples=int(os.environ.get("TRACEJIT_FUZZ_CI_EXAMPLES", 40)), derandomize=True, **_COMMON)
@given(p=programs("trace"))
def test_fuzz_traced_fixed_seed(fuzz_dir, p):
    check_program(p, fuzz_dir)


@settings(max_examples=int(os.environ.get("TRACEJIT_FUZZ_CI_EXAMPLES", 40)) // 2, derandomize=True, **_COMMON)
@given(p=programs("script"))
def test_fuzz_scripted_fixed_seed(fuzz_dir, p):
    check_program(p, fuzz_dir)


@settings(max_examples=6, **_COMMON)
@given(p=st.one_of(programs("trace"), programs("script")))
def test_fuzz_fresh_examples(fuzz_dir, p):
    check_program(p, fuzz_dir)


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("TRACEJIT_FUZZ_EXAMPLES", 2000)), **_COMMON)
@given(p=st.one_of(programs("trace"), programs("script")))
def test_fuzz_soak(fuzz_dir, p):
    check_program(p, fuzz_dir)


@settings(max_examples=int(os.environ.get("TRACEJIT_FUZZ_PARTITION_EXAMPLES", 300)), derandomize=True, **_COMMON)
@given(p=st.one_of(programs("trace"), programs("script")))
def test_fuzz_partition_is_a_valid_schedule(fuzz_dir, p):
    """No numba here: every random program and its backward graph partition into a valid,
    acyclic schedule (cheap, so many more programs than the differential tests)."""
    from tracejit.jit.autodiff import split
    from tracejit.compiler.fusion import partition
    from tracejit.jit.passes import optimize
    note(p.source())
    fn = _function(p, fuzz_dir)
    leaves, prep = _leaves_and_prep(p)
    deco = tj.script if p.mode == "script" else tj.trace
    cf = deco(fn, compiler="interpret")
    with intended_fp_errors(p):
        cf(*prep(*leaves))
    g = cf._entries[-1].opt_graph
    graphs = [g]
    active = [v.aval.dtype.is_floating_point for v in g.inputs]
    if any(active):
        _, bwd, _ = split(g, active)
        graphs.append(optimize(bwd))
    for gr in graphs:
        assert_valid_partition(partition(gr), gr)


def check_program_tiered(p: Program, tmpdir: Path) -> None:
    """Background mode: the first call runs on tier 0 (the interpreter), later calls on the
    kernels the workers compiled; both agree with eager."""
    fn = _function(p, tmpdir)
    leaves, prep = _leaves_and_prep(p)
    rtol, atol = TOLERANCES[p.dtype]
    try:
        with intended_fp_errors(p):
            cf = assert_compiled_matches(fn, *leaves, prep=prep, mode=p.mode, rtol=rtol, atol=atol,
                                         interpreter=False, calls=1, compile="background")
            assert tj.compiler.wait(cf, timeout=180)
            assert_compiled_matches(fn, *leaves, prep=prep, mode=p.mode, rtol=rtol, atol=atol,
                                    interpreter=False, calls=1, compiled=cf)
    except Mismatch as exc:
        raise Mismatch(f"program ({p.mode}, {p.dtype}, background):\n{p.source()}\n{exc}") from None


@settings(max_examples=int(os.environ.get("TRACEJIT_FUZZ_CI_EXAMPLES", 40)) // 8, derandomize=True, **_COMMON)
@given(p=programs("trace"))
def test_fuzz_background_tiers_fixed_seed(fuzz_dir, p):
    check_program_tiered(p, fuzz_dir)

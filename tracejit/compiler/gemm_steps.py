"""A compiled plan's products as schedule nodes: a product with its epilogue, a rewrite of
the plan's items registered in plan_patterns.py (its runtime: cpu/gemm/epilogue.py,
products.py).

Epilogues (`fold_epilogues`, `GemmStep`): a ``matmul`` whose output only an
``act(x @ w + bias + residual)`` group reads becomes one step. It runs where the measured
choice says: on the GEMM template, which applies the epilogue as it stores each tile, or on
BLAS with the group's kernel after it in place; a bias alone on BLAS is a fill and beta=1
(epilogue.matmul_bias: ~0.1 ms against ~0.45 for an add). The backward graph is built
before this pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..jit.ir import Eqn, Var
from ..ops.elementwise import ADD, RELU
from ..ops.linalg import MATMUL
from .fusion import Group

__all__ = ["Product", "GemmStep", "fold_epilogues"]

# TRACEJIT_BIAS_GEMM=0 keeps products and epilogues apart (plan_patterns.py).
_DTYPES = ("float32", "float64")


@dataclass(eq=False)
class Product:
    """``act(x @ w + bias + residual)`` of a plan: the ``matmul`` and, where it has one, the
    epilogue group it replaces (each of bias, residual, act optional)."""
    matmul: Eqn
    epilogue: Optional[Group] = None
    bias: Optional[Var] = None
    residual: Optional[Var] = None
    act: Optional[str] = None

    @property
    def out(self) -> Var:
        return self.epilogue.outputs[0] if self.epilogue is not None else self.matmul.out

    @property
    def operands(self) -> list:
        return [a for a in (*self.matmul.inputs, self.bias, self.residual) if isinstance(a, Var)]


@dataclass(eq=False)
class GemmStep:
    """A product with its epilogue as one step of a plan (`products`: that one product)."""
    products: list

    @property
    def inputs(self) -> list:
        seen: list = []
        for p in self.products:
            seen += [a for a in p.operands if a not in seen]
        return seen

    @property
    def outs(self) -> list:
        return [p.out for p in self.products]

    @property
    def defined(self) -> set:
        return set(self.outs)

    def describe(self) -> str:
        p = self.products[0]
        epi = [n for n, on in (("bias", p.bias), ("residual", p.residual), (p.act, p.act)) if on is not None]
        return "matmul + " + " + ".join(epi) + " (epilogue)"

    def emit(self, plan, nm, atom, consts: dict, input_set) -> list:
        """The plan's lines for this step (plan.py calls it with itself: the BLAS side of an
        epilogue is its ordinary product and group lines)."""
        return _emit_epilogue(self.products[0], plan, nm, atom, consts, input_set)


def _emit_epilogue(p: Product, plan, nm, atom, consts: dict, input_set) -> list:
    from .cpu.gemm import epilogue
    x, w = (nm(a) for a in p.matmul.inputs)
    out = nm(p.out)
    if p.residual is None and p.act is None:   # a bias alone: BLAS's beta=1
        consts["I_matmul_bias"] = epilogue.matmul_bias
        blas = [f"    {out} = I_matmul_bias(xp, {x}, {w}, {nm(p.bias)})"]
    else:
        m = p.matmul.out
        blas = plan._emit_eqn(p.matmul, atom, nm, consts)
        blas += plan._emit_group(p.epilogue, nm, consts, input_set)
        blas.append(f"    del {nm(m)}")
    if not epilogue.may_use_template(p.matmul.inputs[0].aval.shape, p.matmul.inputs[1].aval.shape):
        return blas
    name = f"EPI_{len(consts)}"
    consts[name] = epilogue.template_site(p.act, lambda f, _n=name: consts.__setitem__(_n, f))
    args = ", ".join(nm(a) if a is not None else "None" for a in (p.bias, p.residual))
    return [f"    {out} = {name}({x}, {w}, {args})", f"    if {out} is None:"] + ["    " + s for s in blas]


def _bias_operand(b, m: Var) -> bool:
    """Whether `b` is a bias along `m`'s last dim (n values in a shape (1, ..., n))."""
    if not isinstance(b, Var) or b.aval.dtype != m.aval.dtype:
        return False
    bs, ms = tuple(b.aval.shape), tuple(m.aval.shape)
    return bool(bs) and len(bs) <= len(ms) and bs[-1] == ms[-1] and all(d == 1 for d in bs[:-1])


def _epilogue_of(grp: Group, m: Var) -> Optional[Product]:
    """The epilogue `grp` applies to the product `m`, as a `Product` without its matmul,
    or None: ``act(m + bias + residual)`` exactly, each part optional, in that order."""
    if grp.reduction is None and not grp.rows and grp.window is grp.scatter is None and len(grp.outputs) == 1:
        prev, bias, residual, act = m, None, None, None
        for e in grp.eqns:
            if act is not None:
                return None
            if e.prim is ADD and len(e.inputs) == 2 and e.inputs.count(prev) == 1:
                other = e.inputs[1] if e.inputs[0] is prev else e.inputs[0]
                if other is m or tuple(e.out.aval.shape) != tuple(m.aval.shape):
                    return None
                if bias is None and residual is None and _bias_operand(other, m):
                    bias = other
                elif (residual is None and isinstance(other, Var) and other.aval.dtype == m.aval.dtype
                      and tuple(other.aval.shape) == tuple(m.aval.shape)):
                    residual = other
                else:
                    return None
            elif e.prim is RELU and e.inputs[0] is prev and prev is not m:
                act = "relu"
            else:
                return None
            prev = e.out
        if prev is not m and grp.outputs == [prev]:
            return Product(None, grp, bias, residual, act)
    return None


def fold_epilogues(items: list, graph) -> list:
    """`items` with each product whose output only an epilogue group reads made one
    `GemmStep` at the group's place."""
    readers: dict = {}
    producer: dict = {}
    for it in items:
        ins = it.inputs if isinstance(it, Group) else [a for a in it.inputs if isinstance(a, Var)]
        for a in ins:
            readers.setdefault(a, []).append(it)
        if isinstance(it, Eqn):
            for o in it.outs:
                producer[o] = it
    results = {a for a in graph.outputs if isinstance(a, Var)}
    drop: set = set()
    replace: dict = {}
    for it in items:
        if not isinstance(it, Group):
            continue
        mms = [a for a in it.inputs if a in producer and producer[a].prim is MATMUL]
        if len(mms) != 1:
            continue
        m = mms[0]
        mm = producer[m]
        x, w = mm.inputs
        if (m in results or len(readers.get(m, ())) != 1 or m.aval.dtype.name not in _DTYPES
                or m.aval.device.type != "cpu" or not isinstance(x, Var) or not isinstance(w, Var)
                or len(x.aval.shape) < 2 or len(w.aval.shape) != 2):
            continue
        p = _epilogue_of(it, m)
        if p is None:
            continue
        p.matmul = mm
        drop.add(id(mm))
        replace[id(it)] = GemmStep([p])
    if not replace:
        return items
    return [replace.get(id(it), it) for it in items if id(it) not in drop]

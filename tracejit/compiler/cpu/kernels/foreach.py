"""One kernel launch applying an elementwise form to many tensors: a horizontal group.

An optimizer's update is the same elementwise group over each parameter's p, g and state;
one launch per parameter (or eleven numpy passes) costs more than the work on a model of
many small parameters. `run` traces the form once as a fused group (`loader.one_group`),
lowers it by the one lowering and renders it by the CPU backend as a function over one
chunk (`render`); the module's kernel walks a table of the
tensors' addresses in chunks of at most `CHUNK` elements, claimed from a counter by the
launch's shares (`sharepool.launch`), so every thread count gives the same values. Each
operation runs in the tensors' dtype in the form's order with no fastmath contraction:
bitwise the numpy path that runs the same operations.
"""
from __future__ import annotations

import numpy as np

from ..runtime import sharepool
from .loader import kernel as _kernel, lowered, one_group

__all__ = ["run", "launch_args", "chunks", "CHUNK"]

# Elements per chunk: a few chunks per thread for a large tensor, few rows for the table.
CHUNK = 1 << 16
_WIDTH = 64      # arrays per call of a module's `addresses`
_forms: dict = {}    # (key, dtype name) -> (nest's operand columns, output columns, nest)
_chunk_tables: dict = {}


def _lower(form, name: str, columns: int, scalars: int, dtype: str, writes: tuple):
    """`form` traced over `columns` flat operands and `scalars` 0-d ones of `dtype`, as one
    flat group: (each nest operand's position among the form's operands, the columns each
    nest output is stored into, the nest)."""
    from ... import loopnest
    shapes = [((16,), dtype)] * columns + [((), dtype)] * scalars
    graph, group = one_group(form, shapes, name)
    outs = list(graph.outputs)
    if len(outs) != len(writes) or set(group.outputs) != set(outs):
        raise ValueError(f"{name}: its group must compute each result, and only those")
    positions = [list(graph.inputs).index(v) for v in group.inputs]
    nest = loopnest.lower(group, loopnest.operand_layouts(group), "body")
    if not nest.flat or nest.reduction is not None:
        raise ValueError(f"{name} is not a flat elementwise group")
    return positions, [[c for c, o in zip(writes, outs) if o is v] for v in group.outputs], nest


def render(positions: list, out_columns: list, columns: int, nest):
    """The module (a `codegen_cpu.KernelSpec`): the nest's steps in a loop over one chunk,
    reading and writing each column through one array (an output stored over its input is
    no second pointer that LLVM's runtime alias check would find overlapping, and run the
    loop scalar), and the kernel that walks the chunks. The kernel's arguments: the address
    table, the chunk rows (tensor, start, stop), the scalars, the launch's counter, then the
    share convention's share and shares."""
    from ... import llvmopts
    from ...codegen_cpu import CpuEmitter, KernelSpec, module_head
    from ...emitter import render_steps
    comp, emitters = render_steps(nest, CpuEmitter)
    dt = nest.operands[0].dtype if nest.operands else nest.outputs[0].dtype
    used = sorted({p for p in positions if p < columns}.union(*out_columns))
    scalars = [(op.name, p - columns) for op, p in zip(nest.operands, positions) if p >= columns]
    loads = [f"{op.name} = a{p}[i]" for op, p in zip(nest.operands, positions) if p < columns]
    stores = [f"a{c}[i] = {o.value}" for o, cs in zip(nest.outputs, out_columns) for c in cs]
    params = ", ".join([f"a{c}" for c in used] + [x for x, _ in scalars] + ["k"])
    views = ", ".join([f"carray_at(table[t, {c}] + lo, k, np.{dt})" for c in used]
                      + [x for x, _ in scalars] + ["k"])
    sig = (f"void(Array(int64, 2, 'C', readonly=True), Array(int64, 2, 'C', readonly=True), "
           f"Array({dt}, 1, 'C', readonly=True), int64[::1], int64, int64)")
    options = llvmopts.kernel_options(len(stores), False, arrays=len(used))
    imports = set().union(*(em.imports for em in emitters))
    head = module_head(False, imports, options)
    body = "\n".join("        " + line for line in loads + comp + stores)
    source = "\n".join(head) + f'''
from tracejit.compiler.cpu.runtime.voidptr import carray_at, claim
ITEM = np.dtype(np.{dt}).itemsize


# one chunk: a function of its own (no CPython wrapper: only the kernel calls it), so that
# LLVM vectorizes its loop apart from the chunk loop
@njit(error_model='numpy', no_cpython_wrapper=True)
def chunk({params}):
    """foreach group: {nest.ops}"""
    for i in range(k):
{body}


@njit({sig!r}, nogil=True, cache=CACHE, error_model='numpy')
def kernel(table, chunks, scalars, next_chunk, share, shares):
{"".join(f"    {x} = scalars[{j}]{chr(10)}" for x, j in scalars)}    while True:
        c = claim(next_chunk)
        if c >= chunks.shape[0]:
            return
        t = chunks[c, 0]
        lo = chunks[c, 1] * ITEM
        k = chunks[c, 2] - chunks[c, 1]
        chunk({views})
'''
    return KernelSpec(source, nest, False, "foreach", options)


def _addresses_source(dtype: str) -> str:
    return f'''# tracejit: the addresses of {_WIDTH} arrays into a column of a table (compiler/cpu/kernels/foreach.py)
from numba import njit


# numba reads an array's address as it unboxes it (~0.1 us; numpy's ``ctypes.data``: ~1.4 us)
@njit("void(UniTuple(Array({dtype}, 1, 'C', readonly=True), {_WIDTH}), int64[:, ::1], int64, int64)", cache=CACHE)
def kernel(arrays, table, row, col):
    for i in range(min({_WIDTH}, table.shape[0] - row)):
        table[row + i, col] = arrays[i].ctypes.data
'''


def chunks(sizes: tuple) -> np.ndarray:
    """Rows (tensor, start, stop) covering tensors of `sizes` elements in pieces of at most
    CHUNK (memoized: a model's parameters keep their sizes)."""
    table = _chunk_tables.get(sizes)
    if table is None:
        if len(_chunk_tables) > 64:
            _chunk_tables.clear()
        rows = [(t, lo, min(lo + CHUNK, n)) for t, n in enumerate(sizes) for lo in range(0, n, CHUNK)]
        table = _chunk_tables[sizes] = np.array(rows, np.int64).reshape(-1, 3)
    return table


def run(form, key, columns: list, scalars: tuple, writes: tuple, *, wait: bool = True,
        parallel_min: int = 1 << 62) -> bool:
    """``form`` on every tensor in one launch, in place. `columns`: per operand, one flat
    C-contiguous array per tensor, all of one float dtype, a tensor's arrays of one size
    (the kernel reads them by address: the caller checks); `scalars`: numbers, given to the
    form as 0-d operands of that dtype after the columns; the form's result i is stored
    into column ``writes[i]`` (one value may be two results). `key` names the form (its
    first item) and its variant. Shares over the
    process's threads from `parallel_min` elements. Returns False, changing nothing, while
    the kernel is not loaded and ``wait`` is False (or it cannot be made): the caller runs
    its array path."""
    bound = launch_args(form, key, columns, scalars, writes, wait)
    if bound is None:
        return False
    fn, args, size = bound
    sharepool.launch(fn, args, sharepool.pool_threads() if size >= parallel_min else 1)
    return True


def launch_args(form, key, columns: list, scalars: tuple, writes: tuple, wait: bool = True):
    """(the kernel, its arguments before the share and shares, the elements in all) for
    `run`'s arguments, or None while the kernel is not loaded."""
    dtype = columns[0][0].dtype
    got = lowered(_forms, (key, dtype.name),
                  lambda: _lower(form, str(key[0]), len(columns), len(scalars), dtype.name, writes))
    if got is None:
        return None
    positions, out_columns, nest = got
    k = _kernel(("foreach",) + tuple(map(str, key)) + (dtype.name,),
                lambda: render(positions, out_columns, len(columns), nest))
    put = _kernel(("foreach_addresses", dtype.name), lambda: _addresses_source(dtype.name))
    for kern in (k, put):
        # a kernel the disk cache holds loads in the call (a few ms), as a compiled step's:
        # else a short run's steps take the array path until the loader's thread comes
        if kern.fn is None and (wait or (not kern.failed and kern._on_disk())):
            kern.load_now()
    fn, fill = k.get(), put.get()
    if fn is None or fill is None:
        return None
    count = len(columns[0])
    table = np.empty((count, len(columns)), np.int64)
    for c, arrays in enumerate(columns):
        for row in range(0, count, _WIDTH):
            part = tuple(arrays[row:row + _WIDTH])
            fill(part + part[:1] * (_WIDTH - len(part)), table, row, c)
    sizes = tuple(a.size for a in columns[0])
    return fn, (table, chunks(sizes), np.array(scalars, dtype), np.zeros(1, np.int64)), sum(sizes)

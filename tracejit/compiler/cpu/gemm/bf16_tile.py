"""The bf16 GEMM's micro-kernel: an ``MR`` x ``NV``*16 float32 tile of ``A @ B`` summed over
k-pairs with ``vdpbf16ps`` (avx512_bf16), as LLVM IR compiled by llvmlite for the host CPU.

``vdpbf16ps acc, a, b`` adds, to each float32 lane j, ``a[2j] * b[2j] + a[2j+1] * b[2j+1]``
of the bf16 halves of the 32-bit lanes: twice the multiply-adds of a float32 FMA per
instruction. So B is packed as k-pairs (`bf16_pack`: each 32-bit word holds B[2p, j] in its
low half and B[2p+1, j] in its high half, an odd k padded with a zero row) and A's pair
``(A[i, 2p], A[i, 2p+1])`` is broadcast to every lane.

The kernel ``tile(kc, a, b, c, ldc, mode, w, ldw)`` reads ``kc`` pairs of an A panel packed
``[kc][MR]`` and a B panel packed ``[kc][NV*16]`` (32-bit words) and sums the tile, starting
from what ``c`` (row stride ``ldc`` floats) holds where ``mode & LOAD``, else from zero. It
stores the float32 tile to ``c``, or where ``mode & WORDS`` the bf16 words of the sums,
rounded to nearest even (NaN kept quiet), to ``w`` (row stride ``ldw`` words).
The instruction treats subnormal bf16 inputs as zero and flushes subnormal results; every
other value is the float32 sum of the exact bf16 products, in pair order.

`address` compiles once per process (None where the CPU, numba's target or llvmlite lacks
avx512_bf16); the caller (`bf16_pack`) calls it by address without the GIL.
"""
from __future__ import annotations

import os
import threading

__all__ = ["MR", "NV", "NR", "LOAD", "WORDS", "ir_text", "address", "supported"]

# 8 rows by 2 vectors: 16 accumulators hide the instruction's latency at two per cycle,
# leaving registers for the B vectors and the broadcast.
MR = 8
NV = 2
NR = NV * 16
NAME = "tracejit_bf16_tile"
LOAD = 1
WORDS = 2

_lock = threading.Lock()
_compiled: list = []      # [(engine, address) | None] once tried


def ir_text(mr: int = MR, nv: int = NV) -> str:
    """The kernel's LLVM IR (opaque pointers, bfloat vectors: LLVM 17 and later)."""
    accs = [(i, v) for i in range(mr) for v in range(nv)]
    lines = [
        "declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)",
        "",
        f"define void @{NAME}(i64 %kc, ptr noalias %a, ptr noalias %b, ptr noalias %c, i64 %ldc, i32 %mode, "
        "ptr noalias %w, i64 %ldw) #0 {",
        "entry:",
        f"  %ldbit = and i32 %mode, {LOAD}",
        "  %ld = icmp ne i32 %ldbit, 0",
        f"  %wbit = and i32 %mode, {WORDS}",
        "  %wd = icmp ne i32 %wbit, 0",
    ]
    # initial accumulators: c's tile or zeros
    for i in range(mr):
        lines.append(f"  %row{i} = mul i64 %ldc, {i}")
    lines.append("  br i1 %ld, label %loadc, label %start")
    lines.append("loadc:")
    for i, v in accs:
        lines.append(f"  %co{i}_{v} = add i64 %row{i}, {v * 16}")
        lines.append(f"  %cp{i}_{v} = getelementptr inbounds float, ptr %c, i64 %co{i}_{v}")
        lines.append(f"  %cl{i}_{v} = load <16 x float>, ptr %cp{i}_{v}, align 4")
    lines.append("  br label %start")
    lines.append("start:")
    for i, v in accs:
        lines.append(f"  %init{i}_{v} = phi <16 x float> [ zeroinitializer, %entry ], [ %cl{i}_{v}, %loadc ]")
    lines.append("  %any = icmp sgt i64 %kc, 0")
    lines.append("  br i1 %any, label %loop, label %done")
    lines.append("loop:")
    lines.append("  %p = phi i64 [ 0, %start ], [ %pn, %loop ]")
    for i, v in accs:
        lines.append(f"  %acc{i}_{v} = phi <16 x float> [ %init{i}_{v}, %start ], [ %nx{i}_{v}, %loop ]")
    lines.append(f"  %bo = mul i64 %p, {nv * 16}")
    for v in range(nv):
        lines.append(f"  %bi{v} = add i64 %bo, {v * 16}")
        lines.append(f"  %bp{v} = getelementptr inbounds i32, ptr %b, i64 %bi{v}")
        lines.append(f"  %bw{v} = load <32 x bfloat>, ptr %bp{v}, align 4")
    lines.append(f"  %ao = mul i64 %p, {mr}")
    for i in range(mr):
        lines.append(f"  %ai{i} = add i64 %ao, {i}")
        lines.append(f"  %ap{i} = getelementptr inbounds i32, ptr %a, i64 %ai{i}")
        lines.append(f"  %as{i} = load i32, ptr %ap{i}, align 4")
        lines.append(f"  %ae{i} = insertelement <16 x i32> poison, i32 %as{i}, i64 0")
        lines.append(f"  %av{i} = shufflevector <16 x i32> %ae{i}, <16 x i32> poison, <16 x i32> zeroinitializer")
        lines.append(f"  %aw{i} = bitcast <16 x i32> %av{i} to <32 x bfloat>")
        for v in range(nv):
            lines.append(f"  %nx{i}_{v} = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512("
                         f"<16 x float> %acc{i}_{v}, <32 x bfloat> %aw{i}, <32 x bfloat> %bw{v})")
    lines.append("  %pn = add nuw nsw i64 %p, 1")
    lines.append("  %more = icmp slt i64 %pn, %kc")
    lines.append("  br i1 %more, label %loop, label %done")
    lines.append("done:")
    for i, v in accs:
        lines.append(f"  %fin{i}_{v} = phi <16 x float> [ %init{i}_{v}, %start ], [ %nx{i}_{v}, %loop ]")
    lines.append("  br i1 %wd, label %words, label %floats")
    lines.append("floats:")
    for i, v in accs:
        lines.append(f"  %so{i}_{v} = add i64 %row{i}, {v * 16}")
        lines.append(f"  %sp{i}_{v} = getelementptr inbounds float, ptr %c, i64 %so{i}_{v}")
        lines.append(f"  store <16 x float> %fin{i}_{v}, ptr %sp{i}_{v}, align 4")
    lines.append("  ret void")
    lines.append("words:")
    splat = lambda x: f"<i32 {', i32 '.join([str(x)] * 16)}>"   # noqa: E731
    for i in range(mr):
        lines.append(f"  %wr{i} = mul i64 %ldw, {i}")
    for i, v in accs:
        s = f"{i}_{v}"
        lines += [f"  %u{s} = bitcast <16 x float> %fin{s} to <16 x i32>",
                  f"  %h{s} = lshr <16 x i32> %u{s}, {splat(16)}",
                  f"  %o{s} = and <16 x i32> %h{s}, {splat(1)}",
                  f"  %r{s} = add <16 x i32> %u{s}, {splat(0x7FFF)}",
                  f"  %ro{s} = add <16 x i32> %r{s}, %o{s}",
                  f"  %rs{s} = lshr <16 x i32> %ro{s}, {splat(16)}",
                  f"  %q{s} = or <16 x i32> %h{s}, {splat(0x40)}",
                  f"  %n{s} = fcmp uno <16 x float> %fin{s}, %fin{s}",
                  f"  %sel{s} = select <16 x i1> %n{s}, <16 x i32> %q{s}, <16 x i32> %rs{s}",
                  f"  %t{s} = trunc <16 x i32> %sel{s} to <16 x i16>",
                  f"  %wo{s} = add i64 %wr{i}, {v * 16}",
                  f"  %wp{s} = getelementptr inbounds i16, ptr %w, i64 %wo{s}",
                  f"  store <16 x i16> %t{s}, ptr %wp{s}, align 2"]
    lines.append("  ret void")
    lines.append("}")
    lines.append("")
    lines.append('attributes #0 = { nounwind "target-features"="+avx512f,+avx512bf16,+avx512bw,+avx512vl" }')
    return "\n".join(lines) + "\n"


def supported() -> bool:
    """Whether this process may run the kernel: the CPU has avx512_bf16 and numba targets
    it (``NUMBA_CPU_FEATURES`` without it turns it off)."""
    feats = os.environ.get("NUMBA_CPU_FEATURES", "")
    if feats and "+avx512bf16" not in feats:
        return False
    try:
        import llvmlite.binding as ll
        host = ll.get_host_cpu_features()
        return bool(host.get("avx512bf16", False)) and bool(host.get("avx512f", False))
    except Exception:   # (no llvmlite, or a CPU it cannot describe)
        return False


def address():
    """The compiled kernel's address, or None where it cannot run here (compiled once)."""
    if _compiled:
        got = _compiled[0]
        return None if got is None else got[1]
    with _lock:
        if not _compiled:
            _compiled.append(_compile() if supported() else None)
    got = _compiled[0]
    return None if got is None else got[1]


def _compile():
    try:
        # (llvmlite alone, not numba: this runs while a capture decides its products' dtype,
        # and numba first imported then would key its typing of print by the capture's wrapper)
        import llvmlite.binding as ll
        ll.initialize_native_target()
        ll.initialize_native_asmprinter()
        target = ll.Target.from_default_triple()
        tm = target.create_target_machine(cpu=ll.get_host_cpu_name(), features=ll.get_host_cpu_features().flatten(),
                                          opt=3, codemodel="jitdefault")
        mod = ll.parse_assembly(ir_text())
        mod.triple = target.triple
        mod.verify()
        pto = ll.create_pipeline_tuning_options(speed_level=3)
        pb = ll.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        engine = ll.create_mcjit_compiler(mod, tm)
        engine.finalize_object()
        addr = engine.get_function_address(NAME)
        return (engine, addr) if addr else None
    except Exception:   # (an LLVM without the intrinsic or the bfloat type: the other ways)
        return None

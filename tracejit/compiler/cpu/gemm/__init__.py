"""tracejit.compiler.cpu.gemm."""

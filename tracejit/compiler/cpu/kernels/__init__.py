"""tracejit.compiler.cpu.kernels."""

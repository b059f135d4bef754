"""tracejit.compiler.cpu.runtime."""

"""tracejit.compiler.cpu."""

"""tracejit.compiler: turns traced graphs into generated numba kernels and loads them."""

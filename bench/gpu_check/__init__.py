"""The GPU check: one prepared run that verifies tracejit's CUDA path on a real GPU.

Run it with ``bash tools/gpu_check.sh`` from the repository root (``--dry-run`` on a
machine without a GPU: numba's CUDA simulator, small sizes, the cupy steps skipped).
The shell script runs each step as ``python -m bench.gpu_check run STEP`` under its
own timeout and then ``report``, which writes ``gpu_check.json``. Modules:
``record`` (a step's result file, the mode, clocks), ``machine`` (versions, the
GPU-marked tests), ``kernels`` (GELU bandwidth, launch cost), ``training`` (MLP, CNN,
Transformer steps against PyTorch), ``opdb_cuda`` (the op database on CUDA) and
``report``. docs/guide/cuda.md ("Verifying on a GPU") says what each step reports.
"""

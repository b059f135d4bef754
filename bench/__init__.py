"""Benchmarks: tracejit (eager and compiled) against numpy, PyTorch and JAX, side by side.

Run ``python -m bench`` (see ``bench/README.md``). Modules: ``workloads`` (what is
measured and the shared inputs), ``systems`` (which peers are installed), ``impls/``
(each system's code), ``harness`` (timing, processes), ``worker`` (the child side),
``machine`` (copy bandwidth), ``report`` (table, JSON, chart).
"""

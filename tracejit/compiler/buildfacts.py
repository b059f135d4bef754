"""What besides a kernel's source changes the machine code numba produces: the tracejit,
numba, llvmlite and Python versions and the CPU, as numba's own ``codegen.magic_tuple``.
Part of every disk-cache key and manifest. Read without importing numba when it is not
loaded yet (0.5-1 s that a warm first call must not wait for).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["versions", "numba_facts"]


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Everything besides the source that changes what numba produces, read where numba
    reads it (without importing numba)."""
    import llvmlite
    import llvmlite.binding as ll

    try:
        tracejit_version = str(importlib.import_module("tracejit").__version__)
    except Exception:  # not importable yet, or no __version__
        tracejit_version = "0"
    numba_version, cpu_name, features = numba_facts()
    # Same inputs as numba's own cache key (codegen.magic_tuple).
    return {
        "tracejit": tracejit_version,
        "numba": numba_version,
        "llvmlite": llvmlite.__version__,
        "python": sys.version,
        "cpu": cpu_name or ll.get_host_cpu_name(),
        "cpu_features": features if features is not None else ll.get_host_cpu_features().flatten(),
        "triple": ll.get_process_triple(),
    }


_NUMBA_VERSION_RE = re.compile(r'"version":\s*"([^"]+)"')


def numba_facts() -> tuple[str, Any, Any]:
    """(numba.__version__, numba.config.CPU_NAME, numba.config.CPU_FEATURES); without numba
    loaded, from numba/_version.py and the environment. A ``.numba_config.yaml`` in the
    working directory, or anything unexpected, falls back to importing numba."""
    if "numba" not in sys.modules and not os.path.exists(".numba_config.yaml"):
        with contextlib.suppress(Exception):   # an unusual install: ask numba itself
            spec = importlib.util.find_spec("numba")
            text = Path(spec.origin).with_name("_version.py").read_text(encoding="utf-8")
            version = _NUMBA_VERSION_RE.search(text).group(1)
            cpu_name = os.environ.get("NUMBA_CPU_NAME")
            features = os.environ.get("NUMBA_CPU_FEATURES")
            if features is None and str(cpu_name).lower() == "generic":
                features = ""
            return version, cpu_name, features
    import numba

    return numba.__version__, numba.config.CPU_NAME, numba.config.CPU_FEATURES

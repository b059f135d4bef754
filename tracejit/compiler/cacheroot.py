"""Where the disk cache lives and whether it can be used, with `os` alone: a first call in
background mode must know whether there is a usable cache without paying diskcache.py's
imports (15-30 ms). ``TRACEJIT_CACHE=0`` turns the cache off, ``TRACEJIT_CACHE_DIR`` sets
its root, else ``$XDG_CACHE_HOME/tracejit`` (absolute only) or ``~/.cache/tracejit``.
"""
from __future__ import annotations

import logging
import os
import stat
from typing import Optional

from .. import envflags

__all__ = ["configured", "root", "warn_once"]

log = logging.getLogger("tracejit")
_warned: set = set()   # (kind, root) warned about once per process (diskcache's clear resets it)


def configured() -> Optional[str]:
    """The configured root (not created, not checked), or None when the cache is off."""
    if envflags.is_off("TRACEJIT_CACHE"):
        return None
    if envflags.value("TRACEJIT_CACHE_DIR"):
        return os.path.expanduser(envflags.value("TRACEJIT_CACHE_DIR"))
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tracejit")


def root() -> Optional[str]:
    """The disk cache root, created if needed (mode 0o700); None when it is off or unusable:
    it cannot be created, another user owns it, or group/others may use it (a directory
    others can write into could hand us pickles). Each refusal warns once."""
    path = configured()
    if path is None:
        return None
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        warn_once("unusable", path, "tracejit disk cache disabled: cannot create %s (%s)", path, exc)
        return None
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        warn_once("owner", path, "tracejit disk cache disabled: %s is owned by uid %d, not us",
                   path, st.st_uid)
        return None
    if st.st_mode & 0o077:
        warn_once("mode", path, "tracejit disk cache disabled: %s has group/other permissions "
                   "(mode %o); expected 0o700", path, stat.S_IMODE(st.st_mode))
        return None
    return path


def warn_once(kind: str, where, msg: str, *args) -> None:
    """Log warning `msg` once per process for (`kind`, `where`): a cache path's problem."""
    where = str(where)
    if (kind, where) not in _warned:
        _warned.add((kind, where))
        log.warning(msg, *args)

"""``torch.hub`` without a network: checkpoints from local paths and the hub cache.

tracejit downloads nothing. `load_state_dict_from_url` loads a local path (or a
``file://`` URL), or the file of that name already in the hub cache (PyTorch's own cache,
``$TORCH_HOME/hub/checkpoints``, so weights PyTorch fetched before load as they are);
otherwise it raises an OSError naming the URL and the path to put the file at. `load`
runs a local directory's ``hubconf.py`` entry point (``source="local"``).
"""
from __future__ import annotations

import builtins
import importlib.util
import os
import sys
from typing import Any, Optional
from urllib.error import URLError
from urllib.parse import unquote, urlparse

__all__ = ["download_url_to_file", "get_dir", "help", "list", "load", "load_state_dict_from_url", "set_dir"]

_hub_dir: Optional[str] = None


def get_dir() -> str:
    """The hub cache folder: `set_dir`'s, else ``$TORCH_HOME/hub``, else ``~/.cache/torch/hub``."""
    if _hub_dir is not None:
        return _hub_dir
    home = os.environ.get("TORCH_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torch")
    return os.path.join(os.path.expanduser(home), "hub")


def set_dir(d) -> None:
    global _hub_dir
    _hub_dir = os.path.expanduser(os.fspath(d))


def _offline(fn: str, url: str, hint: str):
    return URLError(f"{fn}: tracejit cannot download {url!r} (it has no network access); {hint}")


def download_url_to_file(url: str, dst: str, hash_prefix: Optional[str] = None, progress: bool = True) -> None:
    raise _offline("download_url_to_file", url, f"put the file at {dst!r}")


def load_state_dict_from_url(url: str, model_dir: Optional[str] = None, map_location=None, progress: bool = True,
                             check_hash: bool = False, file_name: Optional[str] = None,
                             weights_only: bool = False) -> Any:
    """The object saved at `url`: a local path or ``file://`` URL, or the cached file of
    the URL's name in `model_dir` (default ``get_dir()/checkpoints``)."""
    from .serialization import load
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme == "file" else url
        if not os.path.isfile(path):
            raise FileNotFoundError(f"load_state_dict_from_url: no file at {path!r}")
    else:
        model_dir = os.fspath(model_dir) if model_dir is not None else os.path.join(get_dir(), "checkpoints")
        path = os.path.join(model_dir, file_name or os.path.basename(parsed.path))
        if not os.path.isfile(path):
            raise _offline("load_state_dict_from_url", url, f"put the file at {path!r} or pass a local file path")
    return load(path, map_location=map_location, weights_only=weights_only)


def _hubconf(repo_or_dir: str, source: str, fn: str):
    if source not in ("github", "gitlab", "local"):
        raise ValueError(f'{fn}: unknown source "{source}"; allowed values: "github" | "gitlab" | "local"')
    if source != "local":
        raise _offline(fn, f"{source}:{repo_or_dir}", "clone it and pass its folder with source='local'")
    path = os.path.join(os.fspath(repo_or_dir), "hubconf.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{fn}: no hubconf.py in {repo_or_dir!r}")
    spec = importlib.util.spec_from_file_location("hubconf", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))   # hubconf imports its repository's modules
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(os.path.dirname(path))
    return module


def _entry(module, model: str, fn: str):
    entry = getattr(module, model, None)
    if not callable(entry) or model.startswith("_"):
        raise RuntimeError(f"{fn}: cannot find callable {model} in hubconf")
    return entry


def list(repo_or_dir: str, force_reload: bool = False, skip_validation: bool = False, trust_repo=None,  # noqa: A001
         verbose: bool = True, source: str = "github") -> builtins.list:
    module = _hubconf(repo_or_dir, source, "hub.list")
    return [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")]


def help(repo_or_dir: str, model: str, force_reload: bool = False, skip_validation: bool = False,  # noqa: A001
         trust_repo=None, source: str = "github") -> Optional[str]:
    return _entry(_hubconf(repo_or_dir, source, "hub.help"), model, "hub.help").__doc__


def load(repo_or_dir: str, model: str, *args, source: str = "github", trust_repo=None, force_reload: bool = False,
         verbose: bool = True, skip_validation: bool = False, **kwargs) -> Any:
    """``model(*args, **kwargs)`` from the ``hubconf.py`` of local folder `repo_or_dir`
    (``source="local"``); a GitHub repository raises an OSError naming it (no network)."""
    return _entry(_hubconf(repo_or_dir, source, "hub.load"), model, "hub.load")(*args, **kwargs)

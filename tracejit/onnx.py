"""``tracejit.onnx``: importable so programs that mention it load; export is not supported.

``tracejit.onnx.export(...)`` raises `NotImplementedError` when called (never on import):
tracejit has no ONNX writer. To hand a model to other tools, save its weights with
numpy arrays (``{k: v.numpy() for k, v in model.state_dict().items()}``), load them into
the same model written with PyTorch and export with ``torch.onnx.export``.
"""
from __future__ import annotations

__all__ = ["export", "is_in_onnx_export"]


def export(*args, **kwargs):
    raise NotImplementedError(
        "tracejit.onnx.export is not supported: tracejit has no ONNX exporter. Take the weights "
        "out as numpy arrays ({k: v.numpy() for k, v in model.state_dict().items()}), load them "
        "into the same model written with PyTorch and export with torch.onnx.export.")


def is_in_onnx_export() -> bool:
    """False: no export is ever running."""
    return False

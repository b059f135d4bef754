"""``torch.autograd.anomaly_mode``'s path: ``detect_anomaly`` and ``set_detect_anomaly``."""
from .checks import detect_anomaly, set_detect_anomaly

__all__ = ["detect_anomaly", "set_detect_anomaly"]

"""``torch.Generator`` and ``torch.default_generator``: random-number streams as objects.

A `Generator` owns a numpy PCG64 stream of its own; ops given ``generator=`` draw from it
and leave the global stream alone, as PyTorch's do. ``default_generator`` is the global
stream itself (the one ``tracejit.manual_seed`` seeds and ops draw from by default).
States (``get_state``, ``tracejit.get_rng_state``) are uint8 tensors, as PyTorch's are:
PCG64's 128-bit state and increment and its buffered 32-bit half, little-endian, padded
with zeros to the 5056 bytes of PyTorch's CPU generator state.
"""
from __future__ import annotations

import numpy as np

from .device import as_device

__all__ = ["Generator", "default_generator", "seed_value", "pack_state", "unpack_state"]

_STATE_BYTES = 5056   # PyTorch's size; ours: state (16) + inc (16) + has_uint32 (4) + uinteger (4)


def seed_value(seed, op: str = "manual_seed") -> int:
    """`seed` as PyTorch takes it: any int in [-2**63, 2**64), negatives wrapped modulo 2**64."""
    if isinstance(seed, bool) or not isinstance(seed, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: expected an int seed, got {type(seed).__name__}")
    s = int(seed)
    if not -2 ** 63 <= s < 2 ** 64:
        raise RuntimeError(f"{op}: seed {s} is out of range [-2**63, 2**64)")
    return s % 2 ** 64


def pack_state(rng: np.random.Generator):
    """`rng`'s PCG64 state as a uint8 tensor of PyTorch's state size."""
    from .ops.creation import tensor
    st = rng.bit_generator.state
    raw = (st["state"]["state"].to_bytes(16, "little") + st["state"]["inc"].to_bytes(16, "little")
           + int(st["has_uint32"]).to_bytes(4, "little") + int(st["uinteger"]).to_bytes(4, "little"))
    return tensor(np.frombuffer(raw.ljust(_STATE_BYTES, b"\0"), dtype=np.uint8).copy())


def unpack_state(state, op: str = "set_rng_state") -> dict:
    """The PCG64 state dict that `pack_state` wrote `state` from (a dict passes through)."""
    from .tensor import Tensor
    if isinstance(state, dict):
        return state
    if not isinstance(state, Tensor) or state.dtype.np != np.uint8 or tuple(state.shape) != (_STATE_BYTES,):
        desc = (f"a {state.dtype} tensor of shape {tuple(state.shape)}" if isinstance(state, Tensor)
                else type(state).__name__)
        raise TypeError(f"{op}: expected the uint8 tensor of {_STATE_BYTES} bytes that get_rng_state "
                        f"returns, got {desc}")
    raw = state.numpy().tobytes()
    return {"bit_generator": "PCG64",
            "state": {"state": int.from_bytes(raw[:16], "little"), "inc": int.from_bytes(raw[16:32], "little")},
            "has_uint32": int.from_bytes(raw[32:36], "little"), "uinteger": int.from_bytes(raw[36:40], "little")}


class Generator:
    """A random number generator object (``torch.Generator``): its own seed and stream, for
    code that passes ``generator=`` around. Seeding it leaves the global stream alone."""

    def __init__(self, device="cpu"):
        self.device = as_device(device)
        self._seed = 67280421310721
        self._rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed) -> "Generator":
        self._seed = seed_value(seed, "Generator.manual_seed")
        self._rng = np.random.default_rng(self._seed)
        return self

    def seed(self) -> int:
        s = int(np.random.SeedSequence().entropy % (2 ** 63))
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        return pack_state(self._rng)

    def set_state(self, state) -> "Generator":
        self._rng.bit_generator.state = unpack_state(state, "Generator.set_state")
        return self


class _DefaultGenerator(Generator):
    """The global stream as a `Generator` (``torch.default_generator``)."""

    def __init__(self):
        self.device = as_device("cpu")

    @property
    def _rng(self) -> np.random.Generator:
        from .ops import random as _random
        return _random._gen

    @property
    def _seed(self) -> int:
        from .ops import random as _random
        return _random._cuda_seed[0]

    def manual_seed(self, seed) -> "Generator":
        from .ops import random as _random
        _random.manual_seed(seed)
        return self

    def set_state(self, state) -> "Generator":
        from .ops import random as _random
        _random.set_rng_state(state)
        return self

    def __reduce__(self):
        return (_default, ())


def _default() -> Generator:
    return default_generator


default_generator = _DefaultGenerator()

"""PyTorch eager and ``torch.compile`` (inductor, CPU, default mode: automatic dynamic).

Compilations are counted with dynamo's ``unique_graphs`` counter; the counters are
process-wide, which is exact in the fresh processes the compile probes run in.
"""
from __future__ import annotations

import numpy as np
import torch

from . import models, torchlike
from .base import Runner


class TorchRunner(Runner):
    def versions(self) -> dict:
        return {"torch": torch.__version__, "threads": torch.get_num_threads()}

    def asarray(self, a, requires_grad=False):
        return torch.from_numpy(np.array(a)).requires_grad_(requires_grad)

    def tonumpy(self, t):
        return t.detach().numpy()

    def gelu_fn(self):
        return torchlike.gelu_chain(torch)

    def overhead_fn(self):
        return torchlike.overhead_fn(torch)

    def compile(self, fn):
        return torch.compile(fn) if self.compiled else fn

    def compile_count(self, compiled_fn) -> int:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])

    def activity(self) -> dict:
        # torch.compile's graphs compiled so far (a recompile inside a timed run shows)
        return {"compiles": self.compile_count(None)} if self.compiled else {}

    def cache_env(self, cache_dir):
        return {"TORCHINDUCTOR_CACHE_DIR": cache_dir}

    def mlp2_step(self, data, other=None):
        return torchlike.mlp2_step(torch, self.compile, data, self.asarray, other)

    def mlp_step(self, data, autocast=None):
        return torchlike.mlp_step(torch, self.compile, data, self.asarray,
                                  lambda a: torch.from_numpy(np.array(a)), autocast)

    def model_step(self, name, autocast=None):
        return models.model_step(torch, self.compile, name, autocast)

    def autocast(self):
        """CPU autocast to bfloat16: the context factory the amp workload's steps run under."""
        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)


def make(system):
    return TorchRunner(system)

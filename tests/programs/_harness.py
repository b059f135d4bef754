"""What a program here gets from the runner (`_runner.py`): ``sync(*modules)`` makes the
modules' weights the ones PyTorch's run drew (the PyTorch run saves them, the tracejit
run loads them by state_dict name), and ``comp(model, **options)`` is ``torch.compile``
(of a module or a function, with torch.compile's keyword arguments) in the compiled run
and the model itself otherwise (what it made is kept in ``STATE["compiled"]``, for the
runner to read their compile counts)."""
from __future__ import annotations

import os

import numpy as np

STATE = {"framework": "torch", "compile": False, "store": "", "count": 0, "compiled": []}


def sync(*modules) -> None:
    import torch
    for m in modules:
        STATE["count"] += 1
        key = f"m{STATE['count']}_"
        path = STATE["store"]
        if not path:   # a program run on its own, outside the runner: nothing to share
            continue
        if STATE["framework"] == "torch":
            old = dict(np.load(path)) if os.path.exists(path) and STATE["count"] > 1 else {}
            old.update({key + k: v.detach().numpy() for k, v in m.state_dict().items()})
            np.savez(path, **old)
        else:
            z = np.load(path)
            m.load_state_dict({k[len(key):]: torch.from_numpy(z[k].copy()) for k in z.files
                               if k.startswith(key)})


def comp(model, **options):
    import torch
    if not STATE["compile"]:
        return model
    STATE["compiled"].append(torch.compile(model, **options))
    return STATE["compiled"][-1]

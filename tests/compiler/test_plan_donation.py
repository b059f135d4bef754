"""`_donated` (compiler/plan.py): a plan hands an op that donates its input (ops/donation.py)
the input's own array only when nothing else holds that array at run time."""
from __future__ import annotations

import numpy as np

from tracejit.compiler import plan as plan_mod


def test_donated_takes_only_an_array_nothing_else_holds():
    def sole():
        a = np.ones((4, 5))
        return plan_mod._donated(a) is a
    assert sole()
    a = np.ones((4, 5))
    keep = a.T                                      # a live view holds a (its .base)
    assert plan_mod._donated(a) is None
    del keep
    other = a                                       # a second name
    assert plan_mod._donated(a) is None
    del other
    view = np.ones((4, 5))[1:]                      # not its own data
    assert plan_mod._donated(view) is None
    f_order = np.asfortranarray(np.ones((4, 5)))    # output is written in C order
    assert plan_mod._donated(f_order) is None
    ro = np.ones((4, 5))
    ro.flags.writeable = False
    assert plan_mod._donated(ro) is None

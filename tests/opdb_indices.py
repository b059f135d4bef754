"""Op records for negative indices where PyTorch takes them (each record's first sample is
the one the compiled-path test runs): advanced indexing and assignment count -1 from the
end; embedding takes a negative padding_idx. The ops that refuse negative indices
(embedding's, index_select's, one_hot's and the losses' targets) are rows of the bad-input
matrix (tests/robustness/test_bad_inputs.py), on every path."""
from __future__ import annotations

import numpy as np

from opdb import (NUMERIC, Sample, _S, _embedding, _embedding_ref, _getitem, _getitem_ref, _setitem,
                  _setitem_ref, arr, idx, register)


def _neg(*values):
    return np.array(values, np.int64)


register("getitem.negative", _getitem, _getitem_ref,
         lambda d, r: [Sample((arr(r, (4, 5, 3), d), _neg(-1, 0, -4, -1)), {"index": "I0"}, desc="rows"),
                       Sample((arr(r, (4, 5, 3), d), _neg(-5, 2), _neg(-1, -3)), {"index": (_S(None), "I0", "I1")},
                              desc="two arrays, dims 1 and 2")],
         dtypes=NUMERIC)
register("setitem.negative", _setitem, _setitem_ref,
         lambda d, r: [Sample((arr(r, (4, 3), d), arr(r, (2, 3), d), _neg(-1, -4)), {"index": "I0"}, desc="rows"),
                       Sample((arr(r, (4, 3), d), arr(r, (2,), d), _neg(-2, 0), _neg(-1, -3)),
                              {"index": ("I0", "I1")}, desc="points")],
         dtypes=NUMERIC)
register("embedding.negative_padding_idx", _embedding, _embedding_ref,
         lambda d, r: [Sample((_neg(2, 4, 0, 4), arr(r, (5, 3), d)), {"padding_idx": -1}, check_fd=False,
                              desc="padding_idx -1: row 4 gets no gradient"),
                       Sample((idx(r, (2, 3), 4), arr(r, (4, 2), d)), {"padding_idx": -3}, check_fd=False,
                              desc="padding_idx -3")])

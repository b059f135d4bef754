"""The CPU backend's implementation table: every hand-written kernel, behind one door.

Each row registers an implementation and its checker (ops/impls.py) for a primitive;
eager and compiled calls run the first whose checker accepts and which returns a result,
else the numpy form. An implementation returns None while its kernel is not loaded.
Large eager elementwise calls of every primitive with a scalar rule share one row
(kernels/vectorized.py). Importing it loads no numba.
"""
from __future__ import annotations

import math

import numpy as np

from ... import bf16 as _bf16, dtypes as _dt
from ...ops import impls
from ...ops.attention_prim import ATTENTION_BACKWARD, ATTENTION_CONTEXT, ATTENTION_WEIGHTS
from ...ops.batchnorm_prim import BATCH_NORM_FORWARD, BN_BACKWARD
from ...ops.channel_affine_prim import CHANNEL_AFFINE, CHANNEL_AFFINE_BACKWARD
from ...ops.conv_gemm import CONV2D_GEMM, CONV2D_WGRAD, CONV2D_XGRAD, as_2d, as_2d_call
from ...ops.depthwise import DEPTHWISE_CONV2D, DEPTHWISE_WGRAD, DEPTHWISE_XGRAD
from ...ops.elementwise_logic import CAST
from ...ops.embedding_bag import EMBEDDING_BAG, EMBEDDING_BAG_BACKWARD
from ...ops.gather_prim import SCATTER_ADD
from ...ops.reductions import AMAX, AMIN, ARGMAX, ARGMIN, CUMSUM, PROD, SUM
from ...ops.tensorfns import ARGSORT, CUMPROD
from ...ops.cross_entropy_prim import CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD
from ...ops.gru_prim import GRU_LAYER, GRU_LAYER_BACKWARD
from ...ops.indexing import INDEX_ADD
from ...ops.layer_norm_prim import LAYER_NORM, LAYER_NORM_BACKWARD
from ...ops.logsumexp_prim import LOGSUMEXP
from ...ops.linalg import MATMUL, MATMUL_NT, MATMUL_TN
from ...ops.lstm_prim import LSTM_LAYER, LSTM_LAYER_BACKWARD
from ...ops.pool_offsets import MAX_POOL2D_SCATTER, MAX_POOL2D_WITH_OFFSETS
from ...ops.pooling_prim import AVG_POOL2D, AVG_POOL2D_BACKWARD, MAX_POOL2D
from ...ops.shape import COPY
from ...ops.rnn_prim import RNN_LAYER, RNN_LAYER_BACKWARD
from ...ops.sampling import GRID_SAMPLE, GRID_SAMPLE_BACKWARD
from ...ops.softmax_prim import SOFTMAX, SOFTMAX_BACKWARD
from ...ops.log_softmax_prim import LOG_SOFTMAX, LOG_SOFTMAX_BACKWARD
from . import bf16_casts
from .gemm import bf16 as bf16_gemm, products
from .kernels import (attention_kernels as attention, batchnorm_rows, channel_affine, channel_forms,
                      conv_blocks, depthwise_kernels as depthwise, lane_forms as lanes,
                      recurrent_layers as recurrent, reduce_rows, row_forms, sampling_kernels as sampling,
                      scan_rows, scatter_forms as index, transpose_copy, vectorized, window_forms as windows)
from .kernels.loader import floats

__all__ = ["TABLE"]


def _extreme_below(prim):
    """ARGMAX's or ARGMIN's plan call: the numpy form (the record's ``fast`` call where it
    has one) for a signature `row_forms.argmax` declines by its shape alone (under
    SELECT_MIN elements, over all dims, rows longer than its one scan), whose calls each paid
    the table's declining (a (16, 512) argmax: ~1.5 us of ~5)."""
    def call(shapes, dtype, params):
        shape, dim = shapes[0], params.get("dim")
        if len(shapes) != 1 or shape is None or (
                dim is not None and math.prod(shape) >= row_forms.SELECT_MIN
                and shape[dim] <= row_forms.one_scan()):
            return None
        fast = prim.fast
        return (fast is not None and fast(shapes, dtype, params)) or impls.numpy_form(prim, params)
    return call


def _cast_call(shapes, dtype, params):
    """The plan call of a cast: the numpy form itself unless `bf16_casts.converts` may take it."""
    if params["dtype"] is _dt.bfloat16 or np.dtype(dtype) == _bf16.STORAGE:
        return None
    return impls.numpy_form(CAST, params)


# (primitive, implementation, checker, plan call for a signature): in the order tried
TABLE = (
    # float32 <-> bf16 words: one vectorized pass over the free cores
    (CAST, bf16_casts.cast, bf16_casts.converts, _cast_call),
    # bf16 products: MKL's bf16 GEMM where the CPU has bf16 units, else widened sgemm
    (MATMUL, bf16_gemm.matmul, bf16_gemm.takes, None),
    (MATMUL_NT, bf16_gemm.matmul_nt, bf16_gemm.takes, None),
    (MATMUL_TN, bf16_gemm.matmul_tn, bf16_gemm.takes, None),
    # products: BLAS's threads by the free cores, hand kernels for the shapes BLAS runs slowly
    (MATMUL, products.matmul, bf16_gemm.not_words, products.matmul_call),
    (MATMUL_NT, products.matmul_nt, bf16_gemm.not_words, products.nt_call),
    (MATMUL_TN, products.matmul_tn, bf16_gemm.not_words, products.tn_call),
    # rows: one read and one write of each row
    (SOFTMAX, row_forms.softmax, row_forms.on_last_dim, row_forms.softmax_call),
    (SOFTMAX_BACKWARD, row_forms.softmax_backward, row_forms.on_last_dim, row_forms.softmax_backward_call),
    (LOG_SOFTMAX, row_forms.log_softmax, row_forms.on_last_dim, row_forms.log_softmax_call),
    (LOG_SOFTMAX_BACKWARD, row_forms.log_softmax_backward, row_forms.on_last_dim,
     row_forms.log_softmax_backward_call),
    # over a dim before the last: the same rows forms in lanes, in place
    (SOFTMAX, lanes.softmax, lanes.off_last_dim, None),
    (SOFTMAX_BACKWARD, lanes.softmax_backward, lanes.off_last_dim, None),
    (LOG_SOFTMAX, lanes.log_softmax, lanes.off_last_dim, None),
    (LOG_SOFTMAX_BACKWARD, lanes.log_softmax_backward, lanes.off_last_dim, None),
    (LAYER_NORM, row_forms.layer_norm, None, row_forms.layer_norm_call),
    (LOGSUMEXP, row_forms.logsumexp, None, row_forms.logsumexp_call),
    (LAYER_NORM_BACKWARD, row_forms.layer_norm_backward, None, None),
    (CROSS_ENTROPY, row_forms.cross_entropy, None, row_forms.cross_entropy_call),
    (CROSS_ENTROPY_BACKWARD, row_forms.cross_entropy_backward, None, row_forms.cross_entropy_backward_call),
    (ATTENTION_WEIGHTS, attention.weights, None, None),
    (ATTENTION_CONTEXT, attention.context, None, None),
    (ATTENTION_BACKWARD, attention.backward, None, None),
    # windows (rendered as a compiled program's windows group)
    (MAX_POOL2D, windows.max_pool2d, floats(1), None),
    (MAX_POOL2D_WITH_OFFSETS, windows.forward_offsets, floats(1), None),
    (MAX_POOL2D_SCATTER, windows.scatter, floats(2), None),
    (AVG_POOL2D, windows.avg_pool2d, floats(1), None),
    (AVG_POOL2D_BACKWARD, windows.avg_pool2d_backward, floats(1), None),
    # convolutions by blocks of images whose columns stay in cache (1-d ones as height-1 2-d)
    (CONV2D_GEMM, as_2d(conv_blocks.forward), floats(2), as_2d_call(conv_blocks.forward_call)),
    (CONV2D_WGRAD, as_2d(conv_blocks.wgrad), floats(2), as_2d_call(conv_blocks.wgrad_call)),
    (CONV2D_XGRAD, as_2d(conv_blocks.xgrad), floats(2), as_2d_call(conv_blocks.xgrad_call)),
    # depthwise convolutions: a loop over the (image, channel) planes, the input read in place
    (DEPTHWISE_CONV2D, as_2d(depthwise.forward), depthwise.operands, None),
    (DEPTHWISE_WGRAD, as_2d(depthwise.wgrad), depthwise.operands, None),
    (DEPTHWISE_XGRAD, as_2d(depthwise.xgrad), depthwise.operands, None),
    # BatchNorm's one-pass records: (N, C) input by rows, else their channel forms' kernels
    # (a compiled step's channel group)
    (BN_BACKWARD, batchnorm_rows.backward, floats(2), None),
    (BATCH_NORM_FORWARD, batchnorm_rows.forward, floats(1), None),
    (BN_BACKWARD, channel_forms.backward, floats(2), None),
    (BATCH_NORM_FORWARD, channel_forms.forward, floats(1), None),
    # the per-channel affine of group and instance norm: one pass over each channel's runs
    (CHANNEL_AFFINE, channel_affine.forward, floats(1), None),
    (CHANNEL_AFFINE_BACKWARD, channel_affine.backward, floats(1), None),
    # sampling at points: one loop over the points, each point's corners found once
    (GRID_SAMPLE, sampling.forward, floats(2), None),
    (GRID_SAMPLE_BACKWARD, sampling.backward, floats(3), None),
    # copies of transposed matrices: tile by tile, each transposed in registers
    (COPY, transpose_copy.copy, transpose_copy.takes, transpose_copy.specialize),
    # row updates
    (INDEX_ADD, index.index_add, None, None),
    (SCATTER_ADD, index.scatter_add, None, None),
    (EMBEDDING_BAG, index.embedding_bag, index.sums_bags, None),
    (EMBEDDING_BAG_BACKWARD, index.embedding_bag_backward, index.sums_bags, None),
    # sums and extrema over the last dims: a rows group of the reduction alone
    (SUM, reduce_rows.reduce_last(SUM), reduce_rows.takes, reduce_rows.specialize(SUM)),
    (AMAX, reduce_rows.reduce_last(AMAX), reduce_rows.takes, reduce_rows.specialize(AMAX)),
    (AMIN, reduce_rows.reduce_last(AMIN), reduce_rows.takes, reduce_rows.specialize(AMIN)),
    # products over the last dims and scans along the last dim: each row walked once, in order
    (PROD, scan_rows.prod, scan_rows.takes_prod, scan_rows.specialize_prod),
    (CUMSUM, scan_rows.cumsum, scan_rows.takes_scan, scan_rows.specialize_scan(CUMSUM)),
    (CUMPROD, scan_rows.cumprod, scan_rows.takes_scan, scan_rows.specialize_scan(CUMPROD)),
    # selections along a dim: one pass a row (topk's best k by insertion, an extremum)
    (ARGSORT, row_forms.topk_indices, None, row_forms.topk_call),
    (ARGMAX, row_forms.argmax, None, _extreme_below(ARGMAX)),
    (ARGMIN, row_forms.argmin, None, _extreme_below(ARGMIN)),
    # recurrent layers: the whole time loop in one kernel call
    (LSTM_LAYER, recurrent.lstm_layer, recurrent.LSTM_CHECK, None),
    (LSTM_LAYER_BACKWARD, recurrent.lstm_layer_backward, recurrent.LSTM_BACKWARD_CHECK, None),
    (GRU_LAYER, recurrent.gru_layer, recurrent.GRU_CHECK, None),
    (GRU_LAYER_BACKWARD, recurrent.gru_layer_backward, recurrent.GRU_BACKWARD_CHECK, None),
    (RNN_LAYER, recurrent.rnn_layer, recurrent.RNN_CHECK, None),
    (RNN_LAYER_BACKWARD, recurrent.rnn_layer_backward, recurrent.RNN_BACKWARD_CHECK, None),
)

for _prim, _fn, _checker, _call in TABLE:
    impls.register(_prim, _fn, checker=_checker, specialize=_call, platform="cpu")
impls.install_elementwise(vectorized)
_bf16.FASTER[0] = bf16_gemm.round_values

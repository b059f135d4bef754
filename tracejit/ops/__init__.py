"""Every op as a function: primitives (one record each) and composites of them."""
from .composite import *  # noqa: F401,F403
from .conv import fold, unfold  # noqa: F401
from .creation import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .elementwise import true_divide, divide, multiply, subtract, negative  # noqa: F401
from .indexing import *  # noqa: F401,F403
from .activation import *  # noqa: F401,F403
from .losses import *  # noqa: F401,F403
from .normalization import batch_norm, group_norm, instance_norm  # noqa: F401
from .linalg import *  # noqa: F401,F403
from .random import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403
from .registry import REGISTRY  # noqa: F401
from .eager import bind
from .shape import *  # noqa: F401,F403
from .shape import broadcast_to  # noqa: F401
from .step_slices import chunk, split, unbind  # noqa: F401  (one autograd node for the pieces)
from .tensorfns import *  # noqa: F401,F403
from .einsum import einsum  # noqa: F401
from .spatial import adaptive_avg_pool2d, adaptive_max_pool2d, conv1d, conv_transpose2d  # noqa: F401
from .attention import scaled_dot_product_attention  # noqa: F401
from .sampling import affine_grid, grid_sample  # noqa: F401
from .conv_nd import conv3d, conv_tbc, conv_transpose1d, conv_transpose3d  # noqa: F401
from .pooling_nd import adaptive_avg_pool1d, avg_pool1d, max_pool1d, max_pool1d_with_indices, max_pool3d  # noqa: F401
# torch.adaptive_max_pool1d gives the indices too (F's takes return_indices)
from .pooling_nd import adaptive_max_pool1d_with_indices as adaptive_max_pool1d  # noqa: F401
from .activation_more import (alpha_dropout, celu_, dropout2d, feature_alpha_dropout, hardshrink, relu_, rrelu,  # noqa: F401
                              rrelu_, selu_, threshold, threshold_)
from .losses_more import ctc_loss, poisson_nll_loss  # noqa: F401
from .normalization_more import rms_norm  # noqa: F401
from .rearrange import *  # noqa: F401,F403
from .products import *  # noqa: F401,F403
from .products import linalg_cross  # noqa: F401
from .indexing_more import *  # noqa: F401,F403
from .math_more import *  # noqa: F401,F403
from .special_fns import *  # noqa: F401,F403
from .numpy_like import *  # noqa: F401,F403
from .random_more import *  # noqa: F401,F403
from .reductions_more import *  # noqa: F401,F403
from .linalg_dense import det, slogdet  # noqa: F401
from .complex_ops import *  # noqa: F401,F403
from .view_copies import *  # noqa: F401,F403
from . import bf16_eager as _bf16_eager, complex_ops as _complex_ops, eager as _eager

_eager.take_operand_paths(_complex_ops, _bf16_eager)

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
from .tensorfns import *  # noqa: F401,F403
from .einsum import einsum  # noqa: F401
from .spatial import (adaptive_avg_pool2d, adaptive_max_pool2d, conv1d, conv_transpose2d,  # noqa: F401
                      dropout2d)
from .attention import scaled_dot_product_attention  # noqa: F401

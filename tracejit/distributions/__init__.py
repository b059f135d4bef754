"""``tracejit.distributions``: probability distributions with PyTorch's interface.

Parameters broadcast together; ``log_prob``, ``entropy`` and (where the distribution has
one) ``rsample`` are written with tracejit ops, so they are differentiable with respect to
the parameters; ``sample`` draws from tracejit's generator without a graph. PyTorch's
argument validation (parameters and values in their constraints) is on by default,
``Distribution.set_default_validate_args(False)`` turns it off. ``kl_divergence`` covers
the registered pairs (``register_kl`` adds more).
"""
from . import constraints, transforms  # noqa: F401
from . import discrete, exp_family, locscale, more, normal_uniform, transformed, heavy_tailed, bounded, matrix  # noqa: I001,E501
from .distribution import Distribution, kl_divergence, register_kl
from .transforms import (AffineTransform, ComposeTransform, ExpTransform, PowerTransform,
                         SigmoidTransform, StickBreakingTransform, TanhTransform, Transform, identity_transform)
from . import transforms_more, transforms_cat, kl_cross  # noqa: F401
from .relaxed import (Chi2, Multinomial, OneHotCategoricalStraightThrough,
                      RelaxedBernoulli, RelaxedOneHotCategorical, StudentT)

__all__ = ["Distribution", "kl_divergence", "register_kl", "constraints", "transforms", "Transform",
           "ComposeTransform", "ExpTransform", "AffineTransform", "SigmoidTransform", "TanhTransform",
           "PowerTransform", "StickBreakingTransform", "identity_transform", "Chi2", "Multinomial",
           "OneHotCategoricalStraightThrough", "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT"]
# every public name of these modules (their __all__) is tracejit.distributions'
for _m in (discrete, exp_family, locscale, more, normal_uniform, transformed, heavy_tailed, bounded, matrix,
           transforms_more, transforms_cat):
    globals().update((name, getattr(_m, name)) for name in _m.__all__)
    __all__ += _m.__all__
del _m


def _path_modules() -> None:
    """Make torch.distributions' submodule paths (``from torch.distributions.normal import
    Normal``): each distribution under its class name in snake case, a few as torch spells them."""
    import re
    import sys
    from .._path_modules import path_module
    odd = {"LKJCholesky": "lkj_cholesky", "FisherSnedecor": "fishersnedecor", "StudentT": "studentT",
           "LowRankMultivariateNormal": "lowrank_multivariate_normal",
           "RelaxedOneHotCategorical": "relaxed_categorical", "OneHotCategoricalStraightThrough": "one_hot_categorical",
           "ExponentialFamily": "exp_family"}
    paths: dict = {"kl": ["kl_divergence", "register_kl"],
                   "constraint_registry": ["ConstraintRegistry", "biject_to", "transform_to"]}
    for name in __all__:
        if isinstance(globals()[name], type) and issubclass(globals()[name], Distribution):
            paths.setdefault(odd.get(name) or re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower(), []).append(name)
    for sub, names in paths.items():
        full = f"{__name__}.{sub}"
        if full in sys.modules:   # a module of its own (distribution, exp_family)
            continue
        globals()[sub] = path_module(full, f"``torch.distributions.{sub}``'s names",
                                     {name: globals()[name] for name in names})
    from .distribution import broadcast_all
    globals()["utils"] = path_module(f"{__name__}.utils", "``torch.distributions.utils``: the helpers custom "
                                     "distributions use", {"broadcast_all": broadcast_all,
                                                           "clamp_probs": discrete._clamp_probs,
                                                           "logits_to_probs": discrete.logits_to_probs,
                                                           "probs_to_logits": discrete.probs_to_logits,
                                                           "tril_matrix_to_vec": transforms_more.tril_matrix_to_vec,
                                                           "vec_to_tril_matrix": transforms_more.vec_to_tril_matrix})


_path_modules()

"""``tracejit.distributions``: probability distributions with PyTorch's interface.

Parameters broadcast together; ``log_prob``, ``entropy`` and (where the distribution has
one) ``rsample`` are written with tracejit ops, so they are differentiable with respect to
the parameters; ``sample`` draws from tracejit's generator without a graph. PyTorch's
argument validation (parameters and values in their constraints) is on by default,
``Distribution.set_default_validate_args(False)`` turns it off. ``kl_divergence`` covers
the registered pairs (``register_kl`` adds more).
"""
from . import constraints  # noqa: F401
from .discrete import Bernoulli, Categorical, OneHotCategorical
from .distribution import Distribution, kl_divergence, register_kl
from .exp_family import ExponentialFamily
from .more import (Beta, Binomial, Cauchy, Dirichlet, Exponential, Gamma, Geometric, Gumbel, HalfNormal,
                   Independent, Laplace, LogNormal, MultivariateNormal, Poisson)
from .normal_uniform import Normal, Uniform
from . import transforms  # noqa: F401
from .transforms import (AffineTransform, ComposeTransform, ExpTransform, PowerTransform,  # noqa: F401
                         SigmoidTransform, StickBreakingTransform, TanhTransform, Transform)
from .transformed import MixtureSameFamily, TransformedDistribution
from .heavy_tailed import (FisherSnedecor, InverseGamma, Kumaraswamy, NegativeBinomial,  # noqa: F401
                           Pareto, Weibull)
from .relaxed import (Chi2, HalfCauchy, Multinomial, OneHotCategoricalStraightThrough,  # noqa: F401
                      RelaxedBernoulli, RelaxedOneHotCategorical, StudentT)

__all__ = ["Distribution", "Normal", "Uniform", "Categorical", "Bernoulli", "OneHotCategorical",
           "Exponential", "Laplace", "Cauchy", "Gumbel", "HalfNormal", "LogNormal", "Gamma", "Beta",
           "Dirichlet", "Poisson", "Geometric", "Binomial", "MultivariateNormal", "Independent",
           "kl_divergence", "register_kl", "constraints", "transforms", "TransformedDistribution",
           "MixtureSameFamily", "Transform", "ComposeTransform", "ExpTransform", "AffineTransform",
           "SigmoidTransform", "TanhTransform", "PowerTransform", "Chi2", "HalfCauchy", "Multinomial",
           "OneHotCategoricalStraightThrough", "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT"]
from .bounded import ContinuousBernoulli, GeneralizedPareto, LogisticNormal, VonMises  # noqa: F401
from .matrix import LKJCholesky, LowRankMultivariateNormal, Wishart  # noqa: F401
__all__ += ["LowRankMultivariateNormal", "Wishart", "LKJCholesky"]
__all__ += ["StickBreakingTransform"]
__all__ += ["ExponentialFamily", "VonMises", "ContinuousBernoulli", "GeneralizedPareto", "LogisticNormal"]
__all__ += ["Weibull", "Pareto", "Kumaraswamy", "InverseGamma", "FisherSnedecor", "NegativeBinomial"]

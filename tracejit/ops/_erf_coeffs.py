"""Coefficients of tracejit's float32 erf approximation, in one place (no numba here).

erf(a) = a + a * P(a^2) for |a| < 1 and 1 - exp(-a^2) * Q(|a| - 1) for 1 <= |a| < 4
(saturated at 4); fitted and measured in `tracejit.compiler.mathlib` (2.5 ulp over all
float32 inputs). The compiled kernels (mathlib.erf_f32) and eager float32 erf
(ops/_special.py) both evaluate it from these numbers.
"""

ERF32_SMALL = (0.12837916612625122, -0.3761262595653534, 0.1128358542919159, -0.026853812858462334, 0.005188327748328447, -0.0008010193705558777, 7.853861461626366e-05)
ERF32_BIG = (0.42758357524871826, -0.2732110619544983, 0.15435054898262024, -0.07905334234237671, 0.036874983459711075, -0.015110159292817116, 0.004911290016025305, -0.001057058572769165, 0.000106843639514409)

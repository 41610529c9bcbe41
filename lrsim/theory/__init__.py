"""The closed forms of Lookahead Reasoning, with their derivations (the theorem checks use them:
:mod:`lrsim.theorems`).

- :mod:`lrsim.theory.forms`      the paper's forms: g, f_sync, S1, S2, f_async, h, the expected-kept sum
- :mod:`lrsim.theory.costaware`  the cost-aware speedup of a configuration (measured batch cost, verifier time)
- :mod:`lrsim.theory.symbolic`   sympy derivations of the forms and checks of the seeds' versions (loads sympy)

``from lrsim import theory; theory.f_async(0.7, 0.1, 4)`` keeps working: the package exports the forms and the
cost-aware speedup (numpy only).
"""

from .costaware import A_MAX, Arm, Costs, speedup
from .forms import (
    MODES,
    Mode,
    draft_limit,
    expected_kept,
    f_async,
    f_step,
    f_sync,
    g,
    h,
    parallel_dim,
    s1,
    s2,
    sd_ceiling,
)

__all__ = ["MODES", "Mode", "draft_limit", "expected_kept", "g", "f_sync", "s1", "s2", "f_async", "f_step",
           "parallel_dim", "h", "sd_ceiling", "A_MAX", "Arm", "Costs", "speedup"]

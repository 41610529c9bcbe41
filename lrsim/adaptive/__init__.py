"""Adaptive Lookahead Reasoning: the decoding configuration chosen online from what the request shows.

- :mod:`lrsim.adaptive.policy`  the policy (Thompson sampling over configurations) and its options; numpy only,
  so lrref's decoder imports it without the simulator
- :mod:`lrsim.adaptive.sim`     the policy on simulated requests against every fixed configuration (loads the
  event simulator)
- :mod:`lrsim.adaptive.trace`   what ``lrref --mode auto`` chose, from its traces, against the closed forms

The objective the policy ranks by, :func:`lrsim.theory.costaware.speedup`, lives with the closed forms; it is
exported here too.
"""

from ..theory.costaware import Arm, Costs, speedup
from ..theory.forms import expected_kept
from .policy import AutoOptions, Beta, Policy, arms

__all__ = ["Arm", "Costs", "speedup", "expected_kept", "AutoOptions", "Beta", "Policy", "arms"]

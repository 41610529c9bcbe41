"""Latency profiles, the format (:mod:`.profile`) and its interpolation (:mod:`.interp`): the layer below both
:mod:`lrsim.cost` (which prices passes from any profile and resolves where profiles come from) and :mod:`lrsim.gpu`
(which writes modelled profiles).  It imports neither; ``docs/latency-profile.md`` describes the format.
"""

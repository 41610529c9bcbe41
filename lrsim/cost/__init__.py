"""The one pass-cost model (docs/cost-model.md): what a pass of the target or the draft costs.

- :mod:`lrsim.cost.passcost`    PassCost: a constant, curves, grids or a latency profile; the one cost ratio
- :mod:`lrsim.cost.library`     profiles by name, file or ``model:DEVICE[:tpN]...`` (the GPU model)
- :mod:`lrsim.cost.hardware`    HardwareSpec (data): the target, draft and verifier profiles and their placement
- :mod:`lrsim.cost.roles`       its loader: each role's profile spec (parsed once) and loaded profile
- :mod:`lrsim.cost.fromtraces`  a profile calibrated from lrref's traces (the pass-cost fit)
- :mod:`lrsim.cost.check`       a profile against lrref's traces
- :mod:`lrsim.cost.listing`     ``lrsim profiles``

Import the modules by name; the package itself loads nothing.
"""

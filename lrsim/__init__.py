"""lrsim: analytical and simulated speedups of Lookahead Reasoning (arXiv 2506.19830).

Never imports torch.  Modules:

- :mod:`lrsim.theory`     closed forms g, f_sync, S1, S2, f_async, parallel_dim, h
- :mod:`lrsim.symbolic`   sympy derivations of those forms and checks of the seeds' versions
- :mod:`lrsim.montecarlo` vectorised Monte Carlo of the theorems' stochastic models
- :mod:`lrsim.theorems`   automatic checks of Theorems 1-4 and the SD ceiling
- :mod:`lrsim.planner`    exact optimum split of a parallel budget M into (k1, k2)
- :mod:`lrsim.cli`        the ``lrsim`` command
"""

__version__ = "0.1.0"

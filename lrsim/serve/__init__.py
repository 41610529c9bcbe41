"""Serving simulation of Lookahead Reasoning under load (``lrsim serve``, ``lrsim plan --rate``).

Requests arrive (Poisson, gamma with a CV, or a file), wait for admission
(FCFS against running requests and KV capacity), prefill their prompt, and
decode ``output - 1`` more tokens with ``ar``, ``sd`` (token SD), ``lr-sync``
or ``lr-async``: one instance of :mod:`lrsim.sim`'s scheduler per request,
on a shared SimPy environment, a shared continuous-batching target engine,
a shared draft engine and a shared verifier.  An iteration of an engine
costs ``T(context, rows, positions)`` from a latency profile or a latency
model; between changes of the batch the engine jumps over many iterations
at once (a work clock), which is what makes thousands of long requests
cheap to simulate.

Modules, one concern each:

- :mod:`.config`      :class:`ServeConfig` (vLLM-named limits), modes, validation, KV footprint
- :mod:`.arrivals`    requests of a replication: arrival processes, lengths, an arrivals file
- :mod:`.pricing`     an iteration's price from a profile or a latency model (mixed batches)
- :mod:`.engine`      :class:`BatchEngine`: continuous batching, chunked prefill, max_num_seqs, work clock
- :mod:`.verifier`    verifier calls on shared slots
- :mod:`.admission`   FCFS admission against running requests and KV tokens
- :mod:`.request`     one request's life: the lrsim.sim scheduler on shared engines
- :mod:`.run`         one run (mode, rate, replication) -> :class:`RunOutcome`
- :mod:`.metrics`     TTFT, TPOT, e2e, throughput, goodput, Little's law; t-intervals over replications
- :mod:`.grid`        modes x rates x replications on a process pool or Dask
- :mod:`.crossover`   the rate above which a speculative mode stops beating ar
- :mod:`.plan`        the best (mode, k1, k2) per load and a vLLM-style policy table
- :mod:`.calibration` decoding settings and request lengths from lr-traces
- :mod:`.auto`        ``--modes auto``: each request's configuration chosen when it arrives, at the load it meets
- :mod:`.report`      text table, JSON rows, figure
- :mod:`.command`     ``lrsim serve``'s arguments to a run
"""

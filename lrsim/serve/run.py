"""One serving run: a mode, a rate and a replication, simulated from the first arrival to the last departure."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import simpy
from simpy.core import EmptySchedule

from ..errors import InputError
from .admission import Admission
from .arrivals import make_requests
from .config import RequestSpec, ServeConfig, kv_footprint, mode_config, target_rows
from .engine import BatchEngine
from .pricing import check_pricer, pricers
from .request import RECORD, World, make_request
from .verifier import Verifier


@dataclass
class RunOutcome:
    """What one run measured: per-request times and counts (arrays in arrival order) and the engines' books."""

    mode: str
    rate: float | None
    replication: int
    requests: dict  #: :data:`lrsim.serve.request.RECORD` field -> numpy array, one per request in arrival order
    target: dict  #: target engine statistics (:class:`lrsim.serve.engine.EngineStats`)
    drafter: dict | None
    verifier: dict
    admission: dict
    events: int
    wall: float
    k1: int
    k2: int
    notes: list = field(default_factory=list)


def mean_prompt(cfg: ServeConfig) -> float:
    """Mean prompt tokens of the workload (the context at which a profile's batch-1 time ``T`` is read)."""
    if cfg.trace_arrivals is not None:
        return float(np.mean([p for _, p, _ in cfg.trace_arrivals]))
    if cfg.pairs:
        return float(np.mean([p for p, _ in cfg.pairs]))
    return float(cfg.prompt_tokens.mean)


def check_fits(cfg: ServeConfig, mode: str, specs: list[RequestSpec]) -> None:
    """Refuse a workload whose largest request can never be admitted (it would wait forever)."""
    sim = mode_config(cfg, mode)
    if cfg.max_num_seqs * sim.k2 > cfg.max_num_batched_tokens:
        raise InputError(f"max_num_seqs {cfg.max_num_seqs} rows x k2 = {sim.k2} positions exceed "
                         f"max_num_batched_tokens = {cfg.max_num_batched_tokens}: decode rows must fit an iteration")
    if cfg.kv_capacity_tokens is not None:
        big = max(specs, key=lambda s: kv_footprint(sim, s.prompt, s.output))
        need = kv_footprint(sim, big.prompt, big.output)
        if need > cfg.kv_capacity_tokens:
            raise InputError(f"KV capacity {cfg.kv_capacity_tokens} tokens is smaller than one request's footprint "
                             f"in mode {mode}: {need} tokens (prompt {big.prompt} + output {big.output}"
                             + (" + LR look-ahead)" if need > big.prompt + big.output else ")"))


def build_world(cfg: ServeConfig, mode: str) -> tuple[World, object]:
    """The shared engines, verifier and admission of a run, and the mode's per-request settings."""
    sim = replace(mode_config(cfg, mode), prompt_tokens=round(mean_prompt(cfg)))
    env = simpy.Environment()
    target_price, draft_price = pricers(sim)
    rows = target_rows(sim)
    q = 1 + sim.spec_fill * (sim.k2 - 1)  # positions a pass computes per row
    check_pricer(target_price, "target", cfg.max_num_seqs, (1.0, q), mean_prompt(cfg))
    target = BatchEngine(env, target_price, cfg.max_num_batched_tokens, cfg.reprice, cfg.max_num_seqs)
    drafter = None
    if rows > 1:
        dq = q if sim.draft_sd and sim.k2 > 1 else 1.0
        check_pricer(draft_price, "draft", cfg.max_num_seqs, (1.0, dq), mean_prompt(cfg))
        drafter = BatchEngine(env, draft_price, cfg.max_num_batched_tokens, cfg.reprice, cfg.max_num_seqs)
    adm = Admission(env, cfg.max_num_seqs, cfg.kv_capacity_tokens)
    if drafter is not None and "draft" in sim.colocated:
        target.share_with(drafter)  # one device: the two engines take turns
    return World(env, cfg, target, drafter, Verifier(env, cfg.verifier_slots), adm, [], sim.colocated), sim


def _start(world: World, spec: RequestSpec, sim):
    """A request arriving now: the run's per-request settings, or (``--modes auto``) the chooser's, which then
    follows it."""
    if world.chooser is None:
        return make_request(spec, world, replace(sim, seed=spec.seed))
    req = make_request(spec, world, replace(world.chooser.choose(), seed=spec.seed))
    world.chooser.track(req)
    return req


def _arrivals(world: World, specs: list[RequestSpec], sim):
    """SimPy process: start each request's life at its arrival time."""
    env = world.env
    for spec in specs:
        if spec.arrival > env.now:
            yield env.timeout(spec.arrival - env.now)
        env.process(_start(world, spec, sim).lifecycle())


def _clients(world: World, specs: list[RequestSpec], sim, n: int) -> None:
    """Closed loop: ``n`` SimPy processes, each sending the next request (in order) when its previous one ended."""
    env, todo = world.env, iter(specs)

    def client():
        for spec in todo:  # shared: the next request goes to whichever client is free first
            yield env.process(_start(world, replace(spec, arrival=env.now), sim).lifecycle())

    for _ in range(n):
        env.process(client())


def _events(env: simpy.Environment) -> int:
    """Run to the end (SimPy's public ``step``); events processed."""
    step, n = env.step, 0
    try:
        while True:
            step()
            n += 1
    except EmptySchedule:
        return n


def run_once(cfg: ServeConfig, mode: str, rate: float | None, replication: int) -> RunOutcome:
    """Simulate replication ``replication`` of ``mode`` at ``rate`` requests/s (None: an arrivals file's times)."""
    specs = make_requests(cfg, rate, replication)
    check_fits(cfg, mode, specs)
    world, sim = build_world(cfg, mode)
    if mode == "auto":
        from .auto import Chooser

        world.chooser = Chooser(sim, world, world.target.price, world.drafter.price if world.drafter else None,
                                seed=cfg.seed * 1000 + replication)
    wall = time.perf_counter()
    if cfg.concurrency is not None and rate is None and cfg.trace_arrivals is None:
        _clients(world, specs, sim, cfg.concurrency)
    else:
        world.env.process(_arrivals(world, specs, sim))
    events = _events(world.env)
    wall = time.perf_counter() - wall
    if len(world.done) != len(specs):
        raise RuntimeError(f"{len(specs) - len(world.done)} request(s) never finished")  # a bug, not bad input
    return _outcome(world, mode, rate, replication, sim, events, wall)


def _outcome(world: World, mode: str, rate, replication: int, sim, events: int, wall: float) -> RunOutcome:
    recs = np.asarray(sorted(world.done), dtype=float)  # by arrival (then the rest of the record)
    cols = {name: recs[:, i] for i, name in enumerate(RECORD)}
    v, a = world.verifier, world.admission
    return RunOutcome(mode, rate, replication, cols,
                      world.target.stats.as_dict(), world.drafter.stats.as_dict() if world.drafter else None,
                      {"calls": v.calls, "busy": v.busy_time, "wait": v.wait_time},
                      {"peak_running": a.peak_running, "peak_queue": a.peak_queue}, events, wall, sim.k1, sim.k2)

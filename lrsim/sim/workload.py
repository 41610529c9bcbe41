"""The workload of one run: its random streams and latencies, set up once from the configuration.

Both engines draw from a :class:`Workload` in the same order, so they
return the same numbers.  Streams (each its own generator, spawned from the
seed in a fixed order): verdicts, target step lengths, draft step lengths,
target passes, draft passes, verifier latencies, request lengths.
"""

from __future__ import annotations

import math

import numpy as np

from ..cost.passcost import constant
from ..dists import Constant
from .config import SimConfig, max_draft_batch
from .streams import Draws, Passes, PassModel, Verdicts, lengths


def accept_probability(alpha1: float, width: int, correlation: float) -> float:
    """``P_W = rho alpha + (1 - rho)(1 - (1 - alpha)^W)``: some candidate of ``W`` is accepted."""
    return correlation * alpha1 + (1 - correlation) * (1 - (1 - alpha1) ** width)


def expected_steps_per_cycle(cfg: SimConfig) -> float:
    """``E[min(X, k1 - 1) + 1] = sum_{i < k1} P_W^i`` in sync mode; 1 in ar mode."""
    if cfg.mode != "sync":
        return 1.0
    pw = accept_probability(cfg.alpha1, cfg.width, cfg.correlation)
    return sum(pw**i for i in range(cfg.k1))


class Workload:
    """Random streams and latency setup of one run.

    Times are in the latency models' unit; with the default models a target
    step of mean length costs ``T = 1`` at batch 1.
    """

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        ss = np.random.SeedSequence(cfg.seed)
        r_acc, r_tlen, r_dlen, r_tpass, r_dpass, r_ver, r_req, r_ovl = (np.random.default_rng(s)
                                                                        for s in ss.spawn(8))
        tcost = cfg.target_latency or constant(1.0 / cfg.step_tokens.mean)
        self.fixed_rate = getattr(tcost, "uniform", False)  #: every iteration costs the same (any batch, context)
        self._ctx = float(cfg.prompt_tokens)  # the context passes are priced at: prompt + committed
        self.tau1 = tcost.seconds(self._ctx, 1, 1)  #: baseline: seconds per token, target alone at batch 1
        T = self.tau1 * cfg.step_tokens.mean  # mean target step time at batch 1
        dtokens = cfg.draft_tokens or cfg.step_tokens
        dcost = cfg.draft_latency or constant(cfg.c1 * T / dtokens.mean)
        self._costs, self._committed = (tcost, dcost), 0
        self.context_aware = not (tcost.context_free and dcost.context_free)  #: costs follow the context
        sd = cfg.k2 > 1
        self.sd_factor = 1 + cfg.c2 * (cfg.k2 - 1) if sd else 1.0  # a pass also pays k2 - 1 drafter calls
        self.mu2 = sum(cfg.alpha2**i for i in range(cfg.k2))  # E[tokens per pass] = E[min(X2, k2-1) + 1]
        self.c1_eff = dcost.seconds(self._ctx, cfg.width, 1) * dtokens.mean / T  #: draft step (batch W) / target
        self.tlen = lengths(cfg.step_tokens, r_tlen)
        self.dlen = lengths(dtokens, r_dlen)
        self.rlen = lengths(cfg.request_tokens, r_req) if cfg.request_tokens is not None else None
        mean = cfg.token_model == "mean"
        # the streams of tokens per pass and their step lengths, as streams.sharing() identifies them
        tshare, dshare = (cfg.seed, "target", cfg.step_tokens), (cfg.seed, "draft", dtokens)
        self.tpasses = PassModel(Passes(r_tpass, cfg.alpha2, cfg.k2, share=tshare) if sd else None, mean, self.mu2)
        self.dpasses = PassModel(Passes(r_dpass, cfg.alpha2, cfg.k2, share=dshare) if sd and cfg.draft_sd else None,
                                 mean, self.mu2)
        dsd = self.sd_factor if sd and cfg.draft_sd else 1.0
        self.q = 1 + cfg.spec_fill * (cfg.k2 - 1)  # positions a target pass computes per row, on average
        dk = self.q if sd and cfg.draft_sd else 1
        self._dk, self._dsd = dk, dsd
        self.draft_pass = {b: dcost.seconds(self._ctx, b, dk) * dsd
                           for b in range(1, max_draft_batch(cfg) + 1)}  #: by batch
        self.verdicts = Verdicts(r_acc, cfg.alpha1, cfg.width, cfg.correlation)
        vdist = cfg.verifier_latency or (Constant(cfg.verifier_cost * T) if cfg.verifier_cost > 0 else None)
        self.vtime = Draws(lambda n: vdist.sample(r_ver, n), 1024) if vdist and vdist.mean > 0 else None
        self._overlap = {v: Draws(lambda n, d=d: np.clip(d.sample(r_ovl, n), 0.0, 1.0), 256) if d is not None else None
                         for v, d in ((True, cfg.overlap_accepted), (False, cfg.overlap_rejected))}

    def set_context(self, committed: int) -> bool:
        """Price what follows at ``committed`` tokens of the current request past its prompt.

        Only context-aware costs change; the caller holds the price over a whole
        cycle or stage.  Returns whether anything changed.
        """
        if not self.context_aware or committed == self._committed:
            return False
        self._committed = committed
        self._ctx = float(self.cfg.prompt_tokens + committed)
        tcost, dcost = self._costs
        self.tau1 = tcost.seconds(self._ctx, 1, 1)
        self.draft_pass = {b: dcost.seconds(self._ctx, b, self._dk) * self._dsd for b in self.draft_pass}
        return True

    @property
    def pass_costs(self) -> tuple:
        """(target, draft) pass costs (:class:`lrsim.cost.PassCost`) and the context they are priced at now."""
        return self._costs + (self._ctx,)

    def iteration_time(self, batch: int, extra: float = 0.0) -> float:
        """One target iteration at ``batch`` sequences, ``extra`` of them prefill positions (first passes):
        ``tau(context, batch, q + extra / batch) (1 + c2 (k2 - 1))``, ``q = 1 + spec_fill (k2 - 1)``."""
        return self._costs[0].seconds(self._ctx, batch, self.q + extra / batch) * self.sd_factor

    def draft_prefill(self, batch: int, tokens: float) -> float:
        """What a draft pass of ``batch`` rows costs more when each row also prefills ``tokens`` positions."""
        if tokens <= 0:
            return 0.0
        d = self._costs[1]
        return (d.seconds(self._ctx, batch, self._dk + tokens) - d.seconds(self._ctx, batch, self._dk)) * self._dsd

    def next_request(self) -> float:
        """Output tokens of the next request (``inf``: one endless request)."""
        return self.rlen() if self.rlen is not None else math.inf

    def overlap(self, accepted: bool) -> float:
        """Share of a draft step the target's step at its position repeats from its start (0 without a model)."""
        draw = self._overlap[accepted]
        return float(draw()) if draw is not None else 0.0

    def verify_time(self) -> float:
        """Latency of one verifier call (0 for a free verifier)."""
        return self.vtime() if self.vtime is not None else 0.0

    def draft(self, depth: int, cap: float = math.inf, prefill: float = 0.0) -> tuple[float, list[int], int]:
        """Duration, candidate lengths and batch of drafting one position (its candidates as one batch);
        ``prefill``: tokens each candidate's first pass also feeds (what its sequence has not seen)."""
        cfg = self.cfg
        b = cfg.width ** (depth + 1) if cfg.tree else cfg.width
        extra = self.draft_prefill(b, prefill) if prefill else 0.0
        if b == 1 and self.dpasses.stream is None:  # the common case, kept short
            L = min(self.dlen(), cap)
            return L * self.draft_pass[1] + extra, [L], 1
        lens = [min(self.dlen(), cap) for _ in range(b)]
        passes = [self.dpasses.one(L)[0] for L in lens]
        if b == 1:
            return passes[0] * self.draft_pass[1] + extra, lens, 1
        t, prev = 0.0, 0
        for i, p in enumerate(sorted(passes)):  # the batch shrinks as candidates finish
            t += (p - prev) * self.draft_pass[b - i]
            prev = p
        return t + extra, lens, b

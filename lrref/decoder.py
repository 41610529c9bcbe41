"""Decoding modes: ``ar``, ``sd``, ``lr-sync`` (Algorithm 1, with W branches) and ``lr-async``.

All modes commit whole steps (:mod:`lrref.steps`) and write one trace record
per drafted candidate and per target-only step (:mod:`lrsim.trace`).

Lossless property: with greedy decoding and a verifier that accepts only
token-identical steps (``exact`` with ``normalize=False``), every committed
step is the target's own greedy step from the same prefix, so LR reproduces
``ar`` token for token (given numerics that do not depend on batch shape).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from lrsim.fields import help_texts, option
from lrsim.trace import Header, RequestRecord, StepRecord, TraceWriter

from .backend import Sampling, StepOut, StepRequest, config_dict
from .cpu import DTYPE_HELP, DTYPES, hardware_facts, resolve_dtype
from .ngram import NgramConfig
from .verifiers import Verdict, Verifier
from .worker import step_seed

DEFAULT_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
BASE_MODES = ("ar", "sd", "lr-sync", "lr-async")
MODE_HELP = "ar, sd (= ar + n-gram), lr-sync, lr-async; append '+sd' for n-gram inside steps; 'lr+sd' = lr-async+sd"



def parse_mode(mode: str) -> tuple[str, bool]:
    """``'lr-async+sd'`` -> ``('lr-async', True)``; ``'sd'`` -> ``('ar', True)``; ``'lr+sd'`` = lr-async+sd."""
    m = mode.strip().lower()
    ng = m.endswith("+sd")
    if ng:
        m = m[:-3]
    m = {"lr": "lr-async"}.get(m, m)
    if m == "sd":
        return "ar", True
    if m not in BASE_MODES or (ng and m == "ar" and mode.strip().lower() != "sd"):
        raise ValueError(f"unknown mode {mode!r} ({MODE_HELP})")
    return m, ng


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode (serialised, with this help, into every trace header)."""

    mode: str = option(MODE_HELP, "lr-sync")
    gamma: int = option("lookahead depth: draft steps per cycle (sync) / steps ahead (async)", 4)
    width: int = option("W: distinct draft candidates per position (sync only; needs draft temperature > 0)", 1)
    ngram: int = option("n-gram (prompt lookup) tokens proposed per target pass; 0 = off ('+sd' modes default 4)", 0)
    ngram_max: int = option("longest n-gram matched (prompt_lookup_max)", 2)
    ngram_min: int = option("shortest n-gram matched (prompt_lookup_min)", 1)
    draft_ngram: bool = option("the draft also uses n-gram speculation inside its steps when n-gram is on", True)
    max_step_tokens: int = option("step token cap", 96)
    max_tokens: int = option("total generated-token cap per request", 512)
    temperature: float = option("target sampling temperature (0 = greedy)", 0.0)
    top_p: float = option("nucleus mass", 1.0)
    top_k: int = option("top-k (0 = off)", 0)
    draft_temperature: float | None = option("draft temperature (default: same as the target)", None)
    seed: int = option("seed of every sampler (per request/cycle/position/branch)", 0)
    system: str = option("system prompt of the chat template", DEFAULT_SYSTEM)
    threads: int = option("torch threads of the main process in ar/sd/lr-sync", 2)
    draft_threads: int = option("torch threads of the draft process in lr-async", 1)
    target_threads: int = option("torch threads of the target in lr-async (sync modes use the process setting)", 1)
    log_text: bool = option("write step and answer texts into the trace", False)
    dtype: str = option(DTYPE_HELP + " (the models are loaded with it; the trace's hardware has the choice)", "auto")

    def __post_init__(self) -> None:
        base, ng = parse_mode(self.mode)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name, lo in (("gamma", 1), ("width", 1), ("max_step_tokens", 1), ("max_tokens", 1)):
            if getattr(self, name) < lo:
                raise ValueError(f"{name} must be >= {lo}, got {getattr(self, name)}")
        if self.ngram < 0:
            raise ValueError(f"ngram must be >= 0, got {self.ngram}")
        if self.width > 1 and base != "lr-sync":
            raise ValueError("width > 1 is implemented for lr-sync only")
        if self.width > 1 and self.draft_sampling.greedy:
            raise ValueError("width > 1 needs a draft temperature > 0 (greedy drafts are all the same)")
        if self.width ** self.gamma > 256:
            raise ValueError(f"width**gamma = {self.width ** self.gamma} draft paths is too many (max 256)")
        Sampling(self.temperature, self.top_p, self.top_k)
        NgramConfig(self.ngram_k, self.ngram_max, self.ngram_min)

    @property
    def base(self) -> str:
        return parse_mode(self.mode)[0]

    @property
    def ngram_k(self) -> int:
        return self.ngram or (4 if parse_mode(self.mode)[1] else 0)

    @property
    def draft_ngram_cfg(self) -> NgramConfig:
        return self.ngram_cfg if self.draft_ngram else NgramConfig()

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k)

    @property
    def draft_sampling(self) -> Sampling:
        t = self.temperature if self.draft_temperature is None else self.draft_temperature
        return Sampling(t, self.top_p, self.top_k)

    @property
    def ngram_cfg(self) -> NgramConfig:
        return NgramConfig(self.ngram_k, self.ngram_max, self.ngram_min)

    def trace_config(self) -> dict:
        d = config_dict(self)
        d.update(base_mode=self.base, ngram_k=self.ngram_k, k2=(self.ngram_k + 1) if self.ngram_k else None)
        d["help"] = help_texts(self)
        return d


@dataclass
class Committed:
    ids: list[int]
    text: str
    source: str  # "draft" or "target"


@dataclass
class Result:
    """One decoded request."""

    ids: list[int]
    text: str
    steps: list[Committed]
    finish: str
    wall_s: float
    prompt_tokens: int
    target_s: float = 0.0  # target forward passes (main process)
    draft_s: float = 0.0  # draft forward passes (in its own process for lr-async)
    verify_s: float = 0.0  # verifier calls
    wait_s: float = 0.0  # lr-async: main process idle, waiting for a draft
    draft_overlapped: bool = False  # lr-async: draft time is spent in another process
    verified: int = 0  # drafts checked (identical or verifier)
    accepted: int = 0
    target_forwards: int = 0
    ngram_drafted: int = 0
    ngram_accepted: int = 0

    @property
    def accepted_steps(self) -> int:
        return sum(s.source == "draft" for s in self.steps)

    @property
    def overhead_s(self) -> float:
        """Wall time not spent in model forwards, verifier calls or waiting for the overlapped draft."""
        draft_inline = 0.0 if self.draft_overlapped else self.draft_s
        return self.wall_s - self.target_s - self.verify_s - self.wait_s - draft_inline


@dataclass
class _Node:
    """A node of the sync draft tree: the path of drafts from the cycle's prefix."""

    path: list[int]
    rem: int
    depth: int = -1
    branch: int | None = None
    out: StepOut | None = None
    children: list["_Node"] = field(default_factory=list)
    target: StepOut | None = None
    verdict: Verdict | None = None
    vname: str | None = None
    vtimes: tuple[float, float] | None = None

    @property
    def terminal(self) -> bool:
        return self.rem <= 0 or (self.out is not None and self.out.finish == "eos")


class Decoder:
    """Runs requests in one mode and writes the trace.

    :param target: target backend (HF or vLLM).
    :param draft: draft backend (lr modes; for lr-async the draft model *path* is used to start a worker).
    :param verifier: step verifier (lr modes).
    :param draft_dtype: dtype of lr-async's draft process (default: ``cfg.dtype``, ``auto`` resolved here).
    """

    def __init__(self, cfg: DecodeConfig, target, draft=None, verifier: Verifier | None = None,
                 trace: TraceWriter | None = None, draft_path: str | None = None, draft_dtype: str | None = None):
        self.cfg, self.target, self.draft, self.verifier, self.trace = cfg, target, draft, verifier, trace
        self.clock = trace.now if trace else _Clock()
        self.worker = None
        if cfg.base in ("lr-sync", "lr-async") and verifier is None:
            raise ValueError(f"mode {cfg.mode} needs a verifier")
        if cfg.base == "lr-sync" and draft is None:
            raise ValueError("lr-sync needs a draft backend")
        if cfg.base == "lr-async":
            if not draft_path:
                raise ValueError("lr-async needs the draft model path (it runs in its own process)")
            from .worker import DraftWorker

            t0 = trace.t0 if trace else self.clock.t0
            self.worker = DraftWorker(draft_path, draft_dtype or cfg.dtype, cfg.draft_threads, t0, cfg.max_step_tokens,
                                      cfg.draft_sampling, cfg.draft_ngram_cfg)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    # -- helpers -------------------------------------------------------------------------------------
    def _write(self, rec: StepRecord) -> None:
        if self.trace:
            self.trace.step(rec)

    def _verify(self, pairs: list[tuple[StepOut, StepOut]], context: str) -> tuple[list[Verdict], list[str], float,
                                                                                     float]:
        """Verdicts for (target, draft) pairs: identical token streams pass without the verifier."""
        t0 = self.clock()
        verdicts: list[Verdict | None] = [Verdict(True, None) if t.ids == d.ids else None for t, d in pairs]
        names = ["identical" if v else self.verifier.name for v in verdicts]
        todo = [i for i, v in enumerate(verdicts) if v is None]
        if todo:
            got = self.verifier.verify([(pairs[i][0].text, pairs[i][1].text) for i in todo], [context] * len(todo))
            for i, v in zip(todo, got):
                verdicts[i] = v
        return verdicts, names, t0, self.clock()

    @staticmethod
    def _tfields(t: StepOut | None, text: bool) -> dict:
        if t is None:
            return {}
        return dict(target_start=t.start, target_end=t.end, target_tokens=t.n_tokens, target_batch=t.batch,
                    target_forwards=t.forwards, ngram_drafted=t.ngram_drafted, ngram_accepted=t.ngram_accepted,
                    target_text=t.text if text else None)

    @staticmethod
    def _dfields(d: StepOut | None, text: bool) -> dict:
        if d is None:
            return {}
        return dict(draft_start=d.start, draft_end=d.end, draft_tokens=d.n_tokens, draft_batch=d.batch,
                    draft_text=d.text if text else None)

    # -- one request -----------------------------------------------------------------------------------
    def run(self, request: int, prompt_ids: Sequence[int], answer_ref: str | None = None) -> Result:
        """Decode one request (prompt token ids) to EOS or the token cap."""
        cfg = self.cfg
        t_start = self.clock()
        w0 = time.perf_counter()
        st0 = _stats(self.target)
        dst0 = _stats(self.draft)
        res = Result([], "", [], "max_tokens", 0.0, len(prompt_ids))
        _set_threads(cfg.target_threads if cfg.base == "lr-async" else cfg.threads)
        if cfg.base == "lr-async":
            res.draft_overlapped = True
            self._run_async(request, list(prompt_ids), res)
        else:
            cycle = 0
            while True:
                rem = cfg.max_tokens - len(res.ids)
                if rem <= 0:
                    break
                if cfg.base in ("ar", "sd"):
                    done = self._ar_step(request, cycle, list(prompt_ids) + res.ids, rem, res)
                else:
                    done = self._sync_cycle(request, cycle, list(prompt_ids) + res.ids, rem, res)
                cycle += 1
                if done:
                    res.finish = "eos"
                    break
        res.wall_s = time.perf_counter() - w0
        res.text = self.target.decode(res.ids)
        res.target_s += _stats(self.target)["forward_s"] - st0["forward_s"]
        res.draft_s += _stats(self.draft)["forward_s"] - dst0["forward_s"]
        if self.trace:
            self.trace.request(RequestRecord(
                request=request, start=t_start, end=self.clock(), prompt_tokens=len(prompt_ids),
                output_tokens=len(res.ids), steps=len(res.steps), accepted_steps=res.accepted_steps, finish=res.finish,
                text=res.text if cfg.log_text else None))
        return res

    def _commit(self, res: Result, out: StepOut, source: str) -> bool:
        res.ids += out.ids
        res.steps.append(Committed(list(out.ids), out.text, source))
        return out.finish == "eos"

    def _count_target(self, res: Result, t: StepOut) -> None:
        res.target_forwards += t.forwards
        res.ngram_drafted += t.ngram_drafted
        res.ngram_accepted += t.ngram_accepted

    # -- ar / sd -----------------------------------------------------------------------------------------
    def _ar_step(self, request: int, cycle: int, prefix: list[int], rem: int, res: Result) -> bool:
        cfg = self.cfg
        cap = min(cfg.max_step_tokens, rem)
        t = self.target.generate_steps([StepRequest(tuple(prefix), cap, step_seed(cfg.seed, request, cycle, -1))],
                                       cfg.sampling, cfg.ngram_cfg, self.clock)[0]
        self._count_target(res, t)
        self._write(StepRecord(request=request, cycle=cycle, position=0, committed="target",
                               **self._tfields(t, cfg.log_text)))
        return self._commit(res, t, "target")

    # -- lr-sync: Algorithm 1 with a W-ary draft tree ---------------------------------------------------
    def _sync_cycle(self, request: int, cycle: int, prefix: list[int], rem: int, res: Result) -> bool:
        cfg = self.cfg
        root = _Node([], rem)
        nodes: list[_Node] = [root]
        frontier = [root]
        for depth in range(cfg.gamma):  # 1. draft gamma steps (W candidates per node), level by level
            jobs = [(n, b) for n in frontier if not n.terminal for b in range(cfg.width)]
            if not jobs:
                break
            reqs = [StepRequest(tuple(prefix + n.path), min(cfg.max_step_tokens, n.rem),
                                step_seed(cfg.seed, request, cycle, depth, len(n.path), b)) for n, b in jobs]
            outs = self.draft.generate_steps(reqs, cfg.draft_sampling, cfg.draft_ngram_cfg, self.clock)
            frontier = []
            for (n, b), o in zip(jobs, outs):
                if any(c.out.ids == o.ids for c in n.children):  # keep W *distinct* candidates
                    continue
                c = _Node(n.path + o.ids, n.rem - o.n_tokens, depth, len(n.children), o)
                n.children.append(c)
                frontier.append(c)
                nodes.append(c)
        # 2. the target writes one step per non-terminal node, all in one batched call
        tnodes = [n for n in nodes if not n.terminal]
        touts = self.target.generate_steps(
            [StepRequest(tuple(prefix + n.path), min(cfg.max_step_tokens, n.rem),
                         step_seed(cfg.seed, request, cycle, -1, len(n.path))) for n in tnodes],
            cfg.sampling, cfg.ngram_cfg, self.clock)
        for n, t in zip(tnodes, touts):
            n.target = t
            self._count_target(res, t)
        # 3. walk: verify the children of the current node against its target step
        context = self.target.decode(prefix[-2048:])
        node, done, path_nodes, bonus = root, False, [], None
        while True:
            if not node.children:  # bonus step (all drafts accepted) or nothing drafted here
                bonus = node
                if node.target is not None:
                    self._write(StepRecord(request=request, cycle=cycle, position=node.depth + 1, committed="target",
                                           **self._tfields(node.target, cfg.log_text)))
                    done = self._commit(res, node.target, "target")
                break
            verdicts, names, v0, v1 = self._verify([(node.target, c.out) for c in node.children], context)
            res.verify_s += v1 - v0
            res.verified += len(verdicts)
            for c, v, nm in zip(node.children, verdicts, names):
                c.verdict, c.vname, c.vtimes = v, nm, (v0, v1)
            ok = [c for c in node.children if c.verdict.decision]
            if not ok:  # first rejection: the target's own step at this position
                self._flush_children(request, cycle, node, chosen=None, commit_target=True)
                done = self._commit(res, node.target, "target")
                break
            # several matches: identical first, then the highest verifier score, then the lowest branch
            best = min(ok, key=lambda c: (c.vname != "identical", -(c.verdict.score or 0.0), c.branch))
            self._flush_children(request, cycle, node, chosen=best, commit_target=False)
            res.accepted += 1
            done = self._commit(res, best.out, "draft")
            path_nodes.append(best)
            node = best
            if done or node.terminal:
                break
        self._flush_unvisited(request, cycle, root, bonus)
        return done

    def _flush_children(self, request: int, cycle: int, node: _Node, chosen: _Node | None,
                        commit_target: bool) -> None:
        cfg = self.cfg
        for c in node.children:
            v = c.verdict
            committed = "draft" if c is chosen else ("target" if commit_target and c.branch == 0 else None)
            self._write(StepRecord(
                request=request, cycle=cycle, position=c.depth, branch=c.branch,
                verify_start=c.vtimes[0], verify_end=c.vtimes[1], verifier=c.vname, score=v.score,
                decision=v.decision, accepted=c is chosen, committed=committed,
                **self._dfields(c.out, cfg.log_text), **self._tfields(node.target, cfg.log_text)))
            c.vtimes = None  # written

    def _flush_unvisited(self, request: int, cycle: int, root: _Node, bonus: _Node | None) -> None:
        """Drafts never verified (below a rejection or an unchosen branch): accepted = False.

        Each row carries the target step written at its position (its parent's), and a leaf's own target
        step (the bonus position of its path) gets a target-only row: that work ran in the cycle's batch
        and was thrown away, and the trace must show it (calibration prices the batch from these rows).
        """
        log = self.cfg.log_text
        stack = [(c, root) for c in root.children]
        while stack:
            c, parent = stack.pop()
            stack.extend((g, c) for g in c.children)
            if c.verdict is None:
                self._write(StepRecord(request=request, cycle=cycle, position=c.depth, branch=c.branch,
                                       **self._dfields(c.out, log), **self._tfields(parent.target, log)))
            if not c.children and c.target is not None and c is not bonus:
                self._write(StepRecord(request=request, cycle=cycle, position=c.depth + 1,
                                       **self._tfields(c.target, log)))

    # -- lr-async ------------------------------------------------------------------------------------------
    def _run_async(self, request: int, prompt: list[int], res: Result) -> None:
        """Pipelined LR: the draft process runs ahead; target step j joins the running target batch as soon
        as draft j-1 exists; step k is resolved as soon as target step k is done."""
        cfg, W = self.cfg, self.worker
        eng = self.target.engine(cfg.sampling, cfg.ngram_cfg, self.clock)
        P, epoch, stage = list(prompt), 0, 0
        rem_stage = cfg.max_tokens
        drafts: dict[int, StepOut] = {}
        running: dict[int, int] = {}  # engine handle -> position
        tdone: dict[int, StepOut] = {}
        k = 0
        context = self.target.decode(prompt[-2048:])
        W.send("chain", epoch, P, rem_stage, cfg.gamma, step_seed(cfg.seed, request, 0))
        finished = False
        while not finished:
            for msg in W.poll():  # 1. drafts that arrived
                if msg[0] == "draft" and msg[1] == epoch:
                    drafts[msg[2]] = msg[3]
                elif msg[0] in ("draft", "cancelled"):
                    self._write(StepRecord(request=request, cycle=stage if msg[1] == epoch else max(0, stage - 1),
                                           position=msg[2], branch=0, cancelled=True,
                                           **self._dfields(msg[3], cfg.log_text)))
            started = set(running.values()) | set(tdone)  # 2. start target steps whose prefix exists
            new = []
            for j in range(k, k + cfg.gamma + 1):
                if j in started:
                    continue
                if j > 0 and (j - 1 not in drafts or drafts[j - 1].finish == "eos"):
                    break
                used = sum(drafts[i].n_tokens for i in range(j))
                cap = min(cfg.max_step_tokens, rem_stage - used)
                if cap <= 0:
                    break
                ids = tuple(P + [t for i in range(j) for t in drafts[i].ids])
                new.append((j, StepRequest(ids, cap, step_seed(cfg.seed, request, stage, -1, j))))
            for (j, _), h in zip(new, eng.add([r for _, r in new])):
                running[h] = j
            # 3. resolve position k while its target step is done
            while k in tdone and not finished:
                t = tdone.pop(k)
                self._count_target(res, t)
                d = drafts.get(k)
                accept = False
                if d is not None:
                    verdicts, names, v0, v1 = self._verify([(t, d)], context)
                    v = verdicts[0]
                    res.verify_s += v1 - v0
                    res.verified += 1
                    accept = v.decision
                    self._write(StepRecord(
                        request=request, cycle=stage, position=k, branch=0, verify_start=v0, verify_end=v1,
                        verifier=names[0], score=v.score, decision=v.decision, accepted=accept,
                        committed="draft" if accept else "target",
                        **self._dfields(d, cfg.log_text), **self._tfields(t, cfg.log_text)))
                else:  # the draft is behind: the target's step is final, no need to wait
                    self._write(StepRecord(request=request, cycle=stage, position=k, committed="target",
                                           **self._tfields(t, cfg.log_text)))
                if accept:
                    res.accepted += 1
                    finished = self._commit(res, d, "draft")
                    k += 1
                    W.send("credit", epoch, 1)
                else:
                    finished = self._commit(res, t, "target")
                    # new stage: drop stale target work and restart the draft chain from the new prefix
                    stale = [h for h, j in running.items() if j > k]
                    for h, o in eng.cancel(stale):
                        self._write(StepRecord(request=request, cycle=stage, position=running.pop(h), cancelled=True,
                                               **self._tfields(o, cfg.log_text)))
                    for j, o in sorted(tdone.items()):
                        self._write(StepRecord(request=request, cycle=stage, position=j, cancelled=True,
                                               **self._tfields(o, cfg.log_text)))
                    tdone.clear()
                    for j in [j for j in drafts if j > k]:
                        self._write(StepRecord(request=request, cycle=stage, position=j, branch=0, cancelled=True,
                                               **self._dfields(drafts[j], cfg.log_text)))
                    drafts.clear()
                    P, k, stage, epoch = list(prompt) + res.ids, 0, stage + 1, epoch + 1
                    rem_stage = cfg.max_tokens - len(res.ids)
                    if not finished and rem_stage > 0:
                        W.send("chain", epoch, P, rem_stage, cfg.gamma, step_seed(cfg.seed, request, stage))
                    break
                if len(res.ids) >= cfg.max_tokens:
                    break
            if finished or len(res.ids) >= cfg.max_tokens:
                break
            if eng.active:  # 4. one target forward pass
                for h, o in eng.step():
                    tdone[running.pop(h)] = o
            elif k not in tdone:
                w0 = time.perf_counter()
                msgs = W.poll(timeout=1.0)  # idle: wait for the next draft
                res.wait_s += time.perf_counter() - w0
                for msg in msgs:
                    if msg[0] == "draft" and msg[1] == epoch:
                        drafts[msg[2]] = msg[3]
        if finished:
            res.finish = "eos"
        for h, o in eng.cancel(list(running)):
            self._write(StepRecord(request=request, cycle=stage, position=running[h], cancelled=True,
                                   **self._tfields(o, cfg.log_text)))
        W.send("idle")
        ws = W.stats()
        res.draft_s += ws["forward_s"] - getattr(self, "_worker_fwd", 0.0)
        self._worker_fwd = ws["forward_s"]


class _Clock:
    def __init__(self):
        self.t0 = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.t0


def _set_threads(n: int) -> None:
    import torch

    if n and torch.get_num_threads() != n:
        torch.set_num_threads(n)


def _stats(be) -> dict:
    s = getattr(be, "stats", None)
    return {"forward_s": getattr(s, "forward_s", 0.0)} if s is not None else {"forward_s": 0.0}


def make_header(cfg: DecodeConfig, models: dict, backend: str, verifier: dict | None, notes: str | None = None
                ) -> Header:
    """Trace header with the full config (and its help), models, backend and machine facts.

    ``hardware`` has the CPU model and its relevant flags, the dtype ``cfg.dtype`` resolves to and the
    target's torch threads (:func:`lrref.cpu.hardware_facts`).
    """
    import os

    from lrsim.trace import machine_facts

    import torch

    threads = cfg.target_threads if cfg.base == "lr-async" else cfg.threads
    hw = machine_facts() | {"torch_threads": torch.get_num_threads(), "device": "cpu",
                            "loadavg_start": list(os.getloadavg())} | hardware_facts(resolve_dtype(cfg.dtype), threads)
    conf = cfg.trace_config()
    if verifier:
        conf["verifier"] = verifier
    return Header(source="lrref", mode=cfg.base, config=conf, models=models, backend=backend, hardware=hw,
                  notes=notes)

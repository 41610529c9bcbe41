"""Tensor-parallel collectives by message size, with the algorithm the library would pick.

**NCCL** (what ``torch.distributed`` and vLLM's ``PyNcclCommunicator`` run): NCCL's own cost model, from its
tuner (``NVIDIA/nccl`` ``src/graph/tuning.cc``, the default tuner constants; read at commit 5067397, 2026-06):
every (algorithm, protocol) pair costs ``latency + bytes / algorithm bandwidth`` and NCCL runs the cheapest.
On one node, for an all-reduce over ``n`` GPUs:

- ring: latency ``baseLat[ring][p] + 2 (n-1) hwLat[hw][ring][p]``, bandwidth ``busBw x n / (2 (n-1))``;
- tree (a chain on one node): latency ``baseLat[tree][p] + 2 (n-1) hwLat[hw][tree][p]``, bandwidth
  ``busBw / 2``;
- protocol factors on the bus bandwidth: Simple 1, LL128 0.92 (ring) or 7/9 (tree), LL 1/2 (ring) or 1/3.8
  (tree), LL capped at ``llMaxBw`` of the GPU generation (87.7 GB/s Ampere, 141 Hopper, 282 Blackwell).

``busBw`` is the device's ring bandwidth per direction (:meth:`~lrsim.gpu.devices.DeviceSpec.ring_bandwidth`);
``hw`` is NVLink inside the device's fast domain, PCI beyond it.  NVLS (NVLink SHARP) is not modelled.

**vLLM's custom all-reduce** (``csrc/custom_all_reduce.cuh``, ``REDUCE_CASE``; used for TP 2, 4, 6, 8 on fully
connected GPUs, or TP 2 on any peer-to-peer pair, for messages up to 8 MiB: ``CustomAllreduce.max_size``):
one-shot (``cross_device_reduce_1stage``: every GPU reads the ``n - 1`` peers' buffers and reduces locally) when
``n == 2``, or ``n <= 4`` and under 512 KiB, or ``n <= 8`` and under 256 KiB; two-shot (reduce-scatter then
all-gather through peer buffers) above.  A barrier costs the device's ``link_latency_us`` (an assumption of this
model, not a datasheet figure):

- one-shot: two barriers (start, end) + ``(n - 1) x bytes / ingress``, ingress ``min(fabric, (n - 1) link)``;
- two-shot: three barriers (start, between the stages, end) + ``2 (n - 1) / n x bytes / busBw``.

With 3 us barriers and NVLink 4's 450 GB/s the two cost the same at 256 KiB for ``n = 8``: vLLM's threshold.

**Expert parallelism's all-to-all** (dispatch and combine under data-parallel attention: DeepEP's and pplx-kernels'
NVLink kernels, vLLM's ``--all2all-backend`` / ``VLLM_ALL2ALL_BACKEND`` ``deepep_*`` or ``pplx``, SGLang's
``--moe-a2a-backend deepep``): every GPU writes each of its tokens' hidden states into the buffers of the GPUs
holding the token's experts, all at once over its own links; of its ``m`` bytes the ``(n - 1) / n`` bound for
other GPUs leave at its egress bandwidth, ``min(fabric, (n - 1) link)`` inside the fast domain (the host link
beyond it: :meth:`~lrsim.gpu.devices.DeviceSpec.ring_bandwidth`).  This is the latency-bandwidth (alpha-beta)
cost model collectives are priced by (Thakur, Rabenseifner & Gropp, "Optimization of collective communication
operations in MPICH", IJHPCA 19(1), 2005) for an all-to-all whose ``n - 1`` sends run at once, so one latency
and the GPU's outgoing bytes at its egress bandwidth; the latency is two barriers, as the one-shot all-reduce's
above (buffers free, data landed; an assumption)::

    t_a2a = 2 t_link + (n - 1) / n x m / B_egress + t_k

vLLM's default gather backends (``naive``, ``allgather_reducescatter``: every token to every GPU) move more bytes
and are not modelled; at LR's batches (a few hundred tokens) the latency term dominates either way.

Every collective is one kernel (``t_k``).  Without TP every cost is 0.
"""

from __future__ import annotations

import numpy as np

from .setup import Setup

# NCCL tuner defaults (src/graph/tuning.cc): latencies in us, per protocol (LL, LL128, Simple)
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
HW_LAT = {"nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
          "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)}}
LL_MAX_GB_S = {"ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}  # llMaxBws, one node (N1)
LL_MAX_DEFAULT = 87.7
CUSTOM_AR_MAX = 8 * 2 ** 20  # vLLM CustomAllreduce.max_size
CUSTOM_AR_SIZES = (2, 4, 6, 8)


def _hw(s: Setup) -> str:
    return "nvlink" if s.tp <= s.device.domain and s.device.domain > 1 else "pci"


def nccl_all_reduce(s: Setup, nbytes):
    """NCCL's cheapest (algorithm, protocol) for an all-reduce of ``nbytes`` over ``s.tp`` GPUs, seconds."""
    n = s.tp
    if n == 1:
        return 0.0 * nbytes
    hw, bus = _hw(s), s.device.ring_bandwidth(n)
    ll_max = LL_MAX_GB_S.get(s.device.generation, LL_MAX_DEFAULT) * 1e9
    ring_bw = (min(ll_max, 0.5 * bus), 0.92 * bus, bus)  # LL, LL128, Simple
    tree_bw = (min(ll_max, bus / 3.8), bus * 7 / 9, bus)
    best = None
    for algo, bws, ratio in (("ring", ring_bw, n / (2 * (n - 1))), ("tree", tree_bw, 0.5)):
        for p in range(3):
            lat = BASE_LAT[algo][p] + 2 * (n - 1) * HW_LAT[hw][algo][p]
            t = lat * 1e-6 + nbytes / (bws[p] * ratio)
            best = t if best is None else np.minimum(best, t)
    return best + s.kernel_s


def nccl_all_gather(s: Setup, nbytes):
    """NCCL's ring all-gather of ``nbytes`` in all (the gathered tensor) over ``s.tp`` GPUs, seconds."""
    n = s.tp
    if n == 1:
        return 0.0 * nbytes
    hw, bus = _hw(s), s.device.ring_bandwidth(n)
    ll_max = LL_MAX_GB_S.get(s.device.generation, LL_MAX_DEFAULT) * 1e9
    best = None
    for p, bw in enumerate((min(ll_max, 0.5 * bus), 0.92 * bus, bus)):
        t = (BASE_LAT["ring"][p] + (n - 1) * HW_LAT[hw]["ring"][p]) * 1e-6 + nbytes / (bw * n / (n - 1))
        best = t if best is None else np.minimum(best, t)
    return best + s.kernel_s


def custom_applies(s: Setup) -> bool:
    """Whether vLLM would run its custom all-reduce at this TP degree on this device (sizes aside)."""
    n, d = s.tp, s.device
    return n in CUSTOM_AR_SIZES and (n == 2 or n <= d.domain)


def custom_all_reduce(s: Setup, nbytes):
    """vLLM's custom all-reduce (one-shot or two-shot by its own thresholds), seconds; assumes it applies."""
    n, d = s.tp, s.device
    ingress = (min(d.fabric_gb_s, (n - 1) * d.link_gb_s) if n <= d.domain else d.host_link_gb_s) * 1e9
    barrier = d.link_latency_us * 1e-6
    one = 2 * barrier + (n - 1) * nbytes / ingress
    two = 3 * barrier + 2 * (n - 1) / n * nbytes / d.ring_bandwidth(n)
    threshold = np.inf if n == 2 else (512 * 1024 if n <= 4 else 256 * 1024)
    return np.where(nbytes < threshold, one, two) + s.kernel_s


def all_reduce(s: Setup, nbytes):
    """An all-reduce as the setup's engine runs it: its custom kernel (vLLM's, SGLang's, TensorRT-LLM's) where it
    applies (up to 8 MiB), else NCCL; 0 without TP."""
    if s.tp == 1:
        return 0.0 * nbytes
    if s.runtime.custom_all_reduce and custom_applies(s):
        return np.where(nbytes <= CUSTOM_AR_MAX, custom_all_reduce(s, nbytes), nccl_all_reduce(s, nbytes))
    return nccl_all_reduce(s, nbytes)


def all_to_all(s: Setup, nbytes):
    """Expert parallelism's dispatch or combine: one GPU's ``nbytes`` (its tokens' top-k copies) exchanged with the
    other ``s.tp - 1``, ``2 t_link + (n - 1) / n x nbytes / B_egress + t_k`` (module docstring); 0 on one GPU."""
    n = s.tp
    if n == 1:
        return 0.0 * nbytes
    return 2 * s.device.link_latency_us * 1e-6 + (n - 1) / n * nbytes / s.device.ring_bandwidth(n) + s.kernel_s

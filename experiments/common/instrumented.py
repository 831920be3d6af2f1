"""Measured global-memory traffic without a GPU: the kernels run under Numba's CUDA simulator
and ``numba_flash.instrument.count_traffic`` counts every element they load and store.

Only tiny shapes are practical there (N <= 64, small tilings).  A fwd_bwd case is counted as its
forward call plus its backward call; the backward call gets its saved tensors (o, lse or P) from
the float64 NumPy reference (o rounded to the inputs' format), so each call is simulated once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cases import BACKWARD_ALGORITHM, Case, host_inputs


#: The tensors whose reads ``CountedTraffic.kv_read_bytes`` sums (what GQA / MQA shares).
KV_TENSORS = ("K", "V")


@dataclass(frozen=True)
class CountedTraffic:
    read_bytes: float
    write_bytes: float
    kv_read_bytes: float = 0.0   # of read_bytes: reads of K and V

    @property
    def total_bytes(self) -> float:
        return self.read_bytes + self.write_bytes


def count_case(case: Case, seed: int = 0) -> CountedTraffic:
    """Global-memory bytes the case's calls move, counted under the CUDA simulator."""
    import numba_flash
    from numba_flash import reference
    from numba_flash.instrument import count_traffic

    x = host_inputs(case, seed)
    q, k, v, do = x["q"], x["k"], x["v"], x["do"]
    tiling = case.tiling_object()
    mask = case.mask_kwargs()
    reports = []
    if case.method == "standard":
        reports.append(count_traffic(numba_flash.standard_attention, q, k, v, causal=case.causal, tiling=tiling))
    else:
        reports.append(count_traffic(numba_flash.flash_attention, q, k, v, **mask,
                                     algorithm=case.method, tiling=tiling))
    if case.passes == "fwd_bwd":
        o, lse = reference.attention_forward(q, k, v, **mask)
        o, lse = o.astype(q.dtype), lse.astype(np.float32)
        if case.method == "standard":
            p = reference.attention_probs(q, k, causal=case.causal).astype(np.float32)
            reports.append(count_traffic(numba_flash.standard_attention_backward, do, q, k, v, o, p,
                                         causal=case.causal, tiling=tiling))
        else:
            reports.append(count_traffic(numba_flash.flash_attention_backward, do, q, k, v, o, lse,
                                         **mask, tiling=tiling, deterministic=case.deterministic,
                                         algorithm=BACKWARD_ALGORITHM[case.method]))
    return CountedTraffic(read_bytes=float(sum(r.hbm_read_bytes for r in reports)),
                          write_bytes=float(sum(r.hbm_write_bytes for r in reports)),
                          kv_read_bytes=float(sum(r.hbm[n].reads * r.element_bytes(n)
                                                  for r in reports for n in KV_TENSORS if n in r.hbm)))

"""The deterministic backward runs the FFMA forward again: its gradients are those of its own
fp32 S, whatever forward made the o and lse it is given (which it does not read)."""
import numpy as np

import numba_flash as nf
from numba_flash import reference as ref
from simulator import Workload, predict
from simulator.flash import RECOMPUTED, recompute_tiling



def test_the_same_gradients_after_any_forward_and_from_garbage_o_and_lse(rng):
    """Tensor-core forward, FFMA forward, or NaN in place of o and lse: bitwise the same dq, dk,
    dv (causal, N_q != N_k, logits x30 as where the tensor-core forward's L failed it)."""
    q, do = (rng.standard_normal((1, 2, 19, 24)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((1, 2, 23, 24)).astype(np.float32) for _ in range(2))
    q *= np.float32(30)
    runs = []
    for o, lse in (nf.flash_attention(q, k, v, causal=True, return_lse=True),
                   nf.flash_attention(q, k, v, causal=True, return_lse=True, algorithm="fa2_fma"),
                   (np.full_like(q, np.nan), np.full(q.shape[:-1], np.nan, np.float32))):
        runs.append(nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, deterministic=True))
    for got in runs[1:]:
        for a, b in zip(runs[0], got):
            np.testing.assert_array_equal(a, b)
    x64 = [x.astype(np.float64) for x in (do, q, k, v)]
    for a, r in zip(runs[0], ref.attention_backward(*x64, causal=True)):
        assert np.abs(a - r).max() <= 1e-5 * np.abs(r).max()


def test_the_plan_runs_the_ffma_forward_first_at_its_default_tiling():
    """Four launches: the forward again (its own tiling, writing the recomputed O and L), D
    from that O, dK / dV and dQ from that L; the caller's O and L are not read."""
    w = Workload(2, 3, 1000, 700, 64, causal=True)
    plan = predict("flash_backward_deterministic", w)
    forward, pre, kv, dq = plan.phases
    assert forward.kernel == "flash_forward_v2" and forward.tiling == recompute_tiling(w.d)
    assert recompute_tiling(w.d) == nf.Tiling(128, 64)          # the FFMA forward's default
    bh = w.B * w.H
    assert dict(forward.hbm_writes) == {RECOMPUTED["O"]: bh * w.N_q * w.d, RECOMPUTED["L"]: bh * w.N_q}
    assert pre.hbm_reads[RECOMPUTED["O"]] == bh * w.N_q * w.d
    assert {RECOMPUTED["L"]} <= set(kv.hbm_reads) and {RECOMPUTED["L"]} <= set(dq.hbm_reads)
    read = {name for p in plan.phases for name in p.hbm_reads}
    assert not read & {"O", "L"}
    assert plan.workspace[RECOMPUTED["O"]] == bh * 1000 * 64 and plan.workspace[RECOMPUTED["L"]] == bh * 1000

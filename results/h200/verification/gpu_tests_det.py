"""tests/test_gpu.py's reference checks (every backward, deterministic included) and its
reproducibility test, called directly after a warm-up of their kernels only (pytest -m gpu
would build every gpu test's kernels first)."""
import sys
import time
sys.path.insert(0, ".")


def main():
    import numpy as np
    import numba_flash as nf
    from tests import test_gpu as t
    configs = []
    for B, H, nq, nk, d, c in t.SHAPES:
        s = dict(d=d, n_q=nq, n_k=nk, causal=c)
        configs += [nf.KernelConfig(**s, forward="fa2", backward="fa2"),
                    nf.KernelConfig(**s, forward="fa1", backward="fa2_fma"),
                    nf.KernelConfig(**s, forward=None, backward="fa2_fma", deterministic=True)]
    configs.append(nf.KernelConfig(d=64, n_q=1000, causal=True, backward="fa2_fma", deterministic=True))
    t0 = time.time()
    rows = nf.warmup(configs)
    print(f"warm-up {time.time() - t0:.0f} s, {len(rows)} configs, errors {[r['error'] for r in rows if r['error']]}", flush=True)
    failed = 0
    for shape in t.SHAPES:
        try:
            t.test_flash_against_reference(np.random.default_rng(sum(shape)), *shape)
            print("ok  ", shape, flush=True)
        except AssertionError as e:
            failed += 1
            print("FAIL", shape, str(e)[:400], flush=True)
    t.test_reproducible_forward_and_deterministic_backward(np.random.default_rng(1))
    print("ok   test_reproducible_forward_and_deterministic_backward", flush=True)
    print(f"{failed} failed", flush=True)


if __name__ == "__main__":
    main()

"""Build the fp16x3 GPU tests' and FP16X3_BACKWARD's kernels, one process per distinct kernel."""
import dataclasses as D, sys, time
import numba_flash as nf
from simulator.fp16x3 import default_tiling, backward_default_tiling
from tests.test_gpu_fp16x3 import KERNELS
from experiments.levels import FP16X3_BACKWARD
from experiments.common.kernels import kernel_config
if __name__ == "__main__":
    seen = {}
    for c in KERNELS + [kernel_config(x) for x in FP16X3_BACKWARD]:
        n_k = c.n_k or c.n_q
        if c.forward:
            t = default_tiling(c.d, c.n_q, n_k) if c.tiling is None else c.tiling
            seen.setdefault(("f", c.d, c.causal, c.window, c.group, t), D.replace(c, backward=None))
        if c.backward:
            t = backward_default_tiling(c.d, c.n_q, n_k)
            seen.setdefault(("b", c.d, c.causal, c.window, c.group, t), D.replace(c, forward=None))
    cs = list(seen.values())
    print(len(cs), "configs", flush=True)
    if sys.argv[1:] == ["list"]:
        for k in seen: print(k)
        sys.exit()
    start = time.time()
    for r in nf.warmup(cs, processes=16):
        print(r["d"], r["n_q"], r["causal"], r["forward"], r["backward"], round(r["forward_s"] + r["backward_s"]),
              r["compiled"], r["loaded"], r["error"], flush=True)
    print("warm-up", round(time.time() - start), "s", flush=True)

"""How many sectors reach L2 when warps store 16-bit words as the fp16 / bf16 forward stores O?
ncu on a kernel that runs only that epilogue.

    python tools/store_merge.py OUT.json        # needs a GPU and ncu on the PATH
    python tools/store_merge.py --pressure OUT.json   # one block an SM, long gaps
    python tools/store_merge.py --kernel OUT.json     # the half forward itself, same counters
    python tools/store_merge.py --context OUT.json    # the epilogue beside what the kernel does

The half forward (numba_flash/kernels/flash_forward_half.py) stores O one 16-bit word a thread
a store: a warp's store (mt, hr, n, e) writes rows g = 0..7 (+ 16 mt + 8 hr) at columns
8 n + 2 t + e (t = 0..3), a quarter of eight sectors; four consecutive stores (n = 2k, 2k + 1,
e = 0, 1) fill a sector. The model (``simulator.sectors``) counts each store's sectors whole,
four times O's sectors; the H200 measured 1.9-2.2 x at d = 32, 3.1-3.4 x at d = 64, 3.4-3.5 x
at d = 80 and 3.6-3.8 x at d = 128 (results/h200/levels/levels.csv): L1 merges some stores
before L2. This kernel stores exactly that pattern (warps of 16 MT rows, 4 warps a block, rows
one after another) for several d and MT, with and without GAP dependent FMAs before each store,
and reports L2's write sectors over O's sectors. Writes OUT (JSON, one record a launch)."""
import sys

import numpy as np
from numba import cuda, float32, uint16

from l2_drain import profile_each, write_json

DS = (16, 32, 48, 64, 80, 96, 128, 256)
MTS = (1, 2)
GAPS = (0, 8)
WARPS = 4
O_BYTES = 32 * 2**20
METRICS = ("lts__t_sectors_srcunit_tex_op_write.sum,l1tex__m_l1tex2xbar_write_sectors_mem_lg_op_st.sum,"
           "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,"
           "gpu__time_duration.sum")


#: low store pressure: one block an SM (132, the H200's and H100's SMs), 1 or 4 warps, long gaps
SMS = 132
PRESSURE = [(d, 1, gap, warps, SMS) for d in (32, 64, 128) for warps in (1, 4) for gap in (0, 64, 512)]


#: what else the kernel does around its stores (``--context``): "lse" stores a 32-bit word a row
#: (lanes t = 0) after each row group, as the kernel's lse; "smem" fills and re-reads 48 KB of
#: shared memory first (the kernel's carveout); "spin" runs 2000 x (block % 8) dependent FMAs
#: first (blocks ending at different times, as after a main loop); "all": the three
CONTEXTS = ("", "lse", "smem", "spin", "all")
CONTEXT = [(d, 2, 0, WARPS, 0, c) for d in (32, 64, 128) for c in CONTEXTS]
SMEM_WORDS = 12288
SPIN = 2000


def configs():
    """(d, MT, gap, warps a block, blocks or 0 for one block a row group, context) of each
    profiled launch, in order: ``--pressure`` runs PRESSURE, ``--context`` CONTEXT instead."""
    if "--pressure" in sys.argv:
        return [c + ("",) for c in PRESSURE]
    if "--context" in sys.argv:
        return CONTEXT
    return [(d, mt, gap, WARPS, 0, "") for d in DS for mt in MTS for gap in GAPS]


def rows_of(d: int, mt: int, warps: int) -> int:
    """Rows of the (rows, d) output: about O_BYTES (an eighth under low pressure), a whole
    number of row groups (``warps`` x 16 MT rows)."""
    br = warps * 16 * mt
    size = O_BYTES // 8 if "--pressure" in sys.argv else O_BYTES
    return max(1, size // (2 * d) // br) * br


def make_kernel(d: int, mt_count: int, gap: int, warps: int, context: str = ""):
    """The half forward's O epilogue for head dim ``d`` and ``mt_count`` 16-row tiles a warp,
    blocks striding over the row groups, in ``context`` (CONTEXTS): o (rows, d) uint16, flat;
    lse (rows,) float32."""
    ot = (d + 7) // 8
    br = warps * 16 * mt_count
    lse_stores = context in ("lse", "all")
    smem_words = SMEM_WORDS if context in ("smem", "all") else 1
    spin = SPIN if context in ("spin", "all") else 0

    @cuda.jit
    def store_o(o, lse, seed):
        lane = cuda.threadIdx.x % 32
        warp = cuda.threadIdx.x // 32
        g, t = lane // 4, lane % 4
        x = seed + float32(lane)
        buf = cuda.shared.array(smem_words, float32)
        if smem_words > 1:
            for i in range(cuda.threadIdx.x, smem_words, cuda.blockDim.x):
                buf[i] = x
            cuda.syncthreads()   # the words re-read below were written by other threads
            for i in range(cuda.threadIdx.x, smem_words, cuda.blockDim.x):
                x += buf[smem_words - 1 - i]
        for _ in range(spin * (cuda.blockIdx.x % 8)):
            x = x * float32(0.999) + float32(0.5)
        group = cuda.blockIdx.x
        while group * br < o.size // d:
            wrow = group * br + warp * 16 * mt_count
            for mt in range(mt_count):
                for hr in range(2):
                    r = wrow + 16 * mt + g + 8 * hr
                    at = r * d + 2 * t
                    for n in range(ot):
                        for e in range(2):
                            if 8 * n + 2 * t + e < d:
                                for _ in range(gap):
                                    x = x * float32(0.999) + float32(0.5)
                                o[at + 8 * n + e] = uint16(x)
                    if lse_stores and t == 0:
                        lse[r] = x
            group += cuda.gridDim.x
    return store_o


def child():
    """Every launch profiled (``l2_drain.profile_each``)."""
    launches = []
    for d, mt, gap, warps, blocks, context in configs():
        rows = rows_of(d, mt, warps)
        kernel = make_kernel(d, mt, gap, warps, context)
        grid = blocks or rows // (warps * 16 * mt)
        o, lse = cuda.device_array(rows * d, np.uint16), cuda.device_array(rows, np.float32)
        launches.append(lambda k=kernel, g=grid, w=warps, o=o, lse=lse: k[g, 32 * w](o, lse, float32(1.0)))
    profile_each(launches)


KERNEL_DS = (32, 64, 128)


def main_kernel(path):
    """``--kernel``: the fp16 forward of main (its default tiling) at (4, 8, 2048, d) under
    ncu, the store counters of its launch over O's sectors."""
    import tempfile
    from pathlib import Path

    import numba_flash
    from experiments.common.cases import Case
    from experiments.common.kernels import kernel_config
    from experiments.common.ncu import Counters, profile_cases
    cases = [Case("fa2", "fwd", 4, 8, 2048, d, dtype="float16") for d in KERNEL_DS]
    numba_flash.warmup([kernel_config(c) for c in cases])
    with tempfile.TemporaryDirectory() as tmp:
        counters = profile_cases(cases, Path(tmp))
    records = []
    for c in cases:
        got = counters[c]
        if not isinstance(got, Counters):
            sys.exit(f"{c}: {got}")
        o_sectors = c.B * c.H * c.N * -(-2 * c.d // 32)
        for k in got.per_kernel:
            rec = {"d": c.d, "B": c.B, "H": c.H, "N": c.N, "o_sectors": o_sectors, **k}
            records.append(rec)
            print(f"d {c.d:3d} {k['name'][:48]:48s} xbar st / O sectors {k.get('xbar_st_sectors', 0) / o_sectors:.3f}"
                  f"  L1 st sectors {k.get('l1_st_sectors', 0) / o_sectors:.3f}"
                  f"  L2 write {k.get('l2_write_sectors', 0) / o_sectors:.3f}  requests {k.get('l1_st_requests', 0):.0f}"
                  f"  {k.get('gpu_time_ns', 0) / 1e3:.1f} us", flush=True)
    write_json(path, records)


def main(path):
    from experiments.common.ncu import profile_launches
    code = "import sys; sys.path.insert(0, 'tools'); import store_merge; store_merge.child()"
    kernels = profile_launches(METRICS, code, len(configs()), sys.argv[1:-1], timeout=600)
    records = []
    for (d, mt, gap, warps, blocks, context), k in zip(configs(), kernels):
        rows = rows_of(d, mt, warps)
        o_sectors = rows * -(-2 * d // 32) + (rows // 8 if context in ("lse", "all") else 0)
        rec = {"d": d, "mt": mt, "gap": gap, "warps": warps, "blocks": blocks, "context": context, "rows": rows,
               "o_sectors": o_sectors, **k,
               "l2_write_per_o_sector": k["l2_write_sectors"] / o_sectors}
        records.append(rec)
        print(f"d {d:3d} MT {mt} gap {gap:3d} warps {warps} blocks {blocks or 'all'} {context or '-':4s}: L2 write sectors / O sectors {rec['l2_write_per_o_sector']:.3f}"
              f"  xbar {k['xbar_st_sectors'] / o_sectors:.3f}  L1 st sectors {k['l1_st_sectors'] / o_sectors:.3f}"
              f"  requests {k['l1_st_requests']:.0f}  {k['gpu_time_ns'] / 1e3:.1f} us", flush=True)
    write_json(path, records)


if __name__ == "__main__":
    main_kernel(sys.argv[-1]) if "--kernel" in sys.argv else main(sys.argv[-1])

"""Does L2 write dirty lines back while a kernel runs on after writing them? ncu on a kernel that
streams ``reads`` words read per word written into ``write`` MiB, then keeps one thread
waiting ``wait`` ns on %globaltimer (the rest of the grid has exited: DRAM and L2 idle).

    python tools/l2_drain.py OUT.json        # needs a GPU and ncu on the PATH
    python tools/l2_drain.py --hot OUT.json  # the small-write hot sweep below

The cost model's dirty residue (``simulator.local.dirty_residue``) says a launch's writes that
fit L2 stay dirty until it ends; the H200's counters show the slow FFMA forwards writing back
16-23 % of an O that fits (results/h200/levels/levels.csv). If the DRAM writes here grow with
the wait, L2 drains idle dirty lines by age or by idleness, and the model needs that rate.
Writes OUT (JSON: one record per launch, in ``configs()`` order, with ncu's readings).

``--hot``: calibrate's hot-set kernel (experiments/common/l2_residue.py: ``reads`` words streamed
a word written beside a buffer every block keeps re-reading) at HOT_WRITE_MIB written, far below
the L2, against the hot buffer's size: where the DRAM writes start tells how much L2 a line every
SM re-reads takes (one copy, or one in each L2 partition)."""
import json
import sys

import numpy as np
from numba import cuda, float32

from experiments.common.ncu import profile_launches

WRITE_MIB = (4, 16)
READS = (0, 3)
WAIT_NS = (0, 10_000, 50_000, 200_000, 1_000_000, 4_000_000)
BLOCKS, THREADS = 4 * 132, 256
METRICS = "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"


HOT_WRITE_MIB = 8
HOT = [(r, h, 0) for r in (1, 3) for h in (0, 2, 4, 8, 12, 16, 20)]


def configs():
    """(write MiB, reads per write, wait ns) of each profiled launch, in order."""
    return [(w, r, t) for w in WRITE_MIB for r in READS for t in WAIT_NS]


def make_kernel():
    """``out[e] = 1 + sum_j src[j n + e]`` over a grid-stride loop (n = out.size), then thread 0
    of block 0 spins until ``wait_ns`` of %globaltimer have passed."""
    from experiments.common.microbench import primitives
    timer = primitives().globaltimer

    @cuda.jit
    def write_then_wait(out, src, reads, wait_ns):
        n = out.size
        e = cuda.grid(1)
        while e < n:
            v = float32(1.0)
            for j in range(reads):
                v += src[j * n + e]
            out[e] = v
            e += cuda.gridsize(1)
        if wait_ns > 0 and cuda.blockIdx.x == 0 and cuda.threadIdx.x == 0:
            start = timer()
            while timer() - start < wait_ns:
                pass
    return write_then_wait


def profile_each(launches):
    """Each launch (a callable) once unprofiled (compile, warm), then each again under the
    profiler's start/stop, one at a time (the tools' ncu children)."""
    for launch in launches:
        launch()
    cuda.synchronize()
    cuda.profile_start()
    for launch in launches:
        launch()
        cuda.synchronize()
    cuda.profile_stop()


def child():
    """Every launch profiled (``profile_each``), each into its own output buffer (so no launch
    finds another's lines in L2)."""
    kernel = make_kernel()
    launches = []
    for w, r, t in configs():
        n = w * 2**18
        src = cuda.to_device(np.ones(max(r, 1) * n, np.float32))
        out = cuda.device_array(n, np.float32)
        launches.append(lambda out=out, src=src, r=r, t=t: kernel[BLOCKS, THREADS](out, src, r, t))
    profile_each(launches)


def main_hot(path):
    """The ``--hot`` sweep: one record a launch of HOT (reads, hot MiB, spin)."""
    code = ("import sys; from experiments.common.l2_residue import run_hot; "
            f"run_hot({HOT!r}, {HOT_WRITE_MIB * 2**20}, profile=True)")
    kernels = profile_launches(METRICS, code, len(HOT))
    records = []
    for (r, h, _), k in zip(HOT, kernels):
        rec = {"write_mib": HOT_WRITE_MIB, "reads": r, "hot_mib": h, **k,
               "dram_write_share": k["dram_write_bytes"] / (HOT_WRITE_MIB * 2**20)}
        records.append(rec)
        print(f"write {HOT_WRITE_MIB} MiB reads {r} hot {h:2d} MiB: DRAM write {k['dram_write_bytes'] / 1e6:7.3f} MB "
              f"({rec['dram_write_share']:.3f} of written) read {k['dram_read_bytes'] / 1e6:8.3f} MB "
              f"{k['gpu_time_ns'] / 1e3:.1f} us", flush=True)
    write_json(path, records)


def write_json(path, records):
    """The records, with the run's metadata (device, date, versions, commit), to ``path``."""
    from experiments.common.metadata import run_metadata
    with open(path, "w") as f:
        meta = run_metadata(sys.argv[0].rsplit("/", 1)[-1].removesuffix(".py"), "gpu", "python " + " ".join(sys.argv))
        json.dump({"metadata": meta, "records": records}, f, indent=1)


def main(path):
    code = "import sys; sys.path.insert(0, 'tools'); import l2_drain; l2_drain.child()"
    kernels = profile_launches(METRICS, code, len(configs()))
    records = []
    for (w, r, t), k in zip(configs(), kernels):
        rec = {"write_mib": w, "reads": r, "wait_ns": t, **k}
        rec["dram_write_share"] = k["dram_write_bytes"] / (w * 2**20)
        records.append(rec)
        print(f"write {w:3d} MiB reads {r} wait {t / 1e3:7.0f} us: time {k['gpu_time_ns'] / 1e3:8.1f} us "
              f"DRAM write {k['dram_write_bytes'] / 1e6:8.3f} MB ({rec['dram_write_share']:.3f} of written) "
              f"read {k['dram_read_bytes'] / 1e6:8.3f} MB", flush=True)
    write_json(path, records)


if __name__ == "__main__":
    main_hot(sys.argv[2]) if sys.argv[1] == "--hot" else main(sys.argv[1])

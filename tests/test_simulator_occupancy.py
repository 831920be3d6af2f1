"""The occupancy model (simulator/occupancy.py): hand-derived cases, waves, the ptxas resources
CSV, and the H200's ncu readings of five forward kernels (results/h200/ncu_levels)."""
import csv
import dataclasses
import re
from pathlib import Path

import pytest

from simulator.flash import variant_mask
from simulator.fp16x3 import VARIANT as FP16X3
from simulator.fp16x3 import backward_default_tiling, backward_smem_bytes
from simulator.fp16x3 import default_tiling as fp16x3_tiling
from simulator.fp16x3 import parts_width
from simulator.hardware import A100_40GB, H200
from simulator.occupancy import (RESOURCES_CSV, asked_variant, kernel_resources, occupancy, resources,
                                 waves)
from simulator.tiling import FORWARD_KERNELS, H200_SMEM_PER_BLOCK, KERNELS, Tiling, table_variant

KB = 1024
NCU = Path(__file__).resolve().parent.parent / "results" / "h200" / "ncu_levels"
HEAD_DIMS = (32, 64, 80, 128, 256)


# ---- hand-derived cases (H200: 4 x 16384 registers, 64 warps, 32 blocks, 228 KB) ----------
def test_register_bound_block_of_16_warps():
    # 128 x 32 = 4096 registers a warp: 4 warps a sub-partition, 16 an SM = one 16-warp block
    occ = occupancy(H200, 512, 128, 0)
    assert (occ.blocks_per_sm, occ.binding, occ.registers_per_warp) == (1, ("registers",), 4096)
    assert occ.limits["warps"] == 4 and occ.warp_fraction == 0.25


def test_shared_memory_bound():
    # 50 KB + 1 KB reserved = 52224 B: 233472 // 52224 = 4; 32 registers allow 8, warps 8
    occ = occupancy(H200, 256, 32, 50 * KB)
    assert (occ.blocks_per_sm, occ.binding) == (4, ("shared memory",))
    assert occ.limits == {"registers": 8, "shared memory": 4, "warps": 8, "blocks": 32}
    # 64 registers: 2048 a warp, 8 warps a sub-partition = 32 warps = 4 blocks too: both bind
    assert occupancy(H200, 256, 64, 50 * KB).binding == ("registers", "shared memory")


def test_warp_and_block_bound():
    # 4-warp blocks of 32 registers: 16 by warps (64 / 4), 16 by registers (64 warps' worth)
    occ = occupancy(H200, 128, 32, 0)
    assert (occ.blocks_per_sm, occ.binding) == (16, ("registers", "warps"))
    # 1-warp blocks: 64 by warps, the 32-block limit binds
    occ = occupancy(H200, 32, 32, 0)
    assert (occ.blocks_per_sm, occ.binding, occ.warp_fraction) == (32, ("blocks",), 0.5)


def test_reserved_kilobyte_at_the_edge():
    # two blocks of 115712 B: (115712 + 1024) x 2 = 233472 = 228 KB exactly
    assert occupancy(H200, 128, 32, 115712).blocks_per_sm == 2
    # one byte more rounds the block up to 116864 B: one block (with a 128 B reservation, two)
    occ = occupancy(H200, 128, 32, 115713)
    assert (occ.blocks_per_sm, occ.smem_per_block) == (1, 116864)
    assert occupancy(dataclasses.replace(H200, smem_reserved_per_block=128), 128, 32,
                     115713).blocks_per_sm == 2


def test_registers_rounded_per_warp():
    # 41 x 32 = 1312 registers a warp, allocated 1536: 10 warps a sub-partition (12 unrounded)
    occ = occupancy(H200, 128, 41, 0)
    assert occ.registers_per_warp == 1536
    assert (occ.blocks_per_sm, occ.binding) == (10, ("registers",))


def test_sub_partition_check_and_limits():
    # 10 warps: the hardware check rounds them to 12; 168 registers fit (12 x 5376 <= 65536),
    # 200 do not (launch.jit_options' CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    assert occupancy(H200, 320, 168, 0).blocks_per_sm == 1
    with pytest.raises(ValueError, match="register files"):
        occupancy(H200, 320, 200, 0)
    with pytest.raises(ValueError, match="registers a thread"):
        occupancy(H200, 32, 256, 0)
    with pytest.raises(ValueError, match="threads a block"):
        occupancy(H200, 1025, 32, 0)
    with pytest.raises(ValueError, match="shared memory"):
        occupancy(H200, 128, 32, 227 * KB + 1)
    with pytest.raises(ValueError, match="threads"):
        occupancy(H200, 0, 32, 0)
    # A100: 164 KB a multiprocessor; two blocks of 80 KB + 1 KB fit (162 KB)
    assert occupancy(A100_40GB, 128, 32, 80 * KB).blocks_per_sm == 2


def test_carveout_is_the_smallest_holding_the_blocks():
    # one 168-register block of 70144 B (Algorithm 1 at 64 x 64, d = 64): 71168 B -> 100 KB,
    # which holds one block though 228 KB would hold three
    occ = occupancy(H200, 256, 168, 70144)
    assert (occ.blocks_per_sm, occ.limits["shared memory"]) == (1, 3)
    assert (occ.carveout, occ.smem_limit_at_carveout) == (100 * KB, 1)


def test_waves():
    w = waves(1024, occupancy(H200, 512, 128, 167936), H200)   # tc forward at (4, 16, 4096, 64)
    assert round(w.waves, 2) == 7.76
    assert (w.full_waves, w.tail_blocks, w.rounds) == (7, 1024 - 7 * 132, 8)
    w = waves(264, occupancy(H200, 128, 32, 0), H200)          # 16 blocks an SM: one partial wave
    assert (w.full_waves, w.tail_blocks, w.rounds) == (0, 264, 1)
    with pytest.raises(ValueError):
        waves(0, occupancy(H200, 128, 32, 0), H200)


# ---- the resources CSV ---------------------------------------------------------------------
#: fa2_fp16x3's tilings other than today's defaults that committed ncu measurements or benches
#: ran, and the model re-predicts (their labels name them, ``Br80Bc32``): 80 x 32, the forward's
#: default at d = 128 until 2026-12-06 (results/h200/levels/fp16x3/, results/h100/levels/), and
#: 112 x 32, its default until 2026-12-07 (results/h100/bench/bench.csv,
#: results/h100/levels/fp16x3_backward/). The table tools keep them with ``--add`` or
#: ``--table-extras``.
FP16X3_MEASURED_AT = {("flash_forward_half", Tiling(80, 32), 128), ("flash_forward_half", Tiling(112, 32), 128)}


@pytest.mark.parametrize("causal", [False, True])
def test_the_tilings_committed_measurements_ran_stay_in_the_tables(causal):
    from simulator.issue import loop_record
    from simulator.sass import MAIN_LOOP, sass

    for kernel, tiling, d in FP16X3_MEASURED_AT:
        assert resources(kernel, tiling, d, causal, FP16X3).registers
        assert sass(kernel, tiling, d, causal, FP16X3, region=MAIN_LOOP).hmma
        assert loop_record(kernel, tiling, d, causal, FP16X3)


def test_csv_rows_match_the_tilings():
    """Each row's shared memory and threads are its tiling's; every tiled kernel, variant and
    causal has a row at today's default tiling at each recorded head dim (a default changed
    since fails here); the other rows are the experiments' tilings
    (tests/test_tables_cover_experiments.py)."""
    rows = kernel_resources()
    assert rows
    with open(RESOURCES_CSV, newline="") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    defaults, fp16x3 = set(), set()
    for r in rows:
        assert r.ptxas and re.fullmatch(r"\d{4}-\d\d-\d\d", r.date)
        if asked_variant(r.variant) == FP16X3:   # fa2_fp16x3's kernels: tiles of rows of 2 D16 parts
            backward = r.kernel == "flash_backward_half"       # (and dS^T's two parts)
            assert r.dynamic_smem_bytes == (backward_smem_bytes(r.tiling, r.d) if backward else
                                            r.tiling.smem_bytes(r.kernel, parts_width(r.d))), r
            assert r.threads == r.tiling.threads_for(r.kernel), r
            default = backward_default_tiling if backward else fp16x3_tiling
            if r.tiling == default(r.d, None, None):            # its own default, and those
                fp16x3.add((r.kernel, r.d, r.causal))           # committed measurements ran
            else:
                assert (r.kernel, r.tiling, r.d) in FP16X3_MEASURED_AT, r
            continue
        if r.kernel in KERNELS:
            assert r.dynamic_smem_bytes == r.tiling.smem_bytes(r.kernel, r.d or 0), r
            assert r.threads == r.tiling.threads_for(r.kernel), r
            # the variant the kernel is asked for; the tables add warp pairs where the tiling has them
            base = asked_variant(r.variant)
            assert r.variant == table_variant(base, r.tiling), r
            # block-sparse rows: the default tiling nested in FlexAttention's 128 x 128 blocks
            blocks = (128, 128) if base == "sparse" else None
            # (the window experiment's band kernels -- a window's left side, grouped K/V heads --
            # are its extras, at d = 64 alone: variant parts that variant_mask takes off)
            band = variant_mask(base, False)[0] != base
            if r.tiling == Tiling.kernel_default(r.kernel, r.d or 0, block_size=blocks) and not band:
                defaults.add((r.kernel, base, r.d, r.causal))
        else:
            assert r.tiling is None and r.dynamic_smem_bytes == 0
        if r.dynamic_smem_bytes > H200_SMEM_PER_BLOCK:   # io_scaling's FA2 at 64 x 256: compiles,
            with pytest.raises(ValueError, match="exceed"):  # but cannot launch there
                r.occupancy(H200)
        else:
            assert r.occupancy(H200).blocks_per_sm >= 1, r
    per_d = {key for key in defaults if key[2] is not None}    # (the matmul's d is free)
    kinds = {(kernel, variant, causal) for kernel, variant, _, causal in per_d}
    head_dims = {d for _, _, d, _ in per_d}
    assert per_d == {(k, v, d, c) for k, v, c in kinds for d in head_dims}
    # fa2_fp16x3's forward and backward, each at the same head dims, causal and not
    assert fp16x3 == {(k, d, c) for _, d, _ in fp16x3 for c in (False, True)
                      for k in ("flash_forward_half", "flash_backward_half")}
    assert {(d, c) for _, d, c in fp16x3} <= {(d, c) for d in head_dims for c in (False, True)}


def test_csv_was_recorded_from_these_kernel_sources():
    """Registers and spills change with the kernels' code, not only with their tilings: the
    table's rows name the source digest of their kernel (numba_flash.kernel_cache.function_digest)."""
    from numba_flash.kernel_cache import stale_functions

    with open(RESOURCES_CSV, newline="") as f:
        stale = stale_functions(csv.DictReader(f))
    assert not stale, (
        f"the sources of {', '.join(stale)} changed since simulator/kernel_resources.csv was "
        "recorded: rerun `pip install nvidia-cuda-nvrtc; CUDA_HOME=/usr/local/cuda-13.0 python "
        "tools/kernel_resources.py --add`")


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_every_default_launch_was_compiled(d, causal):
    for kernel in ("flash_forward_tc", "flash_backward_tc", "flash_forward_v2", "flash_forward_v1",
                   "flash_backward", "flash_backward_dq"):
        assert resources(kernel, Tiling.kernel_default(kernel, d), d, causal).d == d
    assert resources("flash_backward", Tiling.kernel_default("flash_backward", d), d, causal,
                     "no_atomic_dq").causal == causal
    for variant in ("", "trans_a", "trans_b"):
        assert resources("standard_matmul", Tiling(64, 64), d, causal, variant).d is None
    for kernel, variant in (("softmax", ""), ("ds", ""), ("row_dot", ""), ("row_dot", "zero_dq")):
        assert resources(kernel, None, d, causal, variant).threads == 128


def test_uncompiled_configuration_raises():
    with pytest.raises(LookupError, match="never compiled"):
        resources("flash_forward_tc", Tiling(16, 32), 64, False)
    with pytest.raises(LookupError, match="never compiled"):
        resources("flash_forward_v2", Tiling.kernel_default("flash_forward_v2", 96), 96, False)


# ---- the H200's ncu readings ---------------------------------------------------------------
def _ncu_readings():
    """(profile_forward.py arguments, {metric: value}, kernel name, block threads, grid blocks)
    of each levels_i.csv, in the order tools/ncu_levels.sh ran them."""
    runs = [line[4:].strip() for line in (NCU / "ncu_levels.log").read_text().splitlines()
            if line.startswith("### --")]
    readings = []
    for i, args in enumerate(runs):
        with open(NCU / f"levels_{i}.csv", newline="") as f:
            lines = f.read().splitlines()
        rows = list(csv.DictReader(lines[next(j for j, s in enumerate(lines) if s.startswith('"ID"')):]))
        metrics = {r["Metric Name"]: float(r["Metric Value"].replace(",", "")) for r in rows}
        block = [int(x) for x in re.findall(r"\d+", rows[0]["Block Size"])]
        grid = [int(x) for x in re.findall(r"\d+", rows[0]["Grid Size"])]
        readings.append((args.split(), metrics, rows[0]["Kernel Name"].split("[")[0],
                         block[0] * block[1] * block[2], grid[0] * grid[1] * grid[2]))
    return readings


def _configuration(args):
    algorithm, d = args[args.index("--algorithm") + 1], int(args[args.index("--d") + 1])
    kernel = FORWARD_KERNELS[algorithm]
    return kernel, Tiling.kernel_default(kernel, d), d, "--causal" in args


NCU_READINGS = _ncu_readings()


def test_five_ncu_readings():
    assert len(NCU_READINGS) == 5


@pytest.mark.parametrize("args, metrics, name, threads, grid", NCU_READINGS,
                         ids=[" ".join(r[0]) for r in NCU_READINGS])
def test_agrees_with_ncu(args, metrics, name, threads, grid):
    r = resources(*_configuration(args))
    assert (r.function, r.threads) == (name, threads)
    assert r.registers == metrics["launch__registers_per_thread"]
    occ = r.occupancy(H200)
    assert occ.limits["registers"] == metrics["launch__occupancy_limit_registers"]
    assert occ.smem_limit_at_carveout == metrics["launch__occupancy_limit_shared_mem"]
    assert occ.warp_fraction * 100 == pytest.approx(
        metrics["sm__warps_active.avg.pct_of_peak_sustained_active"], abs=0.1)
    assert waves(grid, occ, H200).waves == pytest.approx(
        metrics["launch__waves_per_multiprocessor"], abs=0.005)

"""Hardware specs, measured overrides, and Workload validation."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import Hardware, Workload
from simulator.hardware import A100_40GB, A100_80GB, H100_SXM, H200, H200_MEASURED, KNOWN, by_name


def test_datasheet_values():
    assert (A100_40GB.hbm_bandwidth, A100_80GB.hbm_bandwidth) == (1555e9, 2039e9)
    assert A100_40GB.smem_per_block == 163 * 1024 and A100_40GB.sm_count == 108
    assert H100_SXM.smem_per_block == H200.smem_per_block == 232448
    assert H200.l2_bytes == 60 * 2**20 and H200.hbm_bandwidth == 4.8e12
    assert H200.peak("fp16") == 989.4e12 and A100_40GB.peak("fp32") == 19.5e12
    for hw in KNOWN.values():
        for key in ("hbm_bandwidth", "sm_count", "smem_per_block", "l2_bytes", "peak_flops.fp32"):
            assert hw.sources[key]


def test_measured_values_keep_their_source():
    assert H200_MEASURED.hbm_bandwidth == 4.19e12 and H200_MEASURED.peak("fp32") == 50.6e12
    assert H200_MEASURED.peak("fp16") == H200.peak("fp16")
    assert "copy" in H200_MEASURED.sources["hbm_bandwidth"]
    assert "SGEMM" in H200_MEASURED.sources["peak_flops.fp32"]
    assert H200_MEASURED.sources["peak_flops.fp16"] == H200.sources["peak_flops.fp16"]
    hw = H200.with_measured(hbm_bandwidth=4.0e12, source="bench X")
    assert hw.sources["hbm_bandwidth"] == "bench X" and H200.hbm_bandwidth == 4.8e12
    with pytest.raises(ValueError, match="bandwith"):
        H200.with_measured(bandwith=1.0, source="typo")


def test_by_name_is_forgiving_about_spelling():
    assert by_name("h100-sxm") is H100_SXM and by_name("H200 measured") is H200_MEASURED
    with pytest.raises(ValueError, match="V100"):
        by_name("V100")


def test_hardware_validation_names_the_field():
    base = dict(name="x", hbm_bandwidth=1e12, sm_count=1, smem_per_sm=1024, smem_per_block=1024,
                l2_bytes=1024, peak_flops={"fp32": 1e12})
    Hardware(**base)
    for field, bad in (("hbm_bandwidth", 0), ("sm_count", -1), ("l2_bytes", True),
                       ("smem_per_block", 4096)):
        with pytest.raises(ValueError, match=field):
            Hardware(**{**base, field: bad})
    with pytest.raises(ValueError, match="fp8"):
        Hardware(**{**base, "peak_flops": {"fp8": 1e15}})
    with pytest.raises(ValueError, match="fp16"):
        Hardware(**base).peak("fp16")


def test_roofline_takes_the_slower_of_memory_and_arithmetic():
    assert H200.roofline_seconds(4.8e12, 1.0, "fp32") == 1.0
    assert H200.roofline_seconds(1.0, 2 * 67e12, "fp32") == 2.0


@settings(max_examples=30, deadline=None)
@given(field=st.sampled_from(["B", "H", "N_q", "N_k", "d"]),
       bad=st.one_of(st.integers(max_value=0), st.floats(allow_nan=True), st.just(True), st.just("8")))
def test_workload_rejects_bad_shapes_naming_the_field(field, bad):
    args = dict(B=1, H=1, N_q=4, N_k=4, d=2)
    with pytest.raises(ValueError, match=f"Workload.{field} "):
        Workload(**{**args, field: bad})


def test_workload_dtype_causal_and_sizes():
    with pytest.raises(ValueError, match="dtype_bytes"):
        Workload(1, 1, 4, 4, 2, dtype_bytes=8)
    with pytest.raises(ValueError, match="causal"):
        Workload(1, 1, 4, 4, 2, causal=1)
    w = Workload(2, 3, 5, 7, 4, dtype_bytes=2)
    assert w.BH == 6 and w.precision == "fp16"
    assert [w.tensor_elements(t) for t in ("Q", "dK", "S", "L")] == [6 * 20, 6 * 28, 6 * 35, 6 * 5]
    with pytest.raises(ValueError, match="X"):
        w.tensor_elements("X")


def test_workload_diagonal():
    for bad in (True, 1.0, "0"):
        with pytest.raises(ValueError, match="Workload.diagonal must be an int or None"):
            Workload(1, 1, 4, 6, 2, causal=True, diagonal=bad)
    with pytest.raises(ValueError, match="Workload.diagonal .* causal=True"):
        Workload(1, 1, 4, 6, 2, diagonal=0)
    assert Workload(1, 1, 4, 6, 2, causal=True).causal_diagonal == 2          # bottom-right
    assert Workload(1, 1, 4, 6, 2, causal=True, diagonal=-1).causal_diagonal == -1
    # clamped to [-N_q, N_k]: the same mask (none visible / all visible), and ints that fit int64
    assert Workload(1, 1, 4, 6, 2, causal=True, diagonal=-2**70).causal_diagonal == -4
    assert Workload(1, 1, 4, 6, 2, causal=True, diagonal=2**70).causal_diagonal == 6

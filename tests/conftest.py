"""Shared test set-up: hypothesis profiles and the gpu marker.

Run under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, as README's test command does) on
machines without a GPU; the ``gpu`` tests run only on a real device (``pytest -m gpu``).
"""
import os
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=12, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def pytest_collection_modifyitems(config, items):
    if SIMULATOR:
        skip = pytest.mark.skip(reason="needs a real CUDA GPU (NUMBA_ENABLE_CUDASIM=1 is set)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _gpu_kernels_built(request):
    """On a GPU, every kernel the gpu tests launch is built first, in parallel processes
    (tests/gpu_kernels.py), so the tests load them from the disk cache: only the collected
    modules' own ``KERNELS`` when each gpu test comes from a module that lists them (e.g.
    ``pytest tests/test_gpu_varlen.py``), else all of them."""
    modules = {item.module for item in request.session.items if "gpu" in item.keywords}
    if SIMULATOR or not modules:
        return
    import time

    import numba_flash as nf

    from .gpu_kernels import CONFIGS

    listed = all(hasattr(m, "KERNELS") for m in modules)
    configs = list(dict.fromkeys(c for m in modules for c in m.KERNELS)) if listed else CONFIGS
    start = time.perf_counter()
    rows = nf.warmup(configs)
    compiled = sum(row["compiled"] for row in rows)
    print(f"\nwarm-up: {len(rows)} configs, {compiled} kernels compiled, "
          f"{sum(row['loaded'] for row in rows)} loaded, {time.perf_counter() - start:.0f} s")


@pytest.fixture
def throughput_trips(monkeypatch):
    """The runtime model's main-loop trips from its pipe throughputs, not the issue simulator
    (seconds a large-tile configuration such as Algorithm 1 at 64 x 128): for tests of the
    experiments' plumbing at GPU sizes, not of the model (tests/test_simulator_* test it)."""
    monkeypatch.setattr("simulator.runtime._simulated_trip", lambda *args, **kwargs: None)


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name: fresh, non-zero inputs, reproducible failures."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))

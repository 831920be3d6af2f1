"""experiments.train_gpt: the tiny configuration trained with our attention (CPU tensors, on the
CUDA simulator) against torch's SDPA from the same seed; the corpus is the same bytes for a seed."""
import hashlib
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from experiments import train_gpt  # noqa: E402
from experiments.common.corpus import generate  # noqa: E402

#: sha256 of generate(10_000, seed=0): the corpus must be these bytes on every machine.
CORPUS_DIGEST = "4e9c9e3881aed6dae34a8a5323bbb7ff22c9b0aaab6aca53dad171b1091ed72d"


def test_numba_flash_trains_like_torch_sdpa():
    setup = replace(train_gpt.CPU_SETUP, steps=3)
    cpu = torch.device("cpu")
    ours = train_gpt.train("numba_flash", setup, cpu).losses
    theirs = train_gpt.train("sdpa", setup, cpu).losses
    assert len(ours) == 3
    assert ours == pytest.approx(theirs, rel=1e-4, abs=0)
    assert ours[-1] < ours[1] < ours[0]


def test_gpt2_small_size_on_bytes():
    assert train_gpt.parameter_count(train_gpt.GPU_SETUP.model) == 86_039_040


def test_corpus_is_deterministic():
    text = generate(20_000, seed=3)
    assert len(text) == 20_000 and text.isascii()
    assert text == generate(20_000, seed=3)
    assert text[:5_000] == generate(5_000, seed=3)
    assert text != generate(20_000, seed=4)
    assert hashlib.sha256(generate(10_000, seed=0)).hexdigest() == CORPUS_DIGEST

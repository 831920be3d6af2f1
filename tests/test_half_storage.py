"""The IO-baseline kernels storing fp16 / bf16 (the standard attention forward and backward, the
Algorithm 1 forward "fa1"), under the CUDA simulator: every HBM tensor in the inputs' format
(no fp32 copies), held to flash-attention's rule -- error against a float64 reference on the
same rounded inputs at most 2x (outputs) / 3x (gradients) that of a plain same-format
implementation (reference.plain_attention_*) -- at awkward shapes; bad half input named.
Their global-memory traffic, counted element by element, equals the model's at 2 bytes each."""
import dataclasses

import ml_dtypes
import numpy as np
import pytest

import numba_flash as nf
import simulator
from numba_flash import memory, precision, reference
from numba_flash.instrument import count_traffic

from .helpers import FLOOR, FORMATS, check_half_forward, half_inputs, rel

#: n_q, n_k, d, causal, diagonal, tiling (the matmuls' output tiles; fa1's Br x Bc)
SHAPES = [
    (1, 17, 24, False, None, nf.Tiling(4, 8)),    # one query
    (17, 1, 40, True, None, nf.Tiling(8, 4)),     # one key, bottom-right: rows that see nothing
    (13, 29, 59, True, 0, nf.Tiling(8, 8)),       # odd d (ragged k-chunks), top-left, N_q < N_k
    (29, 13, 24, True, None, nf.Tiling(8, 4)),    # N_q > N_k, bottom-right: row blocks that see nothing
]


def plain_probs(q, k, fmt, **mask):
    """The plain same-format implementation's P (S rounded, softmax in fp32, P rounded): its
    o = round(P I) for v = the identity, exactly P."""
    n_k = k.shape[-2]
    eye = np.broadcast_to(np.eye(n_k, dtype=np.float32), q.shape[:2] + (n_k, n_k))
    return reference.plain_attention_forward(q, k, eye, fmt, **mask)


def plain_saved(q, k, v, fmt, **mask):
    """The o and P that reference.plain_attention_backward differentiates through (P from the
    unrounded fp32 scores, rounded; o = P v rounded), in ``fmt``: the backward's inputs, so that
    its rule measures the backward, not the forward's rounding of S (large with large logits)."""
    p = precision.round_to(reference.attention_probs(q, k, **mask, dtype=np.float32), fmt)
    return precision.round_to(p @ v.astype(np.float32), fmt).astype(q.dtype), p.astype(q.dtype)


def check_standard(fmt, n_q, n_k, d, causal, diagonal, tiling, logit_scale=1.0, seed=0):
    """standard_attention and its backward (from the plain implementation's o and P:
    ``plain_saved``) on fresh ``fmt`` inputs, poisoned outputs: formats, shapes, masked
    probabilities exactly 0, and flash-attention's rule for o, p and the gradients."""
    rng = np.random.default_rng(seed)
    q, k, v, do = half_inputs(rng, fmt, 1, 2, n_q, n_k, d, logit_scale)
    mask = dict(causal=causal, diagonal=diagonal)
    with nf.poison_outputs():
        o, p = nf.standard_attention(q, k, v, **mask, tiling=tiling, return_probs=True)
        grads = nf.standard_attention_backward(do, q, k, v, *plain_saved(q, k, v, fmt, **mask),
                                               causal=causal, tiling=tiling)
    assert o.dtype == p.dtype == FORMATS[fmt] and o.shape == q.shape and p.shape == (1, 2, n_q, n_k)
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    ref_o = reference.attention_forward(*f64[1:], **mask)[0]
    ref_p = reference.attention_probs(*f64[1:3], **mask)
    plain_o = reference.plain_attention_forward(q, k, v, fmt, **mask)
    assert rel(o, ref_o) <= 2 * rel(plain_o, ref_o) + FLOOR, (rel(o, ref_o), rel(plain_o, ref_o))
    assert rel(p, ref_p) <= 2 * rel(plain_probs(q, k, fmt, **mask), ref_p) + FLOOR
    assert np.all(p.astype(np.float32)[ref_p == 0] == 0)
    refs = reference.attention_backward(*f64, **mask)
    plains = reference.plain_attention_backward(do, q, k, v, fmt, **mask)
    for name, g, ref, plain, x in zip(("dq", "dk", "dv"), grads, refs, plains, (q, k, v)):
        assert g.dtype == FORMATS[fmt] and g.shape == x.shape, name
        assert rel(g, ref) <= 3 * rel(plain, ref) + FLOOR, (name, rel(g, ref), rel(plain, ref))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("n_q,n_k,d,causal,diagonal,tiling", SHAPES)
def test_standard_within_the_rule(fmt, n_q, n_k, d, causal, diagonal, tiling):
    check_standard(fmt, n_q, n_k, d, causal, diagonal, tiling)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_standard_large_logits(fmt):
    check_standard(fmt, 9, 21, 24, False, None, nf.Tiling(8, 8), logit_scale=30.0, seed=3)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("n_q,n_k,d,causal,diagonal,tiling", SHAPES)
def test_fa1_forward_within_the_rule(fmt, n_q, n_k, d, causal, diagonal, tiling):
    check_half_forward(fmt, 1, 2, n_q, n_k, d, causal, diagonal, tiling, algorithm="fa1")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_fa1_forward_large_logits(fmt):
    check_half_forward(fmt, 1, 1, 24, 37, 16, False, tiling=nf.Tiling(8, 8), logit_scale=30.0,
                       seed=3, algorithm="fa1")


def test_fa1_forward_default_tiling():
    check_half_forward("float16", 1, 1, 5, 7, 8, True, algorithm="fa1")


def counted_traffic(algorithm, fmt, n_q, n_k, d, causal, diagonal, tiling):
    """count_traffic of the call that runs simulator ``algorithm`` on fresh ``fmt`` inputs."""
    q, k, v, do = half_inputs(np.random.default_rng(0), fmt, 1, 2, n_q, n_k, d)
    mask = dict(causal=causal, diagonal=diagonal)
    if algorithm == "standard_forward":
        return count_traffic(nf.standard_attention, q, k, v, **mask, tiling=tiling)
    if algorithm == "standard_backward":
        o, p = nf.standard_attention(q, k, v, **mask, tiling=tiling, return_probs=True)
        return count_traffic(nf.standard_attention_backward, do, q, k, v, o, p, causal=causal,
                             tiling=tiling)
    return count_traffic(nf.flash_attention, q, k, v, **mask, tiling=tiling, algorithm="fa1")


@pytest.mark.parametrize("algorithm", ["standard_forward", "standard_backward", "flash_forward_v1"])
@pytest.mark.parametrize("fmt,n_q,n_k,causal,diagonal,tiling", [
    ("float16", 13, 7, True, None, nf.Tiling(4, 3)),   # N_q > N_k: rows and row blocks that see nothing
    ("bfloat16", 7, 13, True, 0, nf.Tiling(3, 4)),     # top-left: key blocks no query sees
    ("float16", 9, 7, True, -5, nf.Tiling(4, 3)),      # a row block that sees nothing
    ("bfloat16", 9, 9, False, None, nf.Tiling(4, 4)),
])
def test_traffic_is_the_models(algorithm, fmt, n_q, n_k, causal, diagonal, tiling):
    """Per tensor the elements of the fp32 kernels (simulator.predict), each 2 bytes but those
    of the statistics kept in fp32 (L, l, m, D: 4)."""
    report = counted_traffic(algorithm, fmt, n_q, n_k, 5, causal, diagonal, tiling)
    workload = simulator.Workload(1, 2, n_q, n_k, 5, 2, causal, diagonal)
    predicted = simulator.predict(algorithm, workload, tiling)
    fp32 = simulator.predict(algorithm, dataclasses.replace(workload, dtype_bytes=4), tiling)
    assert report.hbm_counts() == predicted.hbm_counts() == fp32.hbm_counts()
    for kind in (0, 1):        # reads, writes
        expected = sum(c[kind] * (4 if name in ("L", "l", "m", "D") else 2)
                       for name, c in predicted.hbm_counts().items())
        got = (report.hbm_read_bytes, report.hbm_write_bytes)[kind]
        assert got == (predicted.hbm_read_bytes, predicted.hbm_write_bytes)[kind] == expected


class RecordingMemory(memory.Memory):
    """The default memory, noting the element type of every array handed to the kernels."""

    def __init__(self):
        self.dtypes = {}

    def input(self, x, name):
        array = super().input(x, name)
        self.dtypes[name] = array.dtype
        return array

    def output(self, shape, dtype, name, like=None):
        self.dtypes[name] = np.dtype(dtype)
        return super().output(shape, dtype, name, like)


def test_every_tensor_stays_in_the_format():
    """No widened copies, no fp32 workspaces: 16-bit patterns but for the fp32 statistics."""
    q, k, v, do = half_inputs(np.random.default_rng(1), "bfloat16", 1, 1, 6, 5, 8)
    forward, backward, fa1 = RecordingMemory(), RecordingMemory(), RecordingMemory()
    with memory.using(forward):
        o, p = nf.standard_attention(q, k, v, causal=True, return_probs=True)
    with memory.using(backward):
        nf.standard_attention_backward(do, q, k, v, o, p)
    with memory.using(fa1):
        nf.flash_attention(q, k, v, algorithm="fa1")
    u16 = np.dtype(np.uint16)
    assert forward.dtypes == dict.fromkeys(("Q", "K", "V", "S", "P", "O"), u16)
    assert backward.dtypes == {**dict.fromkeys(("dO", "Q", "K", "V", "O", "P", "dQ", "dK", "dV",
                                                "dP", "dS"), u16), "D": np.dtype(np.float32)}
    assert fa1.dtypes == {**dict.fromkeys(("Q", "K", "V", "O"), u16),
                          **dict.fromkeys(("L", "l", "m"), np.dtype(np.float32))}


def test_bad_half_input_is_named():
    q = np.zeros((1, 1, 4, 8), np.float16)
    p = np.zeros((1, 1, 4, 4), np.float16)
    with pytest.raises(ValueError, match="algorithm='fa2_fma' runs in float32 only; float16 inputs "
                                         "run on algorithm='fa2' .* or 'fa1'"):
        nf.flash_attention(q, q, q, algorithm="fa2_fma")
    with pytest.raises(TypeError, match=r"mixed dtypes \(q float16, k bfloat16, v float16\)"):
        nf.standard_attention(q, q.astype(ml_dtypes.bfloat16), q)
    with pytest.raises(TypeError, match="mixed dtypes"):
        nf.standard_attention_backward(q, q, q, q, q, p.astype(np.float32))
    with pytest.raises(ValueError, match="p"):
        nf.standard_attention_backward(q, q, q, q, q, p[..., :3])

"""Ring attention (context parallelism): which blocks of the sequence each rank computes at each
step of the ring, the bytes each link carries and the time with communication overlapped.

The sequence of N tokens is cut into equal chunks; rank r of P holds the chunks ``chunks_of``
gives it -- "contiguous": chunk r of P; "zigzag": chunks r and 2P - 1 - r of 2P, so that under a
causal mask every rank gets the same work (early chunks see few keys, late ones many). Queries
stay; the K/V shards travel around the ring, one hop a step: at step s rank r holds the K/V of
rank (r - s) mod P. A rank's queries and the keys it holds meet in ``calls``: the attention calls
of that step, each a range of local query rows against a range of local key rows, full or causal
(top-left). The partial outputs merge exactly by their log-sum-exp (``numba_flash.distributed``).

The backward sends the K/V shards around again (P - 1 hops) and with them each shard's dK, dV
accumulators in fp32, which take P hops: the last one brings them home. A step's accumulators
leave once that step's gradients are added, so they travel during the next step's compute; the
last hop has no compute beside it (the backward's tail).

This module imports nothing beyond the standard library: the simulator runs without numba.
"""
from __future__ import annotations

from dataclasses import dataclass

LAYOUTS = ("contiguous", "zigzag")
#: dK, dV travel as fp32 sums (4 bytes an element), whatever the inputs' format
ACCUMULATOR_BYTES = 4


def check_layout(layout: str, world: int, n: int | None = None) -> int:
    """The number of chunks of ``layout`` over ``world`` ranks (raising on a bad layout or world,
    or on a sequence length ``n`` the chunks do not divide)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ValueError(f"world size must be a positive int, got {world!r}")
    chunks = world if layout == "contiguous" else 2 * world
    if n is not None and n % chunks:
        raise ValueError(f"sequence length {n} must be a multiple of {chunks} for layout="
                         f"{layout!r} over {world} ranks: pad the sequence or change the layout")
    return chunks


def chunks_of(rank: int, world: int, layout: str) -> tuple[int, ...]:
    """The global chunks rank ``rank`` holds, in sequence order."""
    check_layout(layout, world)
    return (rank,) if layout == "contiguous" else (rank, 2 * world - 1 - rank)


@dataclass(frozen=True)
class Call:
    """One attention call: local query rows [q0, q1) against local key rows [k0, k1) of the K/V
    shard held, ``causal`` (top-left: row i sees key j iff j <= i, the rows and keys being the
    same global positions) or full."""

    q0: int
    q1: int
    k0: int
    k1: int
    causal: bool

    @property
    def scores(self) -> int:
        """Score elements this call computes (visible ones: the causal triangle counts its
        diagonal; what a kernel's tiles round up is not counted)."""
        n_q, n_k = self.q1 - self.q0, self.k1 - self.k0
        if not self.causal:
            return n_q * n_k
        return sum(min(i + 1, n_k) for i in range(n_q))


def calls(rank: int, src: int, world: int, layout: str, causal: bool, chunk: int) -> list[Call]:
    """The attention calls of rank ``rank`` holding the K/V shard of rank ``src``, chunks of
    ``chunk`` tokens: query chunk a sees key chunk b fully when b < a, causally when b == a, not
    at all when b > a (everything fully without ``causal``). On the diagonal step (src == rank)
    the local order is the global order, so one causal call covers the shard; otherwise each run
    of query chunks that see the same contiguous key chunks is one full call."""
    q_chunks, k_chunks = chunks_of(rank, world, layout), chunks_of(src, world, layout)
    n_q, n_k = chunk * len(q_chunks), chunk * len(k_chunks)
    if not causal:
        return [Call(0, n_q, 0, n_k, False)]
    if src == rank:
        return [Call(0, n_q, 0, n_k, True)]
    out: list[Call] = []
    for i, a in enumerate(q_chunks):
        seen = [j for j, b in enumerate(k_chunks) if b < a]
        if not seen:
            continue
        if seen != list(range(seen[0], seen[-1] + 1)):   # (never with these layouts)
            raise AssertionError("key chunks seen by a query chunk are not contiguous")
        call = Call(i * chunk, (i + 1) * chunk, seen[0] * chunk, (seen[-1] + 1) * chunk, False)
        if out and (out[-1].k0, out[-1].k1) == (call.k0, call.k1) and out[-1].q1 == call.q0:
            call = Call(out[-1].q0, call.q1, call.k0, call.k1, False)
            out.pop()
        out.append(call)
    return out


def step_source(rank: int, step: int, world: int) -> int:
    """The rank whose K/V shard rank ``rank`` holds at ring step ``step``."""
    return (rank - step) % world


@dataclass(frozen=True)
class RingCost:
    """Per rank r and step s (0 .. P-1): ``scores[r][s]`` score elements computed (the forward;
    the backward computes the same ones); per step, the bytes each rank sends to the next while
    that step computes (``forward_bytes[s]``, ``backward_bytes[s]``: every link carries the
    same), and the backward's last hop of dK, dV after the last step (``backward_tail_bytes``)."""

    scores: tuple[tuple[int, ...], ...]        # [rank][step]
    forward_bytes: tuple[int, ...]             # [step]
    backward_bytes: tuple[int, ...]            # [step]
    backward_tail_bytes: int

    @property
    def world(self) -> int:
        return len(self.scores)

    def forward_flops(self, rank: int, d: int, heads: int) -> int:
        """4 d FLOPs per score element (Q K^T and P V), per query head of the batch."""
        return 4 * d * heads * sum(self.scores[rank])

    def imbalance(self) -> float:
        """Most work of a rank over the mean (1.0: balanced)."""
        totals = [sum(s) for s in self.scores]
        return max(totals) / (sum(totals) / len(totals))


def ring_cost(B: int, H: int, H_kv: int, N: int, d: int, element_bytes: int, world: int,
              layout: str = "zigzag", causal: bool = False) -> RingCost:
    """``RingCost`` of ring attention over ``world`` ranks on (B, H, N, d) queries and (B, H_kv,
    N, d) keys and values of ``element_bytes`` each (the sequence N split by ``layout``)."""
    chunk = N // check_layout(layout, world, N)
    shard = B * H_kv * chunk * len(chunks_of(0, world, layout)) * d     # elements of K (or V)
    scores = tuple(
        tuple(B * H * sum(c.scores for c in calls(r, step_source(r, s, world), world, layout,
                                                  causal, chunk)) for s in range(world))
        for r in range(world))
    kv, grads = 2 * shard * element_bytes, 2 * shard * ACCUMULATOR_BYTES
    forward = tuple(kv if s < world - 1 else 0 for s in range(world))
    backward = tuple((kv if s < world - 1 else 0) + (grads if s > 0 else 0) for s in range(world))
    return RingCost(scores, forward, backward, grads if world > 1 else 0)


def ring_time(step_compute_s, step_bytes, link_bytes_per_s: float, tail_bytes: int = 0,
              overlapped: bool = True) -> float:
    """Time of one rank's ring: per step its compute time ``step_compute_s[s]`` beside the
    transfer of ``step_bytes[s]`` at ``link_bytes_per_s`` -- overlapped, each step lasts the
    longer of the two; not, their sum -- then ``tail_bytes`` with nothing beside them."""
    comm = [b / link_bytes_per_s for b in step_bytes]
    steps = (sum(max(c, t) for c, t in zip(step_compute_s, comm)) if overlapped
             else sum(step_compute_s) + sum(comm))
    return steps + tail_bytes / link_bytes_per_s

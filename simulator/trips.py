"""How many times the loops nested in a kernel's main loop run, per trip of the main loop: the
strided tile copies and the shared-memory products of our kernels, read off the kernel source
line each loop comes from (``simulator.sass`` records it, ``lines``); and (``outer_trips``) the
trips per block of the tile copies before the main loop.

A nested loop's source line is the call it was inlined from (the largest line number of its
instructions: a loop's body can borrow a few instructions from the code before it). By callee
(the loop's k-th occurrence at that line, in address order, takes the k-th count):

- ``load_head_tile(..., max_rows, tid, factor)``: ``range(tid, max_rows * d, T)``: ceil(max_rows d / T)
  (max_rows is ``BR`` or ``BC``);
- ``load_q_tile`` (tensor-core forward, before its loop): Br x D8 elements over T threads;
- ``load_pair_tile`` (tensor-core backward, before its loop): Bc/2 x D8/2 element quads;
- the tensor-core backward's batch loop (v14, ``for bt in range(0 if BATCHES == 1 else
  BATCHES)``: its Qi, dOi loads where a thread has more than 2 items of each, d = 256):
  ``load_batches``;
- ``load_row_stats``: a row a thread, ``range(tid, Br, T)``: ``warp_rows`` (warps past the
  rows run none: at Br = 32 and 256 threads one warp of eight);
- ``load_row_block`` (half-precision backward: the next Qi, dOi by cp.async, then L_i, D_i a
  row a thread): its row loop as ``load_row_stats``'s;
- ``rows_dot_rows``: d // 4 steps of four, then d % 4 single steps (that loop only where d % 4);
  ``recompute_p_ds`` runs it twice (S and dP);
- ``scores_times_tile(..., n_inner, ...)`` / ``scores_t_times_tile``: n // 4, then n % 4 (n: the
  tile's keys, Bc, or rows, Br);
- the standard matmul's k-chunk: its two strided copies ceil(Br BK / T), ceil(BK Bc / T) and the
  BK-step product.
Those are the source loop's iterations. ptxas unrolls a strided copy (a trip count that
depends on ``tid``) u-fold. In the main loop it peels the first count mod u iterations: u - 1
copies of one iteration before the loop, each behind an exit branch
(``simulator.sass.peeled_copies``, recorded with the loop in ``kernel_loops.json.gz``), of
which a warp runs count mod u (``peel_runs``); the SASS loop then runs count // u times, each
trip u iterations' worth. Where no peel is recorded, the loop runs ceil(count / u) times
(remainder iterations guarded inside). u is read off the compiled loop: its
global loads (LDG, and LDGSTS for cp.async) / the loads one source iteration makes
(``COPY_LOADS``: 1 for ``load_head_tile`` and the matmul's copies, 4 for ``load_pair_tile``, 2
for ``load_row_stats`` and ``load_row_block``, 16 for the backward's batch loop). On the H200
(ncu's executed instructions, levels 2026-12-02) the model counted 1.4x (the FMA kernels) to
1.8x (the standard matmul) the instructions those kernels executed before this: most copy loops
are unrolled 4-fold (the backward v13's 2 x 2 item copy of Qi, dOi was not; v14 has none). The
products' loops are unrolled in the source (``static_range``): nothing to divide.
Loops written in the kernel, and loops that hold loops, are read off their own ``for`` line
(the first among the loop's lines that no enclosing loop owns: a compiled loop borrows its
parents' loop control): Algorithm 1's row loop ``range(tr)`` runs what the workload sets (the
caller's ``rows_per_trip``), its softmax's ``range(tid, BR, T)`` a thread's rows, that loop's
column loops ``range(cols)``, ``range(BC)`` Bc each (over the u of them a compiled trip does:
its shared loads or stores, one an iteration; ptxas unrolls them 4- to 16-fold; 0 under an ``if``
the modelled workloads never take, ``NEVER_TAKEN``). A nested loop's trips are per trip of
the loop it sits in (``parents``).
Full tiles are assumed (a ragged last tile runs fewer). ``range(tid, BR, T)`` runs different
trips in different warps (``warp_rows``): per warp for the issue simulator's streams, their
mean for instruction counts. None where a loop's line is none of these: the caller then counts
each nested loop once. A warp of the warp-pair kernels runs the common code and its own role's
(``issue.Op.role``); the masking code ptxas branches over on interior tiles (``issue.Op.edge``)
runs on edge trips only (``warp_stream``'s ``edge``; ``skipped``'s ``edge_share``), the code
under a branch on a query head's start (``issue.Op.head``) on a block's first trip of each
query head only (``warp_stream``'s ``head``; ``skipped``'s ``head_share``; ``has_head_code``).
Pure Python: reads the kernel sources as text, imports no numba.
"""
from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

from .sass import MAIN_LOOP, access_bytes, regions_of
from .tiling import MATMUL_BK, Tiling

KERNELS_DIR = Path(__file__).resolve().parent.parent / "numba_flash" / "kernels"
_CALL = re.compile(r"\b(load_head_tile|load_row_stats|load_row_block|rows_dot_rows|recompute_p_ds|"
                   r"scores_times_tile|scores_t_times_tile|load_q_tile|load_pair_tile)\(([^)]*)\)")
_RANGE = re.compile(r"for \w+ in range\(([^)]*)\)")


#: The standard matmul's strided copies (their ``range`` bounds).
MATMUL_COPIES = ("tid,BR*BK,T", "tid,BK*BC,T")
#: Global loads (LDG, LDGSTS) one source iteration of each strided copy makes (module docstring);
#: "range" is the standard matmul's two copies, written as ``for`` loops in the kernel.
COPY_LOADS = {"load_head_tile": 1, "load_row_stats": 2, "load_row_block": 2,
              "load_q_tile": 1, "load_pair_tile": 4, "range": 1, "load_batch": 16}
#: The tensor-core backward's loop over batches of its tile loads (v14: ``load_batch``).
BATCH_LOOP = "0ifBATCHES==1elseBATCHES"


@lru_cache(maxsize=None)
def _source(file: str) -> tuple[str, ...]:
    return tuple((KERNELS_DIR / file).read_text().splitlines())


def _counts_at(text: str, kernel: str, t: Tiling, d: int, warp: int | None = None) -> list[int] | None:
    """The source iterations of the loops a source line makes, in order; None if unknown.
    ``warp``: the row copies' (``range(tid, Br, T)``) iterations in that warp, None: their mean
    over the block's warps (``warp_rows``)."""
    threads = t.threads_for(kernel)
    rows = {"BR": t.Br, "BC": t.Bc, "rows": t.Br, "cols": t.Bc}
    call = _CALL.search(text)
    if call:
        name, args = call.group(1), [a.strip() for a in call.group(2).split(",")]
        if name == "load_head_tile" and args[6] in rows:
            return [-(-rows[args[6]] * d // threads)]
        if name == "load_q_tile":          # range(tid, BR * D8, T): an element an iteration
            return [-(-t.Br * t.mma_depth(d) // threads)]
        if name == "load_pair_tile":       # range(tid, BC // 2 * KW, T): 2 x 2 elements
            return [-(-(t.Bc // 2) * (t.mma_depth(d) // 2) // threads)]
        if name in ("load_row_stats", "load_row_block"):
            return [warp_rows(t.Br, threads, warp)]
        if name == "rows_dot_rows":
            return [d // 4, d % 4]
        if name == "recompute_p_ds":
            return [d // 4, d % 4, d // 4, d % 4]
        if name in ("scores_times_tile", "scores_t_times_tile"):
            n = rows.get(args[4] if name == "scores_times_tile" else args[4])
            return None if n is None else [n // 4, n % 4]
    loop = _RANGE.search(text)
    if loop:
        bounds = loop.group(1).replace(" ", "")
        if bounds == "tid,BR*BK,T":
            return [-(-t.Br * MATMUL_BK // threads)]
        if bounds == "tid,BK*BC,T":
            return [-(-MATMUL_BK * t.Bc // threads)]
        if bounds == "BK":
            return [MATMUL_BK]
    return None


def inner_trips(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str = "",
                rows_per_trip: int | None = None, warp: int | None = None) -> tuple[float, ...] | None:
    """Trips of each loop nested in ``kernel``'s main loop (address order) per trip of the loop
    it sits in (``parents``), or None where one is not known (module docstring). () when there
    are none. ``rows_per_trip``: the trips of Algorithm 1's row loop (``for i in range(tr)``)
    per main-loop trip, which the workload sets (``Phase.inner_trips``); None: unknown.
    ``warp``: the trips of that warp of the block (an int each); None: the mean over the
    block's warps of each warp's (a float where a loop's trips differ between warps)."""
    found = _nested_counts(kernel, tiling, d, causal, variant, rows_per_trip, warp)
    return None if found is None else found[0]


def peel_runs(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str = "",
              rows_per_trip: int | None = None, warp: int | None = None) -> tuple | None:
    """Of each loop nested in ``kernel``'s main loop (address order), how many of the copies
    ptxas peeled before it run a trip of the loop it sits in: a strided copy of n source
    iterations, unrolled u-fold behind a peel of u - 1 copies
    (``simulator.sass.peeled_copies``), runs n mod u of them, then its loop n // u times;
    None for a loop without a peel (or one not recorded): the caller issues every copy the
    code holds. None where a trip count is not known; arguments as ``inner_trips`` (without
    ``warp``, the means over the block's warps: floats)."""
    found = _nested_counts(kernel, tiling, d, causal, variant, rows_per_trip, warp)
    return None if found is None else found[1]


@lru_cache(maxsize=None)
def _nested_counts(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str,
                   rows_per_trip: int | None, warp: int | None):
    """(``inner_trips``, ``peel_runs``) of one warp, or their means over the block's warps."""
    if warp is None:
        warps = -(-tiling.threads_for(kernel) // 32)
        each = [_nested_counts(kernel, tiling, d, causal, variant, rows_per_trip, w)
                for w in range(warps)]
        if any(e is None for e in each):
            return None
        return _mean(e[0] for e in each), _mean(e[1] for e in each)
    rows = regions_of(kernel, tiling, d, causal, variant)
    main = next((r for r in rows if r.region == MAIN_LOOP), None)
    if main is None:
        return None
    nested = sorted((r for r in rows if r.region.startswith("inner_loop_")), key=lambda r: r.start)
    up = parents(main, nested)
    control = {None: _first_for(main, _line_numbers(main.lines)[0])}   # each loop's for line
    located = []
    for k, region in enumerate(nested):      # parents come before the loops they hold
        holds = any(up[j] == k for j in range(len(nested)))
        where, counts = (None, None) if holds else _line_of(region.lines, kernel, tiling, d, warp)
        if where is None:       # a loop written in the kernel, or one holding loops: its for line
            enclosing = {control[j] for j in [*_chain(up, k), None]}
            where, counts = _own_loop(region, enclosing, kernel, tiling, d, rows_per_trip, warp)
        if where is None:
            return None
        control[k] = where[1]
        located.append((where, counts))
    per_line = Counter(where for where, _ in located)
    peels = _peels(kernel, tiling, d, causal, variant, len(nested))
    taken: dict[tuple[str, int], int] = {}
    trips, runs = [], []
    for region, (where, counts), peeled in zip(nested, located, peels):
        k = taken.get(where, 0)
        # a call's remainder loop of 0 trips may be compiled away: then its line has fewer
        # loops than the call makes, and the next count is this loop's
        while k < len(counts) - 1 and counts[k] == 0 and per_line[where] < len(counts):
            k += 1
        if k >= len(counts):
            return None
        n, kind = counts[k], copy_kind(_source(where[0])[where[1] - 1])
        u = copy_unroll(region, kind)
        if u is not None and peeled == u - 1 > 0:      # a peel of n mod u, then n // u trips
            trips.append(n // u)
            runs.append(n % u)
        else:
            trips.append(unrolled(n, region, kind))
            runs.append(None)
        taken[where] = k + 1
    return tuple(trips), tuple(runs)


def _mean(rows) -> tuple:
    """Column means of per-warp tuples (None where a loop has no peel: the same in every warp)."""
    rows = list(rows)
    return tuple(None if col[0] is None else sum(col) / len(rows) for col in zip(*rows))


def warp_stream(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str = "",
                rows_per_trip: int | None = None, warp: int = 0, edge: bool = True,
                head: bool = True) -> tuple | None:
    """The main-loop trip warp ``warp`` of a block runs, as ``simulator.issue`` ops: each
    nested loop inlined its ``inner_trips``, the copies peeled before a loop as many as
    ``peel_runs``, the set-up of a row copy (``issue.Op.rows_only``) only in a warp that
    owns a row, the masking code of edge tiles (``issue.Op.edge``) only on an ``edge``
    trip, and a head's start code (``issue.Op.head``) only on a ``head`` trip. None where a
    trip count is not known; LookupError where the loop is not recorded."""
    from .issue import stream_for

    found = _nested_counts(kernel, tiling, d, causal, variant, rows_per_trip, warp)
    if found is None:
        return None
    trips, runs = found
    body = stream_for(kernel, tiling, d, causal, variant, trips or None, peel_runs=runs)
    rowless = warp in warps_without_rows(tiling.Br, tiling.threads_for(kernel))
    if rowless or not edge or not head:
        return tuple(o for o in body if not (rowless and o.rows_only) and (edge or not o.edge)
                     and (head or not o.head))
    return body


def has_head_code(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str = "") -> bool:
    """Whether the recorded main loop holds code only a query head's first trip runs
    (``issue.Op.head``)."""
    from .issue import stream_for

    try:
        return any(o.head for o in stream_for(kernel, tiling, d, causal, variant))
    except LookupError:
        return False


def has_edge_code(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str = "") -> bool:
    """Whether the recorded main loop holds masking code only edge tiles run (``issue.Op.edge``)."""
    from .issue import stream_for

    try:
        return any(o.edge for o in stream_for(kernel, tiling, d, causal, variant))
    except LookupError:
        return False


def skipped(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str = "",
            rows_per_trip: int | None = None, edge_share: float = 1.0,
            head_share: float = 1.0) -> dict[str, float]:
    """What a main-loop trip does not run of the code the static count gives it (its body and
    each nested loop as often as ``inner_trips``), per warp, the mean over the block's warps
    and over trips: the copies peeled before nested loops beyond ``peel_runs``, a row copy's
    set-up (``issue.Op.rows_only``) in the warps without a row (``warp_stream``), the other
    role's code in a warp of the warp-pair kernels (``issue.Op.role``: role = warp % 2), and
    the masking code of edge tiles (``issue.Op.edge``) on the 1 - ``edge_share`` of trips on
    interior tiles (``Phase.edge_share``), a head's start code (``issue.Op.head``) on the 1 -
    ``head_share`` of trips that start no query head (``Phase.head_share``). Warp
    instructions by ``issue.Op.pipe`` and ``total``, and the local-memory bytes a thread does
    not read (``ldl_bytes``) or write (``stl_bytes``). Empty where the loop's stream or trips
    are not known."""
    tally = _skip_tally(kernel, tiling, d, causal, variant, rows_per_trip)
    if tally is None:
        return {}
    warps, full, run = tally
    out: Counter = Counter(full)
    for (name, edge, head), n in run.items():      # a run op counts on its share of trips
        out[name] -= n * (edge_share if edge else 1.0) * (head_share if head else 1.0)
    return {k: v / warps for k, v in out.items() if v}


@lru_cache(maxsize=None)
def _skip_tally(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str,
                rows_per_trip: int | None):
    """(warps, full, run) for ``skipped``: summed over the block's warps, the static code's
    instructions (and local bytes) by pipe, and those each warp runs by (pipe, edge, head) --
    the shares only weigh the latter; None where the loop's stream or trips are not known."""
    from .issue import stream_for

    warps = -(-tiling.threads_for(kernel) // 32)
    full: Counter = Counter()
    run: Counter = Counter()
    # each stream the warps share (``stream_for`` is cached) tallied once; kept, so no id recurs
    tallies: dict = {}
    for w in range(warps):
        found = _nested_counts(kernel, tiling, d, causal, variant, rows_per_trip, w)
        try:
            ran = warp_stream(kernel, tiling, d, causal, variant, rows_per_trip, w)
            body = stream_for(kernel, tiling, d, causal, variant, found[0] or None) if found else None
        except LookupError:
            return None
        if body is None or ran is None:
            return None
        for ops, role in ((body, None), (ran, w % 2)):
            if (id(ops), role) not in tallies:
                tallies[(id(ops), role)] = (ops, _tally(ops, role))
        for (name, _, _), n in tallies[(id(body), None)][1].items():   # all of it, flags aside
            full[name] += n
        run.update(tallies[(id(ran), w % 2)][1])
    return warps, full, run


def _tally(ops, role: int | None) -> Counter:
    """Instructions of ``ops`` by (pipe, edge, head) -- the op's pipe or ``total``, and local
    bytes as ``ldl_bytes``, ``stl_bytes``; its flags -- leaving out another role's (``role``:
    the warp's, None: none left out). A stream repeats its nested loops' ``Op`` objects
    (``issue.decode_loop``): each distinct one is weighed by its count."""
    times = Counter(map(id, ops))
    out: Counter = Counter()
    for o in dict(zip(map(id, ops), ops)).values():
        if role is not None and o.role is not None and o.role != role:
            continue                # another role's: this warp skips it
        n = times[id(o)]
        flags = (bool(o.edge), bool(o.head))
        out[(o.pipe, *flags)] += n
        out[("total", *flags)] += n
        if o.pipe in ("ldl", "stl"):
            out[(f"{o.pipe}_bytes", *flags)] += n * access_bytes(o.key)
    return out


def _peels(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str, loops: int) -> list[int]:
    """The copies peeled before each of the main loop's ``loops`` nested loops, as recorded
    in ``kernel_loops.json.gz`` (``simulator.issue.encode_loop``); 0 each where the loop is not
    recorded or its nested loops are not these."""
    from .issue import loop_record

    try:
        inner = loop_record(kernel, tiling, d, causal, variant)["inner_loops"]
    except LookupError:
        return [0] * loops
    return [len(r.get("peel", [])) for r in inner] if len(inner) == loops else [0] * loops


def parents(main, nested) -> list[int | None]:
    """For each nested region (address order), the index of the nested region it sits in
    (the innermost one holding its addresses), None for the main loop's own."""
    out = []
    for r in nested:
        holders = [j for j, q in enumerate(nested)
                   if q is not r and q.start <= r.start and r.end <= q.end and q.depth < r.depth]
        out.append(max(holders, key=lambda j: nested[j].depth) if holders else None)
    return out


def _chain(up: list[int | None], k: int) -> list[int]:
    """The nested regions holding region ``k``, innermost first."""
    out, j = [], up[k]
    while j is not None:
        out.append(j)
        j = up[j]
    return out


def _own_loop(region, enclosing: set, kernel: str, t: Tiling, d: int,
              rows_per_trip: int | None, warp: int | None = None):
    """((file, line), [trips]) of a loop written in the kernel: the first ``for`` statement
    among its lines that is no ``enclosing`` loop's (for lines: a loop borrows its parents'
    loop control)
    -- ``range(tr)``, Algorithm 1's row loop: ``rows_per_trip``; ``range(tid, BR, T)``:
    a thread's rows, ``warp_rows``; the tensor-core backward's batch loop, ``load_batches``;
    ``range(cols)``, ``range(BC)``: a row of S, Bc iterations of one shared access each (a
    load, a store or both; full tiles), compiled u-fold as its u loads or stores say, 0 where it
    sits directly under an ``if`` of ``NEVER_TAKEN`` -- (None, None) for any other."""
    file, numbers = _line_numbers(region.lines)
    if file is None:
        return None, None
    for line in sorted(numbers):
        text = _source(file)[line - 1]
        loop = _RANGE.search(text)
        if not loop or line in enclosing or not text.lstrip().startswith("for "):
            continue
        bounds = loop.group(1).replace(" ", "")
        if bounds == "tr":
            return ((file, line), [rows_per_trip]) if rows_per_trip is not None else (None, None)
        if bounds == "tid,BR,T":
            return (file, line), [warp_rows(t.Br, t.threads_for(kernel), warp)]
        if bounds == BATCH_LOOP:
            return (file, line), [load_batches(t, d, t.threads_for(kernel))]
        if bounds in ("cols", "BC"):    # a row of S: one shared access an iteration, unrolled u-fold
            if _guard(file, line) in NEVER_TAKEN:
                return (file, line), [0]
            u = max(1, region.lds, region.sts)
            return (file, line), [-(-t.Bc // u)]
        return None, None
    return None, None


#: Conditions of ``if`` statements in our kernels whose branch the modelled workloads never
#: take: Algorithm 1's softmax rows past N_q (full tiles: none) and rows that have seen no
#: key yet (none where every row sees a key: no mask, or a causal one whose diagonal is >= 0).
#: A loop in such a branch runs 0 trips. (H200, 2026-12-02, ncu, fig2_middle: Algorithm 1's
#: zero-filling ``range(BC)`` loops under them, compiled as loops at Bc = 128 and 256, left
#: the executed shared stores at 1.22e8 and 1.14e8 a launch; the model counts 1.30e8 and
#: 1.21e8 without those loops, 1.97e8 and 1.88e8 with them at Bc / 16 trips.)
NEVER_TAKEN = ("r >= rows", "m_new == NEG_INF")


def _guard(file: str, line: int) -> str | None:
    """The condition of the ``if`` statement whose body holds source line ``line`` directly
    (the nearest line above it, comments and blank lines aside, indented less); None where
    that statement is no ``if`` (``else:``, a loop, a def)."""
    source = _source(file)
    indent = len(source[line - 1]) - len(source[line - 1].lstrip())
    for text in reversed(source[:line - 1]):
        code = text.split("#")[0].rstrip()
        if code.strip() and len(code) - len(code.lstrip()) < indent:
            found = re.fullmatch(r"\s*if (.+):", code)
            return found.group(1).strip() if found else None
    return None


def load_batches(t: Tiling, d: int, threads: int) -> int:
    """Trips of the tensor-core backward's batch loop (``range(0 if BATCHES == 1 else
    BATCHES)``): a thread's ceil((Br/2)(D8/2) / T) 2 x 2 element items of Qi (and as many of
    dOi), loaded 2 at a time; 0 where one batch holds them all (the kernel then loads them
    unrolled, outside any loop). A batch's source iteration loads 2 items of each tile, 4
    elements an item: 16 global loads (``COPY_LOADS``; L_i and D_i's, in the first, aside)."""
    items = -(-(t.Br // 2) * (t.mma_depth(d) // 2) // threads)
    batches = -(-items // min(items, 2))
    return 0 if batches == 1 else batches


def warp_rows(rows: int, threads: int, warp: int | None) -> float:
    """Trips warp ``warp`` of a block of ``threads`` makes of ``range(tid, rows, threads)``
    (a trip where any of its lanes has a row): ceil((rows - 32 warp) / threads), 0 for a warp
    past the rows; None: the mean over the block's warps."""
    if warp is None:
        warps = -(-threads // 32)
        return sum(warp_rows(rows, threads, w) for w in range(warps)) / warps
    return max(0, -(-(rows - 32 * warp) // threads))


def warps_without_rows(rows: int, threads: int) -> tuple[int, ...]:
    """The warps of a block of ``threads`` that make no trip of ``range(tid, rows, threads)``:
    they skip a row copy's set-up too (``issue.Op.rows_only``)."""
    return tuple(w for w in range(-(-threads // 32)) if warp_rows(rows, threads, w) == 0)


def _first_for(region, file: str) -> int | None:
    """The first ``for`` statement among a region's lines (its loop control)."""
    f, numbers = _line_numbers(region.lines)
    if f != file:
        return None
    return next((n for n in sorted(numbers) if _source(file)[n - 1].lstrip().startswith("for ")), None)


def _line_numbers(lines: str) -> tuple[str | None, list[int]]:
    """(file, every line number) of a region's ``lines`` ("file.py:3,7-9 ..."); (None, [])."""
    if not lines:
        return None, []
    file, _, spans = lines.split(" ")[0].partition(":")
    out = []
    for part in spans.split(","):
        bounds = [int(n) for n in part.split("-") if n]
        out += list(range(bounds[0], bounds[-1] + 1)) if bounds else []
    return file, out


def _line_of(lines: str, kernel: str, t: Tiling, d: int, warp: int | None = None):
    """((file, line), trip counts) of the source a nested loop comes from: its largest line
    (an inlined call), else its first (a loop written in the kernel: the ``for`` statement);
    (None, None) if neither is a loop we know."""
    file, numbers = _line_numbers(lines)
    for line in (max(numbers), min(numbers)) if numbers else ():
        counts = _counts_at(_source(file)[line - 1], kernel, t, d, warp)
        if counts is not None:
            return (file, line), counts
    return None, None


def copy_kind(text: str) -> str | None:
    """The ``COPY_LOADS`` key of a source line's strided copy, None for any other line."""
    call = _CALL.search(text)
    if call:
        return call.group(1) if call.group(1) in COPY_LOADS else None
    loop = _RANGE.search(text)
    bounds = loop.group(1).replace(" ", "") if loop else None
    if bounds == BATCH_LOOP:
        return "load_batch"
    return "range" if bounds in MATMUL_COPIES else None


def unrolled(iterations: int, region, kind: str | None) -> int:
    """SASS trips of a nested loop of ``iterations`` source iterations (module docstring):
    a strided copy whose compiled body holds u iterations' loads runs ceil(iterations / u)
    (where no copies are peeled before it: ``peel_runs``)."""
    u = copy_unroll(region, kind)
    if u is None or iterations == 0:
        return iterations
    return -(-iterations // u)


def copy_unroll(region, kind: str | None) -> int | None:
    """u, the source iterations a trip of a compiled strided copy makes (its global loads
    over one iteration's, ``COPY_LOADS``); None for a loop that is no strided copy."""
    return None if kind is None else max(1, _loads(region) // COPY_LOADS[kind])


@lru_cache(maxsize=None)
def outer_trips(kernel: str, tiling: Tiling, d: int, causal: bool,
                variant: str = "") -> tuple[tuple[object, int], ...]:
    """(region, trips) of each loop outside ``kernel``'s main loop (``loop_<k>``, address
    order) whose trips per block are known: the strided tile copies before the main loop (Qi of
    the forwards, Kj and Vj of the backwards: ``load_q_tile``, ``load_head_tile``,
    ``load_pair_tile``), a thread's ceil(count / T) source iterations (full tiles; the
    thread-mean rounded up). ptxas compiles such a copy, whose trips depend on ``tid``, u-fold
    (u: the region's loads over those of one iteration, ``COPY_LOADS``), and where the
    iterations are not known to divide by u, as two loops from the same line: one of the
    iterations mod u (its loads fewer than u iterations'), then the u-fold one of the rest.
    Loops of any other source are left out (the caller counts them once, as the static count
    does)."""
    rows = [r for r in regions_of(kernel, tiling, d, causal, variant) if r.region.startswith("loop_")]
    out = []
    by_line: dict[tuple[str, int], list] = {}
    for region in sorted(rows, key=lambda r: r.start):
        if region.depth != 1:
            continue
        where, counts = _line_of(region.lines, kernel, tiling, d)
        kind = copy_kind(_source(where[0])[where[1] - 1]) if where else None
        if kind is None or len(counts) != 1:
            continue
        by_line.setdefault(where, []).append((region, counts[0], kind))
    for loops in by_line.values():
        if len(loops) == 1:
            region, n, kind = loops[0]
            out.append((region, unrolled(n, region, kind)))
            continue
        if len(loops) != 2:
            continue
        (a, n, kind), (b, _, _) = loops
        rest, main = (a, b) if _loads(a) < _loads(b) else (b, a)
        u = max(1, _loads(main) // COPY_LOADS[kind])
        out += [(rest, n % u), (main, n // u)]
    return tuple(sorted(out, key=lambda x: x[0].start))


def _loads(region) -> int:
    """A compiled loop's global loads: LDG and LDGSTS (cp.async)."""
    return region.ldg32 + region.ldg64 + region.ldg128 + region.ldgsts

"""A static issue simulator of a kernel's main loop on one SM sub-partition (a warp scheduler):
the cycles a trip takes when several warps run the loop side by side, dependency latencies
included, which pure throughput bounds (simulator/runtime.py) leave out.

Input: the loop body's instructions with their registers (``Op``), recorded per compiled kernel
by tools/kernel_loops.py in ``kernel_loops.json.gz`` (``stream_for``); hand-built streams work
alike (``op``). ``loop_cycles(stream, warps_per_scheduler, rates)`` simulates cycle by cycle:

- every warp issues its instructions in program order (its own stream where ``Streams`` gives
  one per warp: nested loops whose trips differ between warps), the body ``trips`` times back to back
  (registers carry over, so loop-carried dependencies count); a scheduler issues at most one
  instruction a cycle, from the oldest ready warp (lowest index: ``policy="oldest"``) or the
  last one to issue while it stays ready (``policy="gto"``, greedy then oldest);
- an instruction is ready when its source registers (general R, predicates P, uniform UR/UP)
  are: the producer's issue cycle + its latency. Measured latencies (``MachineRates``): HMMA
  ``mma_latency_cycles(format)``, FMA pipe ``ffma_latency_cycles``, ALU ``alu_latency_cycles``,
  MUFU and the other XU conversions ``mufu_ex2_latency_cycles`` (FMA-pipe integer work
  such as IMAD at the FFMA latency: an assumption). Unmeasured ones are the named
  assumptions below (shared-memory loads, shuffles, constants, S2R, uniform datapath, FP64);
  global loads (and atomics) take ``global_latency``, local loads (spill refills)
  ``local_latency``: the caller's, by default an L2 hit and an L1 hit at the measured latencies
  (``MachineRates.l2_hit_latency_cycles``, ``l1_hit_latency_cycles``; the presets below where
  the rates lack them). A warp's load waits for its slowest sector, and our kernels' tile loads
  stream K, V (Q, dO) from L2: few requests are all L1 hits. The exception, ``Op.l1_hit``: a
  block-sparse kernel's reads of its block lists (``LIST_LOAD``; CSR int64 arrays of a few KB
  that every head's blocks read entry by entry) hit L1 -- at its latency, and not behind the
  reduction drain below (a hit does not leave the SM; H100, 2026-12-08, ncu: 98 % of those
  sectors hit, results/h100/block_sparse/). A write to a
  register whose last producer had a variable latency (memory, shuffle, XU, HMMA, S2R) waits
  for that write (the scoreboard); reads before a later write (WAR) are free;
- pipes limit throughput per scheduler, each SM rate shared by its 4 schedulers: the tensor
  pipe takes an HMMA every ``4 / mma_per_cycle(format)`` cycles (the format's measured rate:
  TF32 m16n8k8, or fp16 / bf16 m16n8k16); FP32 goes to either half of the FMA pipe (fmaheavy, fmalite: each a warp instruction every ``2 x 4 / ffma_per_cycle``), the
  integer part of the FMA class (IMAD, VIADD, ...) to fmaheavy only (ncu's assignment); ALU
  ``4 / alu_per_cycle``; XU ``4 / mufu_ex2_per_cycle``; FP64 at half the FP32 rate (assumed).
  A dispatch waits for its pipe. An HMMA also holds the scheduler's FMA-pipe and ALU dispatch
  for ``MachineRates.mma_dispatch_cycles`` after it issues (measured: calibrate's mma beside
  independent FFMA or LOP3 + VIMNMX chains, fp16 and TF32 alike, ran 12-33 % slower than this
  simulator gave them without the hold, while shared-memory loads beside an mma overlap
  (``mma_lds_overlap``); ncu's "dispatch stall" of the half forward. Why -- operand collection,
  register-file ports -- is not measured; MUFU and the other XU work beside an mma were not
  timed and are not held).
  Shared memory is a queue instead: a load or store of w
  wavefronts (LDS.32 1, .64 2, .128 4; LDSM .x1/.x2/.x4 1/2/4) issues at once, is served by
  the SM's wavefront rate / 4 in order, and its data is ready ``latency`` after its service
  starts. Global and local accesses and atomics use that queue as well (assumed: the L1 data
  path is the same 128-byte-a-cycle SRAM port), at a wavefront per 32 bits of width; shuffles
  a queue of their own at ``shfl_per_cycle / 4``. Queues are unbounded (an assumption: the MIO
  queue's depth is not measured);
- global reductions and atomics (RED, REDG, ATOM, ATOMG; not the shared ATOMS nor the warp's
  REDUX) leave the SM through a drain of their own: from their MIO service start, each joins a
  FIFO of the scheduler's that drains ``red_sectors_per_cycle / 4`` sectors a cycle (the SM's
  measured rate, ``MachineRates.red_sectors_per_cycle``, shared by its 4 schedulers), the
  ``red_sectors`` of a warp instruction (the caller's: what the kernel's own reductions touch;
  by default a coalesced warp's, 32 lanes x its width / 32 bytes). A global load (LDG, LD)
  enters L2 only behind everything queued before it: its data is ready its latency after
  the later of its service start and the drain's end (calibrate's ``load_after_red_cycles``:
  a load behind k reductions of each of an SM's warps waits until the SM has drained them
  all; a load that hits L1, ``Op.l1_hit``, does not wait). A cp.async copy (LDGSTS) is a global
  load that writes shared memory instead of a register: it waits behind the drain alike
  (assumed: its read request takes the same path to L2; calibrate measured LDG's). Stores,
  spill traffic and an atomic's own result do not wait (not measured). Rates without the drain
  (None) model none;
- cp.async completion, per warp: an LDGSTS's data lands in shared memory ``global_latency``
  after the later of its MIO service start and the drain's end (a global load's latency, the
  shared-memory write inside it: an assumption); ``LDGDEPBAR`` commits the warp's copies
  issued since its last one as a group (an empty group lands at once); ``DEPBAR.LE SB0, n``
  issues once every group of the warp's but its ``n`` latest committed ones has landed
  (``Op.depbar``; the barrier after it, ``BAR.SYNC``, then waits for the block's slowest
  warp). The recorded streams do not keep DEPBAR's immediate: ``decode_loop`` takes
  ``RECORDED_DEPBAR`` (0, the only wait our kernels emit: ``kernels/half.py``'s ``wait_all``,
  ``cp.async.wait_group 0``), and ``encode_loop`` refuses a loop whose DEPBAR says otherwise.
  A copy issued before the loop (the first stage's prefetch) is not simulated: the first
  trip's DEPBAR finds no group, and the steady state counts from it;
- ``BAR.SYNC`` / ``BAR.RED``: a warp waits until every simulated warp of its block has arrived
  (the caller simulates the busiest scheduler: an SM deals its warp slots to the 4 in turn,
  so the others hold as many of the block's warps or fewer and arrive no later), then resumes
  ``barrier_cycles_at(the block's warps)`` (the caller's ``block_warps``; 4 x the block's warps
  here where it gives none) after the last
  arrival issued (a loop of barriers alone takes that a barrier, as it was measured); with ``blocks`` > 1
  the scheduler's warps are split round-robin into that many blocks, each barrier its own;
- instructions are taken as the static stream: every instruction of the body once a trip,
  whichever way its branches go (as simulator/sass.py counts), predicated-off ones issued too,
  but for the copies ptxas peeled before a strided copy's loop, of which a warp runs as many
  as its trips need (``decode_loop``'s ``peel_runs``: ``simulator.trips.peel_runs``);
  branches, NOPs, BSSY/BSYNC cost an issue slot and nothing else.

Time is continuous (latencies and pipe intervals are measured fractions of a cycle), the
scheduler's issue slots a cycle apart; the simulation goes from issue to issue. The result is
the steady state ``(t(trips) - t(1)) / (trips - 1)``, t(k) the cycle after the scheduler has
issued k trips' worth of instructions (k x len(stream) x warps, whichever warps issued them:
with strict oldest-first priority and no barrier, one warp may run ahead of the others). The 4 schedulers of an SM run in parallel,
so a scheduler's cycles per trip are the SM's. Pure Python: no numba.
"""
from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .rates import MachineRates
from .sass import (access_bytes, guarded, opcode_key, parse, peeled_copies, pipe_class, regions,
                   skipped_by_branches, stall_counts, GLOBAL_REDUCTIONS, INNER_LOOP, MAIN_LOOP)
from .tiling import Tiling

#: Per-kernel main-loop instruction streams: written by tools/kernel_loops.py, read by ``stream_for``.
LOOPS_JSON = Path(__file__).with_name("kernel_loops.json.gz")
#: The version of the file's encoding (``encode_loop``) and layout (2: each loop and ``no_loop``
#: key names its kernel's source digest, linker version and date; since 2026-12-04 a nested
#: loop may name its peeled copies, ``peel``: the records of kernels with strided copies in
#: their main loop do, and a loop without the key has none).
FORMAT = 2

# ---- latencies not measured by calibrate: assumptions -------------------------------------
#: Cycles from an LDS.32 (1 wavefront) to its data, where the rates have no measured
#: ``lds_latency_cycles``; a wider access adds a cycle a further wavefront. Published microbenchmarks put Hopper/Ampere shared-memory load latency at 23-33
#: cycles (e.g. Luo et al. 2024, "Benchmarking and Dissecting the Nvidia Hopper GPU
#: Architecture": ~29 on H800); not measured on our H200.
LDS_LATENCY = 29
#: Cycles from a SHFL to its result where the rates have no measured ``shfl_latency_cycles``
#: (assumed ~23, as published for Volta-Hopper).
SHFL_LATENCY = 23
#: Global / local load latency presets (cycles; assumptions from published microbenchmarks):
#: an L1 hit, an L2 hit, DRAM, for rates that did not measure them (calibrate's pointer chase:
#: ``l1_hit_latency_cycles``, ``l2_hit_latency_cycles``, ``dram_latency_cycles``).
L1_HIT_LATENCY = 33
L2_HIT_LATENCY = 270
DRAM_LATENCY = 500
#: The opcode of a block-sparse kernel's block-list read (``Op.l1_hit``): in the recorded main
#: loops of the ``sparse`` variants, and nowhere else, an 8-byte global load (the lists' int64
#: entries; every other global load of our main loops is 4 or 16 bytes a lane, or cp.async).
LIST_LOAD = "LDG.64"
#: LDC (kernel parameters from the constant cache, a hit: assumed like an L1 hit).
LDC_LATENCY = 33
#: S2R (a special register, e.g. %tid: assumed).
S2R_LATENCY = 20
#: FP64 (DFMA, DMUL, ...): assumed twice the FFMA latency.
FP64_LATENCY_FACTOR = 2
#: Schedulers (SM sub-partitions) of an SM, each issuing one instruction a cycle.
SCHEDULERS = 4

#: Classes whose results a scoreboard tracks (variable latency): a later write waits for them.
_VARIABLE = {"hmma", "xu", "ldsm", "lds32", "lds64", "lds128", "ldg32", "ldg64", "ldg128",
             "ldl", "atom", "shfl", "ldc", "other"}
_SHARED = {"lds32", "lds64", "lds128", "ldsm", "sts32", "sts64", "sts128"}
_GLOBAL = {"ldg32", "ldg64", "ldg128", "stg32", "stg64", "stg128", "ldl", "stl", "atom", "ldgsts"}
#: Global loads that wait for the reductions queued before them (module docstring): LDG, and
#: LDGSTS (cp.async) whose landing a DEPBAR awaits.
_GLOBAL_LOAD_PIPES = {"ldg32", "ldg64", "ldg128", "ldgsts"}
#: The ``n`` of a ``DEPBAR`` decoded from a recorded stream, whose encoding keeps no immediate:
#: 0, the only cp.async wait our kernels emit (``kernels/half.py`` ``wait_all``:
#: ``cp.async.wait_group 0``, ptxas's ``DEPBAR.LE SB0, 0x0``; ``encode_loop`` checks it).
RECORDED_DEPBAR = 0
#: cp.async per-op roles in ``simulate``: none, a copy (LDGSTS), a commit (LDGDEPBAR).
_NO_COPY, _COPY, _COMMIT = 0, 1, 2


@dataclass(frozen=True)
class Op:
    """One instruction of a stream: its ``opcode_key``, ``pipe_class``, the registers it writes
    and reads (``R4``, ``P0``, ``UR6``, ``UP1``; zero registers left out), whether it waits for
    the block (``BAR.SYNC``), its shared-memory / L1 wavefronts (0 for other pipes), the
    warp role it belongs to (None: every warp runs it; 0 / 1: only the warps of that role, the
    two warps of a pair in the tensor-core backward's v12, ``role = warp % 2``), whether
    only the warps that own a row of a row copy run it (``rows_only``: the guard and set-up of
    a ``range(tid, Br, T)`` loop outside its body, which ptxas places in the main loop), and
    its stall count: the cycles ptxas's control word makes the warp wait before its next
    instruction issues (1: none; ``sass.stall_counts``), and whether only trips on an edge
    tile run it (``edge``: code under a ``needs_mask`` branch, which interior tiles jump over;
    ``Phase.edge_trips``), and for a ``DEPBAR.LE SB0, n`` its ``n`` (``depbar``: the warp's
    committed cp.async groups it lets stay in flight; None for every other instruction), and
    whether only a query head's first trip in a block runs it (``head``: code under a branch
    on a head's start, e.g. fa2_fp16x3's backward reading the head's scales; ``Phase.head_share``),
    and whether a global load hits L1 (``l1_hit``: a block-sparse kernel's block-list read,
    ``LIST_LOAD``)."""

    key: str
    pipe: str
    dests: tuple[str, ...] = ()
    srcs: tuple[str, ...] = ()
    barrier: bool = False
    wavefronts: int = 0
    role: int | None = None
    rows_only: bool = False
    stall: int = 1
    edge: bool = False
    depbar: int | None = None
    head: bool = False
    l1_hit: bool = False


def op(key: str, dests=(), srcs=(), barrier: bool | None = None, depbar: int | None = None) -> Op:
    """An ``Op`` from an ``opcode_key`` (its pipe class and wavefronts derived), e.g.
    ``op("HMMA.1688.F32.TF32", ["R0"], ["R0", "R4"])``; a ``DEPBAR`` waits with ``depbar`` groups
    left in flight (None: ``RECORDED_DEPBAR``)."""
    pipe = pipe_class(key)
    if key == "DEPBAR" and depbar is None:
        depbar = RECORDED_DEPBAR
    return Op(key, pipe, tuple(dests), tuple(srcs),
              key.startswith("BAR") if barrier is None else barrier, _wavefronts(key, pipe),
              depbar=depbar)


def _wavefronts(key: str, pipe: str) -> int:
    if pipe == "ldsm":
        last = key.split(".")[-1]
        return int(last) if last.isdigit() else 4
    if pipe in _SHARED or pipe in _GLOBAL:
        return max(1, access_bytes(key) // 4)
    return 0


# ---- reading operands from nvdisasm text -----------------------------------------------
_LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?(U?P(?:T|\d))\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_REGISTER = re.compile(r"(?<![A-Z_0-9])(UR|R)(\d+)(?:\.(64|128))?")
_PREDICATE = re.compile(r"(?<![A-Z_0-9])(UP|P)(\d)(?![0-9A-Z_])")
_ALL_PREDICATES = tuple(f"P{n}" for n in range(7))
#: Opcodes that write no register (stores, reductions, barriers, control).
_NO_DEST = {"STS", "STG", "ST", "STL", "RED", "REDG", "BAR", "NOP", "DEPBAR", "MEMBAR", "ERRBAR",
            "CCTL", "CCTLL", "LDGSTS", "LDGDEPBAR", "ARRIVES", "FENCE", "WARPSYNC"}
_LOADS = {"LDS", "LDG", "LD", "LDL", "LDSM", "LDC", "ULDC", "ATOMS", "ATOMG", "ATOM", "LDGSTS"}
_STORES = {"STS", "STG", "ST", "STL", "RED", "REDG", "ATOMS", "ATOMG", "ATOM"}
_WIDE_TYPES = {"F64", "S64", "U64"}
_CONVERSIONS = {"F2F", "I2F", "F2I", "I2I", "FRND"}
_FP64 = {"DFMA", "DMUL", "DADD", "DSETP", "DMNMX", "DSET"}
#: HMMA shape and types -> registers of (D, A, B, C).
_HMMA_WIDTHS = {"1688.F32.TF32": (4, 4, 2, 4), "1684.F32.TF32": (4, 2, 1, 4),
                "16816.F32": (4, 4, 2, 4), "16816.F32.BF16": (4, 4, 2, 4), "16816.F16": (2, 4, 2, 2),
                "1688.F32": (4, 2, 1, 4), "1688.F16": (2, 2, 1, 2), "16832.S32.S8": (4, 4, 2, 4)}


def _width_of(modifiers: list[str]) -> int:
    """Registers of a memory access by its mnemonic (``LDS.128`` 4, ``.64`` 2, LDSM ``.4`` 4)."""
    if "128" in modifiers:
        return 4
    if "64" in modifiers:
        return 2
    if modifiers and modifiers[-1] in ("2", "4"):
        return int(modifiers[-1])
    return 1


def _registers(token: str, width: int = 1) -> list[str]:
    """The registers token ``token`` names: ``R4`` (``width`` of them from R4, unless the token
    says ``.64``), every register in an address ``[R2.64+0x10]``, predicates, ``PR`` = all."""
    out = []
    for kind, n, suffix in _REGISTER.findall(token):
        w = {"64": 2, "128": 4}.get(suffix, width if "[" not in token else 1)
        out += [f"{kind}{int(n) + k}" for k in range(w)]
    out += [f"{kind}{n}" for kind, n in _PREDICATE.findall(token)]
    if re.search(r"(?<![A-Z_])PR(?![A-Z_0-9])", token):
        out += _ALL_PREDICATES
    return out


def _is_predicate(token: str) -> bool:
    return re.fullmatch(r"!?U?P(T|\d)", token.strip()) is not None


def _is_register(token: str) -> bool:
    return re.fullmatch(r"[-|~]*U?R(Z|\d+)(\.\w+)*\|?", token.strip()) is not None


def decode_instruction(mnemonic: str, operands: str, guard: str | None = None) -> Op:
    """The ``Op`` of one SASS instruction from its mnemonic and operand text (as nvdisasm
    prints them, ``.reuse`` flags and all) and its guard predicate (``P0`` of ``@!P0``).
    Destinations: the first operand, and a second one where it is a predicate (``IADD3 R0, P0,
    ...``, ``ISETP P0, PT, ...``) or follows a predicate destination (``LOP3.LUT P1, R2, ...``,
    ``SHFL.BFLY PT, R3, ...``), a third predicate for IADD3's second carry; none for stores,
    reductions, barriers and control flow. Widths: memory accesses by their width (a 128-bit
    load writes, a 128-bit store reads 4 registers), HMMA by shape, IMAD.WIDE, CS2R, FP64 and
    64-bit conversions by their types, ``R2.64`` in an address as 2 registers. A ``DEPBAR.LE
    SB0, n`` (the cp.async groups' scoreboard) keeps its ``n`` (``Op.depbar``)."""
    key = opcode_key(mnemonic)
    pipe = pipe_class(key)
    base, *modifiers = mnemonic.split(".")
    tokens = [t.strip() for t in operands.replace(".reuse", "").split(",") if t.strip()]
    no_dest = base in _NO_DEST or pipe == "branch"
    n_dest = 0
    if tokens and not no_dest:
        n_dest = 1
        if len(tokens) > 1 and (_is_predicate(tokens[1]) or
                                (_is_predicate(tokens[0]) and _is_register(tokens[1]))):
            n_dest = 2
            if base in ("IADD3", "UIADD3") and len(tokens) > 2 and _is_predicate(tokens[2]):
                n_dest = 3
    widths = [1] * len(tokens)     # registers each operand names
    if base == "HMMA":
        shape = ".".join(modifiers)
        widths[:4] = _HMMA_WIDTHS.get(shape, (4, 4, 2, 4))
    elif base in ("IMAD", "UIMAD") and "WIDE" in modifiers:
        widths[0] = 2
        if len(widths) > 3:
            widths[3] = 2
    elif base == "CS2R" and "32" not in modifiers:
        widths[0] = 2
    elif base in _FP64:
        widths = [1 if _is_predicate(t) else 2 for t in tokens]
    elif base in _CONVERSIONS:
        types = [m for m in modifiers if re.fullmatch(r"[FSU](8|16|32|64)", m)]
        if types and types[0] in _WIDE_TYPES:
            widths[0] = 2
        if len(types) > 1 and types[1] in _WIDE_TYPES and len(widths) > 1:
            widths[1] = 2
    if base in _LOADS and n_dest and not no_dest:
        widths[n_dest - 1] = _width_of(modifiers)
    if base in _STORES:
        data = [i for i, t in enumerate(tokens) if i >= n_dest and "[" not in t and _is_register(t)]
        for i in data:
            widths[i] = _width_of(modifiers)
    dests, srcs = [], []
    for i, token in enumerate(tokens):
        names = _registers(token, widths[i])
        if i < n_dest and token.strip() != "PR":
            dests += names
        elif i < n_dest:
            dests += _ALL_PREDICATES
        else:
            srcs += names
    if guard and guard != "PT":     # (PT: the constant true predicate, e.g. ptxas's "@!PT LDS RZ, [RZ]")
        srcs.append(guard)
    barrier = base == "BAR" and ("SYNC" in modifiers or "RED" in modifiers)
    depbar = (int(tokens[1], 0) if base == "DEPBAR" and len(tokens) > 1 and tokens[0] == "SB0"
              else None)
    return Op(key, pipe, tuple(dict.fromkeys(dests)), tuple(dict.fromkeys(srcs)), barrier,
              _wavefronts(key, pipe), depbar=depbar)


def decode_text(text: str) -> dict[int, Op]:
    """Address -> ``Op`` of every instruction of ``nvdisasm -c`` output."""
    out = {}
    for line in text.splitlines():
        found = _LINE.match(line)
        if found:
            guard = found.group(3)
            out[int(found.group(1), 16)] = decode_instruction(found.group(4), found.group(5), guard)
    return out


# ---- the file's encoding -----------------------------------------------------------------
def _format_registers(names) -> str:
    """``("R4", "R5", "R6", "P0")`` -> ``"R4-6 P0"``."""
    parts, run = [], None
    for name in names:
        kind, n = re.fullmatch(r"([A-Z]+?)(\d+)", name).groups()
        n = int(n)
        if run and run[0] == kind and n == run[2] + 1:
            run[2] = n
        else:
            if run:
                parts.append(run)
            run = [kind, n, n]
    if run:
        parts.append(run)
    return " ".join(f"{k}{a}" if a == b else f"{k}{a}-{b}" for k, a, b in parts)


def _parse_registers(text: str) -> tuple[str, ...]:
    out = []
    for part in text.split():
        kind, a, b = re.fullmatch(r"([A-Z]+?)(\d+)(?:-(\d+))?", part).groups()
        out += [f"{kind}{n}" for n in range(int(a), int(b or a) + 1)]
    return tuple(out)


def encode_loop(text: str, line_roles: dict[int, int] | None = None,
                row_lines: frozenset[int] = frozenset(),
                mask_lines: dict[int, bool] | None = None,
                head_lines: dict[int, bool] | None = None) -> dict | None:
    """The main loop of a kernel's ``nvdisasm -c`` text, for the JSON file (None without a
    loop): its address range; ``opcodes``: [opcode_key, pipe_class] of each distinct opcode;
    ``instructions``: one string an instruction, ``"<opcode index>;<dests>;<srcs>;<flags>"``
    with registers as runs (``R24-27 P0``) and flags ``B`` (BAR.SYNC: waits for the block) and
    ``0`` / ``1`` (only warps of that role run it: ``line_roles`` maps kernel-source lines
    inside a ``role == k`` branch to k, and an instruction takes the line of the ``//## File
    ..., line N`` marker before it -- the kernel file's line, call sites for inlined code) and
    ``r`` (``Op.rows_only``: outside every nested loop, an instruction a row copy's guard
    branch skips, ``simulator.sass.guarded``, where each row copy's loop -- a nested loop of a
    ``row_lines`` line, a call of a row copy -- has a guard; else any instruction of such a
    line) and ``e`` (``Op.edge``: code a forward branch of the main loop jumps over, all of it
    on ``mask_lines`` and some on a line it maps to True -- the kernel-source lines of an ``if``
    on ``needs_mask``: ``sass.skipped_by_branches``) and ``h`` (``Op.head``: the same of
    ``head_lines``, the lines of an ``if`` that calls a function run at a query head's start),
    then, where ``text`` has the encodings
    (``nvdisasm -hex``), ``;<stall count>``
    (``Op.stall``); ``inner_loops``: each loop nested in it, as indices of its first and last
    instruction, depth, trips (null: not known statically, ``stream_for`` inlines
    it once) and ``peel``: [first, last] indices of each copy ptxas peeled before it
    (``simulator.sass.peeled_copies``; [] for none)."""
    instructions = parse(text)
    found = {r.name: r for r in regions(instructions)} if instructions else {}
    main = found.get(MAIN_LOOP)
    if main is None:
        return None
    ops = decode_text(text)
    roles = _by_source_line(text, line_roles) if line_roles else {}
    rows = _by_source_line(text, dict.fromkeys(row_lines, "r")) if row_lines else {}
    index = {i.address: k for k, i in enumerate(main.instructions)}
    loops = [r for name, r in found.items() if name.startswith(INNER_LOOP)]
    inner = [{"first": index[r.instructions[0].address], "last": index[r.instructions[-1].address],
              "depth": r.depth, "trips": None,
              "peel": [[index[a], index[b]] for a, b in peeled_copies(main.instructions, r, loops)]}
             for r in loops]
    nested = {k for r in inner for k in range(r["first"], r["last"] + 1)}
    # a row copy's code: what its guard branch skips where the copy's loop has one, else the
    # instructions of its call line outside every nested loop
    copies = [r for r in loops if any(i.address in rows for i in r.instructions)]
    spans = [guarded(main.instructions, r, loops) for r in copies]
    if copies and all(spans):
        rows = {i.address for i in main.instructions if any(a <= i.address <= b for a, b in spans)}
    on_mask = _by_source_line(text, mask_lines) if mask_lines else {}
    edge = skipped_by_branches(main.instructions, on_mask.get, loops) if on_mask else frozenset()
    on_head = _by_source_line(text, head_lines) if head_lines else {}
    head = skipped_by_branches(main.instructions, on_head.get, loops) if on_head else frozenset()
    stalls = stall_counts(text)
    opcodes, encoded = {}, []
    for n, i in enumerate(main.instructions):
        o = ops[i.address]
        if o.key != i.key:
            raise ValueError(f"{i.address:x}: {o.key} is {i.key} to simulator.sass")
        if o.key == "DEPBAR" and o.depbar != RECORDED_DEPBAR:
            raise ValueError(f"{i.address:x}: a DEPBAR other than DEPBAR.LE SB0, "
                             f"{RECORDED_DEPBAR}, which the encoding cannot keep "
                             "(decode_loop assumes RECORDED_DEPBAR)")
        k = opcodes.setdefault((o.key, o.pipe), len(opcodes))
        role = roles.get(i.address)
        row = "r" if i.address in rows and n not in nested else ""
        encoded.append(f"{k};{_format_registers(o.dests)};{_format_registers(o.srcs)};"
                       f"{'B' if o.barrier else ''}{'' if role is None else role}{row}"
                       f"{'e' if i.address in edge else ''}{'h' if i.address in head else ''}"
                       + (f";{stalls[i.address]}" if stalls else ""))
    return {"start": f"{main.start:x}", "end": f"{main.end:x}",
            "opcodes": [list(k) for k in opcodes], "instructions": encoded, "inner_loops": inner}


def has_stall_counts(loop: dict) -> bool:
    """Whether an ``encode_loop`` record holds each instruction's stall count."""
    return all(item.count(";") == 4 for item in loop["instructions"])


#: nvdisasm's source-line marker before the instructions of a line: (file, line)
LINE_MARKER = re.compile(r'//## File "([^"]+)", line (\d+)')


def _by_source_line(text: str, values: dict) -> dict:
    """Address -> the value ``values`` maps the source line of each instruction to (the last
    marker before it), for the instructions of the lines it maps: lines of the kernel's file
    (the first marker's; a marker of another file, inlined code, maps nothing)."""
    out, line, file = {}, None, None
    for row in text.splitlines():
        marker = LINE_MARKER.search(row)
        if marker:
            file = file or marker.group(1)
            line = int(marker.group(2)) if marker.group(1) == file else None
            continue
        found = _LINE.match(row)
        if found and line in values:
            out[int(found.group(1), 16)] = values[line]
    return out


def decode_loop(loop: dict, inner_trips=None, peel_runs=None, stalls: bool = True,
                list_loads: bool = False) -> tuple[Op, ...]:
    """The stream of an ``encode_loop`` record: its body once, each nested loop's body inlined
    ``trips`` times (``inner_trips``: a list, one count a nested loop in address order,
    overriding the recorded ones; a count unknown on both sides: once), and of the copies
    ptxas peeled before a nested loop the first ``peel_runs[k]`` only (a list as
    ``inner_trips``; None, or None for a loop: every copy, as the static code holds them);
    ``stalls``: each instruction its recorded stall count (else 1); a ``DEPBAR`` waits with
    ``RECORDED_DEPBAR`` groups left in flight (the encoding keeps no immediate); ``list_loads``:
    a block-sparse kernel's loop, whose ``LIST_LOAD`` loads read its block lists (``Op.l1_hit``)."""
    table = [(key, pipe) for key, pipe in loop["opcodes"]]
    ops = []
    for item in loop["instructions"]:
        k, dests, srcs, flags, *stall = item.split(";")
        key, pipe = table[int(k)]
        role = next((int(c) for c in flags if c.isdigit()), None)
        ops.append(Op(key, pipe, _parse_registers(dests), _parse_registers(srcs), "B" in flags,
                      _wavefronts(key, pipe), role, "r" in flags, int(stall[0]) if stall and stalls else 1,
                      "e" in flags, RECORDED_DEPBAR if key == "DEPBAR" else None, "h" in flags,
                      list_loads and key == LIST_LOAD))
    inner = loop["inner_loops"]
    trips = [(n if n is not None else 1) for n in
             (inner_trips if inner_trips is not None else [r["trips"] for r in inner])]
    if len(trips) != len(inner):
        raise ValueError(f"{len(inner)} nested loops, {len(trips)} trip counts given")
    runs = list(peel_runs) if peel_runs is not None else [None] * len(inner)
    if len(runs) != len(inner) or any(n is not None and not float(n).is_integer() for n in runs):
        raise ValueError(f"{len(inner)} nested loops, peel runs {runs}: give one whole count "
                         "(or None) a loop, a warp's")
    skipped = {k for r, n in zip(inner, runs) if n is not None
               for first, last in r.get("peel", [])[int(n):] for k in range(first, last + 1)}

    def expand(first: int, last: int, skip=None) -> list[Op]:
        out, k = [], first
        while k <= last:
            nested = [(j, r) for j, r in enumerate(inner) if r["first"] == k and j != skip
                      and r["last"] <= last and not (r["first"] == first and r["last"] == last)]
            if nested:
                j, r = min(nested, key=lambda jr: jr[1]["depth"])
                out += expand(r["first"], r["last"], j) * trips[j]
                k = r["last"] + 1
            else:
                if k not in skipped:
                    out.append(ops[k])
                k += 1
        return out

    return tuple(expand(0, len(ops) - 1))


@lru_cache(maxsize=None)
def kernel_loops(path: Path = LOOPS_JSON) -> dict:
    """The whole JSON document (read once per path)."""
    with gzip.open(path, "rt") as f:
        return json.load(f)


def loop_record(kernel: str, tiling: Tiling | None, d: int, causal: bool, variant: str = "",
                path: Path = LOOPS_JSON) -> dict:
    """The recorded main loop of ``kernel`` (as ``simulator.sass.sass`` keys it); LookupError
    listing what was compiled if none."""
    from .tiling import table_variant

    variant = table_variant(variant, tiling)
    rows = [r for r in kernel_loops(path)["loops"]
            if r["kernel"] == kernel and r["variant"] == variant]
    br, bc = (str(tiling.Br), str(tiling.Bc)) if tiling else ("", "")
    for r in rows:
        if (r["Br"], r["Bc"]) == (br, bc) and r["d"] in ("", str(d)) and r["causal"] in ("", str(causal)):
            return r
    compiled = sorted({((r["Br"], r["Bc"]), r["d"], r["causal"]) for r in rows})
    raise LookupError(
        f"{kernel}{f' ({variant})' if variant else ''} with tiling={tiling}, d={d}, "
        f"causal={causal} has no recorded main loop; {path.name} has ((Br, Bc), d, causal) = "
        f"{compiled or 'none of this kernel'}: add it to tools/kernel_resources.py and rerun "
        "tools/kernel_loops.py (it needs a CUDA toolkit's libnvvm, nvJitLink and nvdisasm)")


@lru_cache(maxsize=None)
def stream_for(kernel: str, tiling: Tiling | None, d: int, causal: bool, variant: str = "",
               inner_trips: tuple[int, ...] | None = None, path: Path = LOOPS_JSON,
               peel_runs: tuple[int | None, ...] | None = None) -> tuple[Op, ...]:
    """The main loop's instruction stream of ``kernel`` compiled for ``tiling``, ``d``,
    ``causal`` (``decode_loop``; ``inner_trips`` overrides the nested loops' trip counts,
    ``peel_runs`` says how many of their peeled copies run; stall counts where every loop of
    the file has them, ``all_stall_counts``; a ``sparse`` variant's block-list reads hit L1)."""
    from .flash import SPARSE_VARIANT

    return decode_loop(loop_record(kernel, tiling, d, causal, variant, path), inner_trips, peel_runs,
                       stalls=all_stall_counts(path), list_loads=SPARSE_VARIANT in variant.split("+"))


@lru_cache(maxsize=None)
def all_stall_counts(path: Path = LOOPS_JSON) -> bool:
    """Whether every loop of the file holds its stall counts: the simulator honours them only
    then, so that kernels recorded at different times are timed on one footing."""
    loops = kernel_loops(path)["loops"]
    return bool(loops) and all(has_stall_counts(r) for r in loops)


# ---- the simulator -----------------------------------------------------------------------
def memory_latencies(r: MachineRates) -> tuple[float, float]:
    """(global, local) load latency by default: an L2 hit and an L1 hit, measured or preset."""
    return (r.l2_hit_latency_cycles or L2_HIT_LATENCY, r.l1_hit_latency_cycles or L1_HIT_LATENCY)


def global_load_latency(r: MachineRates, l2_miss: float) -> float:
    """A global load's mean latency when a share ``l2_miss`` of its bytes come from DRAM: the
    L2 hit latency, plus that share of DRAM's beyond it (measured, or the preset)."""
    l2 = memory_latencies(r)[0]
    dram = r.dram_latency_cycles or DRAM_LATENCY
    return l2 + min(1.0, max(0.0, l2_miss)) * (dram - l2)


def _latency(o: Op, r: MachineRates, memory: tuple[float, float], mma_format: str) -> float:
    pipe = o.pipe
    if pipe == "hmma":
        return r.mma_latency_cycles(mma_format)
    if pipe == "fma":
        return r.ffma_latency_cycles
    if pipe == "alu":
        return r.alu_latency_cycles
    if pipe == "xu":
        return r.mufu_ex2_latency_cycles
    if pipe == "fp64":
        return FP64_LATENCY_FACTOR * r.ffma_latency_cycles
    if pipe in _SHARED:
        return (r.lds_latency_cycles or LDS_LATENCY) + max(o.wavefronts, 1) - 1
    if pipe in _GLOBAL:
        if o.l1_hit:
            return r.l1_hit_latency_cycles or L1_HIT_LATENCY
        return memory[1] if pipe == "ldl" else memory[0]
    if pipe == "shfl":
        return r.shfl_latency_cycles or SHFL_LATENCY
    if pipe == "ldc":
        return LDC_LATENCY
    if pipe == "other":
        return S2R_LATENCY
    return r.alu_latency_cycles     # uniform datapath (assumed like the ALU), anything else


#: The dispatch units an HMMA holds for ``MachineRates.mma_dispatch_cycles`` (what calibrate
#: timed beside it: FFMA on both FMA halves, LOP3 + VIMNMX on the ALU).
_HELD_BY_MMA = ("fmaheavy", "fmalite", "alu")

_FP32_KEYS = {"FFMA", "FMUL", "FADD", "FFMA32I", "FMUL32I", "FADD32I", "FSWZADD"}


def _unit(o: Op) -> str | None:
    """The dispatch unit an instruction waits for (None: the issue slot only, or a queue)."""
    if o.pipe == "fma":
        return "fp32" if o.key in _FP32_KEYS else "fmaheavy"
    if o.pipe in ("hmma", "alu", "xu", "fp64"):
        return o.pipe
    return None


def _queue(o: Op) -> str | None:
    if o.pipe in _SHARED or o.pipe in _GLOBAL:
        return "mio"
    if o.pipe == "shfl":
        return "shfl"
    return None


def _service(o: Op, r: MachineRates) -> float:
    """Cycles of a scheduler's share of its queue an access takes (0: no queue)."""
    bits = {1: 32, 2: 64}.get(o.wavefronts, 128)
    if o.pipe.startswith("sts"):
        return o.wavefronts * SCHEDULERS / r.sts_wavefronts_per_cycle[bits]
    if _queue(o) == "mio":
        return o.wavefronts * SCHEDULERS / r.lds_wavefronts_per_cycle[bits]
    if o.pipe == "shfl":
        return SCHEDULERS / r.shfl_per_cycle
    return 0.0


def _drain(o: Op, r: MachineRates, red_sectors: float | None) -> float:
    """Cycles of the scheduler's reduction drain ``o`` takes (0: not a global reduction, or rates
    without the drain): its sectors (``red_sectors``, or a coalesced warp's) at a quarter of the
    SM's rate."""
    if o.pipe != "atom" or o.key.split(".")[0] not in GLOBAL_REDUCTIONS or not r.red_sectors_per_cycle:
        return 0.0
    sectors = access_bytes(o.key) if red_sectors is None else red_sectors   # 32 lanes x bytes / 32
    return sectors * SCHEDULERS / r.red_sectors_per_cycle


def _rates_key(r: MachineRates) -> tuple:
    return (r.source, r.mma_tf32_per_cycle, r.mma_tf32_latency_cycles, r.ffma_per_cycle,
            r.ffma_latency_cycles, r.alu_per_cycle, r.alu_latency_cycles, r.mufu_ex2_per_cycle,
            r.mufu_ex2_latency_cycles, r.shfl_per_cycle,
            tuple(sorted(r.lds_wavefronts_per_cycle.items())),
            tuple(sorted(r.sts_wavefronts_per_cycle.items())), tuple(sorted(r.barrier_cycles.items())),
            r.lds_latency_cycles, r.shfl_latency_cycles, r.l1_hit_latency_cycles,
            r.l2_hit_latency_cycles, r.dram_latency_cycles, r.red_sectors_per_cycle, r.mma_dispatch_cycles,
            tuple(sorted((f, tuple(sorted(c.items()))) for f, c in r.mma_half_by_config.items())),
            tuple(sorted(r.mma_half_latency_cycles.items())))


_CACHE: dict = {}


def loop_cycles(stream, warps_per_scheduler: int, rates: MachineRates, trips: int = 3,
                global_latency: float | None = None, local_latency: float | None = None, blocks: int = 1,
                policy: str = "oldest", mma_format: str = "tf32", red_sectors: float | None = None,
                account: dict | None = None, block_warps: int | None = None) -> float:
    """Cycles one scheduler needs a trip of the loop ``stream`` (a sequence of ``Op``) when
    ``warps_per_scheduler`` warps run it, in steady state over ``trips`` trips (module
    docstring); ``stream`` may instead be ``Streams`` (one per warp: loops whose trips differ
    from warp to warp). ``global_latency``, ``local_latency``: cycles of a global, a local load (None:
    ``memory_latencies(rates)``, an L2 and an L1 hit); ``blocks``: co-resident blocks the warps
    belong to (each barrier waits for its own block's); ``policy``: "oldest" or "gto";
    ``mma_format``: the HMMA's ("tf32", "float16", "bfloat16": its measured rate and latency);
    ``red_sectors``: 32-byte sectors a global reduction (a warp instruction) sends to L2 (None:
    a coalesced warp's, 32 lanes x its width / 32); ``account``: ``simulate``'s (the
    simulation then runs again, uncached); ``block_warps``: the warps of a whole block, whose
    barrier's cost is measured by block size (None: 4 x the block's warps here, a block spread
    evenly over the 4 schedulers)."""
    stream = stream if isinstance(stream, Streams) else tuple(stream)
    if account is not None:
        return simulate(stream, warps_per_scheduler, rates, trips, global_latency, local_latency, blocks,
                        policy, mma_format, red_sectors, account, block_warps).cycles_per_trip
    key = (stream, warps_per_scheduler, _rates_key(rates), trips, global_latency, local_latency,
           blocks, policy, mma_format, red_sectors, block_warps)
    if key not in _CACHE:
        _CACHE[key] = simulate(stream, warps_per_scheduler, rates, trips, global_latency,
                               local_latency, blocks, policy, mma_format, red_sectors,
                               block_warps=block_warps).cycles_per_trip
    return _CACHE[key]


@dataclass(frozen=True)
class Simulation:
    """What ``simulate`` found: trip_ends[k - 1] = t(k), the cycle after the scheduler issued
    k trips' worth of instructions (k x the sum of the warps' stream lengths, whichever warps
    issued them);
    issued, instructions issued by all warps; cycles_per_trip, the steady state."""

    trip_ends: tuple[float, ...]
    issued: int
    cycles_per_trip: float


@dataclass(frozen=True)
class Streams:
    """One instruction stream per simulated warp of a scheduler (warp i: ``per_warp[i]``):
    a loop's body whose nested loops run different trips in different warps (a thread-strided
    loop over fewer rows than the block has threads)."""

    per_warp: tuple[tuple[Op, ...], ...]


class _Decoded:
    """The per-op constants of one stream, registers numbered in ``names``."""

    def __init__(self, stream, names, r, memory, mma_format, red_sectors):
        self.ops = stream
        self.srcs = [tuple(names.setdefault(s, len(names)) for s in o.srcs) for o in stream]
        self.dests = [tuple(names.setdefault(s, len(names)) for s in o.dests) for o in stream]
        self.latency = [_latency(o, r, memory, mma_format) for o in stream]
        self.variable = [o.pipe in _VARIABLE or o.pipe in _GLOBAL for o in stream]
        self.units = [_unit(o) for o in stream]
        self.queues = [_queue(o) for o in stream]
        self.service = [_service(o, r) for o in stream]
        self.stalls = [o.stall for o in stream]
        self.drain = [_drain(o, r, red_sectors) for o in stream]
        self.behind_drain = [o.pipe in _GLOBAL_LOAD_PIPES and not o.l1_hit for o in stream]
        self.copy = [_COPY if o.pipe == "ldgsts" else _COMMIT if o.key == "LDGDEPBAR" else _NO_COPY
                     for o in stream]
        self.depbar = [o.depbar for o in stream]
        self.classes = [_LONG if o.pipe in _GLOBAL else _SHORT if o.pipe in _SHORT_PIPES else _FIXED
                        for o in stream]


#: Why a warp did not issue, as ncu's warp states name them: "wait" (the compiler's stall count,
#: and a fixed-latency producer -- FMA, ALU, HMMA -- not yet done), "short_scoreboard" (a
#: shared-memory, shuffle, XU or constant load's result), "long_scoreboard" (a global or local
#: load's, a cp.async group), "math_pipe_throttle" (its pipe busy), "dispatch_stall" (the
#: mma's hold, ``MachineRates.mma_dispatch_cycles``), "barrier", "not_selected" (ready, another
#: warp issued), "selected" (its issue cycle).
STALL_REASONS = ("selected", "wait", "short_scoreboard", "long_scoreboard", "math_pipe_throttle",
                 "dispatch_stall", "barrier", "not_selected")
_FIXED, _SHORT, _LONG = "wait", "short_scoreboard", "long_scoreboard"
_SHORT_PIPES = _SHARED | {"shfl", "xu", "ldc", "other"}


def _account(account, w, k, c, t, unit, unit_free, held_until, ready, tracked, producer,
             stalled_until, released, issued_at, groups) -> None:
    """Adds warp ``w``'s cycles since its last issue to ``account`` by reason, in the order a
    warp becomes eligible: first its stall count ("wait"), then its operands and barriers (each
    the cycles from the previous one's end to its own, in the order they end), then its
    dispatch unit (the mma's hold, then the pipe); what is left before ``t``, not selected. The
    constraints are the ones the issue waited for (``simulate``'s ``own_wait``): every source,
    a destination whose last write is scoreboarded, a DEPBAR's groups but its newest n."""
    account["selected"] += 1
    last, issued_at[w] = issued_at[w], t
    operands = [("barrier", released[w])] + [(producer[w][s], ready[w][s]) for s in c.srcs[k]]
    operands += [(producer[w][d], ready[w][d]) for d in c.dests[k] if tracked[w][d]]
    n = c.depbar[k]
    if n is not None:
        operands += [("long_scoreboard", landed) for landed in groups[w][:max(0, len(groups[w]) - n)]]
    dispatch = [("dispatch_stall", held_until[unit]), ("math_pipe_throttle", unit_free[unit])] if unit else []
    start = last + 1
    for stage in ([("wait", stalled_until[w])], operands, dispatch):
        for reason, end in sorted(stage, key=lambda e: e[1]):
            if end > start:
                account[reason] += min(end, t) - start
                start = min(end, t)
    account["not_selected"] += max(0.0, t - start)


def stall_reasons(account: dict) -> dict[str, float]:
    """``simulate``'s ``account`` as cycles per issued instruction by reason (ncu's
    ``smsp__average_warps_issue_stalled_<reason>_per_issue_active``); their sum is the warps'
    cycles between issues. Over the whole simulation -- every trip, the first's ramp-up and
    the last's tail with it -- where ``cycles_per_trip`` is the steady state."""
    n = max(account.get("selected", 0), 1)       # one selected cycle an issued instruction
    return {reason: account[reason] / n for reason in STALL_REASONS}


def simulate(stream, warps: int, r: MachineRates, trips: int = 3,
             global_latency: float | None = None, local_latency: float | None = None, blocks: int = 1,
             policy: str = "oldest", mma_format: str = "tf32", red_sectors: float | None = None,
             account: dict | None = None, block_warps: int | None = None) -> Simulation:
    """The cycle-by-cycle simulation behind ``loop_cycles`` (``block_warps`` as there).
    ``account``: a dict to fill with the warps' cycles between their issues by reason, as ncu's
    warp-state sampling names them (``STALL_REASONS``; ``stall_reasons`` turns it into cycles
    per issued instruction)."""
    per_warp = stream.per_warp if isinstance(stream, Streams) else (tuple(stream),) * warps
    if len(per_warp) != warps:
        raise ValueError(f"{len(per_warp)} streams for {warps} warps")
    if not any(per_warp):
        return Simulation((0.0,) * trips, 0, 0.0)
    if warps < 1 or trips < 1 or blocks < 1 or warps % blocks:
        raise ValueError(f"{warps} warps in {blocks} blocks, {trips} trips")
    if policy not in ("oldest", "gto"):
        raise ValueError(f"policy {policy!r}")
    # registers -> small ints; per-op constants, once per distinct stream
    names: dict[str, int] = {}
    default = memory_latencies(r)
    memory = (default[0] if global_latency is None else global_latency,
              default[1] if local_latency is None else local_latency)
    decoded: dict[tuple, _Decoded] = {}
    for body in per_warp:
        if body not in decoded:
            decoded[body] = _Decoded(body, names, r, memory, mma_format, red_sectors)
    code = [decoded[body] for body in per_warp]
    per = SCHEDULERS
    interval = {"hmma": per / r.mma_per_cycle(mma_format), "alu": per / r.alu_per_cycle,
                "xu": per / r.mufu_ex2_per_cycle, "fmaheavy": 2 * per / r.ffma_per_cycle,
                "fmalite": 2 * per / r.ffma_per_cycle, "fp64": 2 * per / r.ffma_per_cycle}
    hold = r.mma_dispatch_cycles or 0.0
    warps_per_block = warps // blocks
    barrier_cost = (r.barrier_cycles_at(block_warps or SCHEDULERS * warps_per_block)
                    if any(o.barrier for body in per_warp for o in body) else 0.0)
    lengths = [len(body) for body in per_warp]
    totals = [n * trips for n in lengths]
    per_trip_issues = sum(lengths)
    ready = [[0.0] * len(names) for _ in range(warps)]        # register -> cycle its value is ready
    tracked = [[False] * len(names) for _ in range(warps)]    # its last write is scoreboarded
    pc = [0] * warps
    resume = [0.0] * warps                                     # barrier release
    unit_free = dict.fromkeys(interval, 0.0)
    if account is not None:
        held_until = dict.fromkeys(interval, 0.0)              # the mma's hold on each unit
        for reason in STALL_REASONS:       # (a second simulation adds to the first's: roles)
            account.setdefault(reason, 0.0)
        producer = [[_FIXED] * len(names) for _ in range(warps)]  # each register's producer's class
        stalled_until = [0.0] * warps                          # the compiler's stall count
        released = [0.0] * warps                               # the last barrier's release
        issued_at = [-1.0] * warps                             # (a warp's cycles count from 0)
    queue_free = {"mio": 0.0, "shfl": 0.0}
    drained = 0.0                                              # the reduction drain's end
    copying = [0.0] * warps          # when the warp's uncommitted cp.async copies have all landed
    groups: list[list[float]] = [[] for _ in range(warps)]    # its committed groups' landings
    arrived: list[list[int]] = [[] for _ in range(blocks)]
    trip_end: list[float] = []                               # t(k), k = 1 .. trips
    waiting = [False] * warps
    last = None
    t = 0.0                                  # the scheduler's next free issue slot

    # A warp's next instruction can issue once its registers and its barrier allow
    # (``waits[w]``: changes only when the warp issues or its barrier releases, so it is kept
    # until then) and its dispatch unit is free (read at each step: other warps move it).
    waits: list[float | None] = [None] * warps
    units: list[str | None] = [None] * warps

    def own_wait(w: int) -> float:
        c = code[w]
        k = pc[w] % lengths[w]
        rw = ready[w]
        e = resume[w]
        for s in c.srcs[k]:
            if rw[s] > e:
                e = rw[s]
        tw = tracked[w]
        for d in c.dests[k]:
            if tw[d] and rw[d] > e:
                e = rw[d]
        n = c.depbar[k]
        if n is not None:            # DEPBAR.LE SB0, n: all but the n latest groups landed
            for landed in groups[w][:max(0, len(groups[w]) - n)]:
                if landed > e:
                    e = landed
        units[w] = c.units[k]
        waits[w] = e
        return e

    issued = 0
    while issued < per_trip_issues * trips:
        candidates, times = [], []
        fp32_free = min(unit_free["fmaheavy"], unit_free["fmalite"])
        for w in range(warps):
            if pc[w] >= totals[w] or waiting[w]:
                continue
            e = waits[w]
            if e is None:
                e = own_wait(w)
            unit = units[w]
            if unit is not None:
                free = fp32_free if unit == "fp32" else unit_free[unit]
                if free > e:
                    e = free
            candidates.append(w)
            times.append(e)
        if not times:
            raise RuntimeError("every warp waits at a barrier that cannot release")
        t = max(t, min(times))
        ready_now = [w for w, e in zip(candidates, times) if e <= t + 1e-9]
        w = last if policy == "gto" and last in ready_now else ready_now[0]
        c = code[w]
        k = pc[w] % lengths[w]
        unit = c.units[k]
        if unit == "fp32":
            unit = "fmaheavy" if unit_free["fmaheavy"] <= unit_free["fmalite"] else "fmalite"
        if account is not None:
            _account(account, w, k, c, t, unit, unit_free, held_until, ready, tracked, producer,
                     stalled_until, released, issued_at, groups)
        if unit is not None:
            unit_free[unit] = max(unit_free[unit], t) + interval[unit]
        if unit == "hmma" and hold:     # the FMA pipe and the ALU wait while the mma dispatches
            for held in _HELD_BY_MMA:
                unit_free[held] = max(unit_free[held], t + hold)
                if account is not None:
                    held_until[held] = max(held_until[held], t + hold)
        start = t
        queue = c.queues[k]
        if queue is not None:
            start = max(t, queue_free[queue])
            queue_free[queue] = start + c.service[k]
        if c.drain[k]:
            drained = max(drained, start) + c.drain[k]
        elif c.behind_drain[k]:
            start = max(start, drained)
        for d in c.dests[k]:
            ready[w][d] = start + c.latency[k]
            tracked[w][d] = c.variable[k]
            if account is not None:
                producer[w][d] = c.classes[k]
        copy = c.copy[k]
        if copy == _COPY:
            copying[w] = max(copying[w], start + c.latency[k])
        elif copy == _COMMIT:
            groups[w].append(copying[w])
            copying[w] = 0.0
        elif c.depbar[k] is not None:
            del groups[w][:max(0, len(groups[w]) - c.depbar[k])]
        waits[w] = None
        if c.stalls[k] > 1:          # the compiler's stall count: the warp's next issue waits
            resume[w] = max(resume[w], t + c.stalls[k])
            if account is not None:
                stalled_until[w] = t + c.stalls[k]
        pc[w] += 1
        issued += 1
        last = w
        if issued % per_trip_issues == 0:
            trip_end.append(t + 1)
        if c.ops[k].barrier:
            group = arrived[w % blocks]
            group.append(w)
            waiting[w] = True
            if len(group) == warps_per_block:
                for v in group:
                    waiting[v] = False
                    resume[v] = t + barrier_cost
                    if account is not None:
                        released[v] = t + barrier_cost
                    waits[v] = None
                group.clear()
        t += 1
    ends = tuple(trip_end)
    per_trip = (ends[-1] - ends[0]) / (trips - 1) if trips > 1 else ends[0]
    return Simulation(ends, issued, per_trip)

"""The instruction mix of each compiled kernel's SASS, per hardware pipe, in its main loop and
outside it: what a block's warps issue to each pipe, for the runtime model.

``tools/kernel_sass.py`` compiles every kernel of tools/kernel_resources.py (same
configurations, same register caps) to sm_90 SASS, finds the loops and writes
``kernel_sass.csv``; ``sass(kernel, tiling, d, causal, variant, region)`` reads a row back.
Counts are static: instructions in the code, each counted once, whichever path a warp takes (a
cold branch inside a loop, e.g. the all-masked-row case of the forward, is counted as if it ran
every iteration; a predicated-off instruction is issued all the same). An instruction is issued
once per warp, so a count is per warp: a block issues ``count x warps``.

Regions (names ``KERNEL``, ``MAIN_LOOP``, ``INNER_LOOP``/``LOOP`` + k), found from the branches
alone (``find_loops``): a backward branch (``BRA``/``JMP`` to an earlier address) closes a loop
over the address range [target, branch]; ranges that share a header, or overlap, are one loop; a
loop inside another's range is nested in it.
- ``kernel``: every instruction of the kernel's code (its subroutines, e.g. ptxas's slow path of
  a correctly rounded reciprocal, included), less the section's tail padding (the closing
  ``BRA`` to itself and the ``NOP``s after it);
- ``main_loop``: the outermost loop holding the most ``HMMA``, else the most FP32
  instructions (FFMA, FMUL, FADD), ties to the larger: the j loop of a forward, the i loop of a
  backward. Its instructions, those of loops nested in it included, once;
- ``inner_loop_<k>``: each loop nested in the main loop (any depth, k = 1, 2, ... by address);
- ``loop_<k>``: every other loop (before or after the main loop, e.g. a strided copy of Qi into
  shared memory), by address. ``kernel`` minus ``main_loop`` is the code outside the main loop.
Runtime trip counts are not in the SASS: the model multiplies each region by its own (a main
loop iteration issues its ``main_loop`` counts plus, for each inner loop, ``trips - 1`` times
that loop's counts).

Pipe classes (``PIPES``: they partition ``total``), as Nsight Compute assigns sm_90 opcodes
(``sm__inst_executed_pipe_*``; its Kernel Profiling Guide, "Pipelines"):
- ``hmma``: the tensor pipe: HMMA (also IMMA, DMMA, HGMMA if they ever appear) and HFMA2.MMA (a
  register move ptxas may place there; none in these kernels, whose HMMA counts tests check);
- ``fma``: FMA pipes: FP32 FFMA, FMUL, FADD (their ``32I`` forms), FSWZADD, FP16x2 HFMA2,
  HADD2, HMUL2; integer IMAD (every form: IMAD.MOV, .SHL, .X, .WIDE, .IADD, .HI), IMUL, IDP;
  and VIADD (an assumption: the sm_90 two-operand integer add that ptxas emits where sm_80 code
  had IMAD.IADD; not checked against ncu). On GH100 FP32 goes to either half (fmaheavy,
  fmalite), IMAD and IDP to fmaheavy only: ``fp32`` counts the FP32 part (a subset of ``fma``,
  outside the partition), so ``fma - fp32`` is the fmaheavy-only work;
- ``alu``: integer and logic (IADD3, LOP3, PLOP3, SHF, LEA, ISETP, SEL, IABS, IMNMX, VIMNMX,
  PRMT, BMSK, SGXT, P2R, R2P, POPC, FLO, BREV), moves (MOV, CS2R), FP32 compare, select, min/max
  (FSETP, FSET, FSEL, FMNMX, FCHK) and the fast conversions I2FP, F2FP, F2IP (ncu: "the ALU
  pipeline performs fast FP32-to-FP16 conversion"), VOTE;
- ``xu``: MUFU.* (EX2, RCP, LG2, RSQ, RCP64H, ...), the older conversions I2F, F2I, F2F (also
  float <-> double), FRND, I2I;
- ``fp64``: DFMA, DMUL, DADD, DSETP, DMNMX (ncu's fp64 pipe);
- LSU, by kind and access width (``lds32`` counts 32-bit and narrower accesses):
  ``lds32``/``lds64``/``lds128`` (LDS), ``ldsm`` (LDSM), ``sts32``/``sts64``/``sts128`` (STS),
  ``ldg32``/``ldg64``/``ldg128`` (LDG, LD), ``stg32``/``stg64``/``stg128`` (STG, ST), ``ldl``,
  ``stl`` (local memory: register spills and stack arrays), ``shfl`` (SHFL), ``atom`` (ATOM,
  ATOMS, ATOMG, RED, REDG, REDUX), ``ldgsts`` (LDGSTS);
- ``ldc``: LDC, a load from the constant bank into a thread's registers (kernel parameters:
  pointers, array shapes and strides, reloaded where ptxas did not keep them; ncu's ADU), not
  ULDC (uniform);
- ``bar``: BAR.* (block barriers: ncu's ADU pipe);
- ``branch``: the CBU's control flow: BRA, BRX, JMP, JMX, CALL, RET, EXIT, BSSY, BSYNC, BMOV,
  WARPSYNC, BREAK, YIELD, KILL, NANOSLEEP;
- ``uniform``: the uniform datapath: every U* opcode (UIADD3, ULDC, UMOV, ...), S2UR, R2UR,
  VOTEU;
- ``nop``: NOP (issued like any instruction);
- ``other``: the rest: S2R (special registers: ncu's LSU), MEMBAR, DEPBAR, and any opcode not
  named here.
Beside the classes: ``ldl_bytes`` / ``stl_bytes``, the bytes a thread reads / writes of local
memory (the sum of the LDL / STL access widths); ``spill_load_bytes`` / ``spill_store_bytes``,
their part that refills / spills registers (the LDL / STL nvdisasm marks ``SpillRefill``: over
the whole kernel, ptxas -v's "bytes spill loads / stores"; the rest are local arrays);
``opcodes``, each opcode's count by ``opcode_key`` (the mnemonic without modifiers, but the
access width of memory instructions, MUFU's function and HMMA's shape), so that a class can be
re-derived if ncu assigns an opcode differently; ``lines``, the kernel-source lines the
region's instructions come from (``source_lines``: a function inlined into the kernel shows as
the line that calls it), to tell which source loop a region is, and so its trip count. Pure
Python: no numba.
"""
from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Mapping

from .tiling import Tiling

#: Per-region instruction classes: written by tools/kernel_sass.py, read by ``sass``.
SASS_CSV = Path(__file__).with_name("kernel_sass.csv")
#: The classes that partition a region's instructions (their sum is ``total``).
PIPES = ("hmma", "fma", "alu", "xu", "fp64",
         "lds32", "lds64", "lds128", "ldsm", "sts32", "sts64", "sts128",
         "ldg32", "ldg64", "ldg128", "stg32", "stg64", "stg128",
         "ldl", "stl", "shfl", "atom", "ldgsts",
         "ldc", "bar", "branch", "uniform", "nop", "other")
#: The LSU classes among PIPES (ncu's LSU pipe also takes S2R, counted in ``other``).
LSU = ("lds32", "lds64", "lds128", "ldsm", "sts32", "sts64", "sts128", "ldg32", "ldg64",
       "ldg128", "stg32", "stg64", "stg128", "ldl", "stl", "shfl", "atom", "ldgsts")
#: Counted beside the classes: FP32 instructions (a subset of ``fma``), local-memory bytes a
#: thread reads and writes (all, then the register spills' part), all instructions.
EXTRA = ("fp32", "ldl_bytes", "stl_bytes", "spill_load_bytes", "spill_store_bytes", "total")
COUNTS = PIPES + EXTRA
#: Region names (``inner_loop_<k>`` and ``loop_<k>`` numbered from 1 by address).
KERNEL, MAIN_LOOP, INNER_LOOP, LOOP = "kernel", "main_loop", "inner_loop_", "loop_"

_FP32 = {"FFMA", "FMUL", "FADD", "FFMA32I", "FMUL32I", "FADD32I", "FSWZADD"}
_FMA = _FP32 | {"HFMA2", "HADD2", "HMUL2", "HFMA2_32I", "HADD2_32I", "HMUL2_32I",
                "IMAD", "IMAD32I", "IMUL", "IMUL32I", "IDP", "IDP4A", "VIADD"}
_ALU = {"IADD3", "IADD", "IADD32I", "LOP3", "LOP", "LOP32I", "PLOP3", "SHF", "SHL", "SHR",
        "LEA", "ISCADD", "ISETP", "ICMP", "IABS", "IMNMX", "VIMNMX", "VIMNMX3", "VIADDMNMX",
        "SEL", "PRMT", "BMSK", "SGXT", "P2R", "R2P", "POPC", "FLO", "BREV", "MOV", "MOV32I",
        "CS2R", "FSETP", "FSET", "FSEL", "FMNMX", "FCHK", "I2FP", "F2FP", "F2IP", "VOTE",
        "HSETP2", "HSET2", "HMNMX2"}
_XU = {"MUFU", "I2F", "F2I", "F2F", "FRND", "I2I"}
_FP64 = {"DFMA", "DMUL", "DADD", "DSETP", "DMNMX", "DSET"}
_TENSOR = {"HMMA", "IMMA", "DMMA", "BMMA", "HGMMA"}
_BRANCH = {"BRA", "BRX", "BRXU", "JMP", "JMX", "JMXU", "CALL", "RET", "EXIT", "BSSY", "BSYNC",
           "BMOV", "WARPSYNC", "BREAK", "YIELD", "KILL", "NANOSLEEP", "BPT"}
_UNIFORM_EXTRA = {"S2UR", "R2UR", "VOTEU"}
_ATOM = {"ATOM", "ATOMS", "ATOMG", "RED", "REDG", "REDUX"}
#: The ``atom`` opcodes that send reductions to L2 (not ATOMS: shared; REDUX: a warp's own).
GLOBAL_REDUCTIONS = frozenset(_ATOM - {"ATOMS", "REDUX"})
#: memory opcode -> the class prefix its width completes
_MEMORY = {"LDS": "lds", "STS": "sts", "LDG": "ldg", "LD": "ldg", "STG": "stg", "ST": "stg",
           "LDL": "ldl", "STL": "stl"}
_WIDTH_BYTES = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


def opcode_key(mnemonic: str) -> str:
    """The histogram key of a SASS mnemonic (``LDS.U.128`` -> ``LDS.128``, ``MUFU.EX2`` ->
    ``MUFU.EX2``, ``ISETP.GT.U32.AND`` -> ``ISETP``, ``HFMA2.MMA`` -> ``HFMA2.MMA``): the
    opcode, with a memory access's width, MUFU's function, an HMMA's shape and types."""
    base, *modifiers = mnemonic.split(".")
    if base in _MEMORY or base in _ATOM or base in ("LDSM", "LDGSTS"):
        width = [m for m in modifiers if m in _WIDTH_BYTES]
        return ".".join([base, *width[:1]])
    if base in ("MUFU", "HMMA", "IMMA", "DMMA"):
        return mnemonic
    if base == "HFMA2" and "MMA" in modifiers:
        return "HFMA2.MMA"
    return base


def access_bytes(key: str) -> int:
    """Bytes one thread moves with memory instruction ``key`` (an ``opcode_key``): 4 unless
    its width says otherwise."""
    _, *width = key.split(".")
    return _WIDTH_BYTES[width[0]] if width else 4


def pipe_class(key: str) -> str:
    """The PIPES class of an ``opcode_key`` (see the module docstring)."""
    base = key.split(".")[0]
    if key == "HFMA2.MMA":
        return "hmma"   # a register move ptxas places on the tensor pipe (ncu: hmma_type_hfma2)
    if base in _TENSOR:
        return "hmma"
    if base in _FMA:
        return "fma"
    if base in _ALU:
        return "alu"
    if base in _XU:
        return "xu"
    if base in _FP64:
        return "fp64"
    if base == "LDC":
        return "ldc"
    if base in _MEMORY:
        prefix = _MEMORY[base]
        if prefix in ("ldl", "stl"):
            return prefix
        return f"{prefix}{max(access_bytes(key), 4) * 8}"    # lds32 / lds64 / lds128, ...
    if base == "LDSM":
        return "ldsm"
    if base == "LDGSTS":
        return "ldgsts"
    if base == "SHFL":
        return "shfl"
    if base in _ATOM:
        return "atom"
    if base == "BAR":
        return "bar"
    if base in _BRANCH:
        return "branch"
    if base == "NOP":
        return "nop"
    if (base.startswith("U") and base != "UNDEF") or base in _UNIFORM_EXTRA:
        return "uniform"
    return "other"


# ---- parsing and loops -------------------------------------------------------------------
#: "/*0a40*/  @!P0 LDC.64 R28, c[0x0][0x2a0] ;": address, mnemonic (past a predicate), operands
INSTRUCTION_LINE = re.compile(
    r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P(?:T|\d)\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_LABEL = re.compile(r"^([.$\w]+):\s*$")
_TARGET = re.compile(r"`\(([^)]+)\)")


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction: its address (bytes), mnemonic (``ISETP.GT.U32.AND``), for a branch
    the address it may jump to (None otherwise, and for calls and returns), and whether it is a
    register spill or refill (an LDL / STL nvdisasm marks ``SpillRefill``)."""

    address: int
    mnemonic: str
    target: int | None = None
    spill: bool = False

    @property
    def key(self) -> str:
        return opcode_key(self.mnemonic)


def parse(text: str) -> tuple[Instruction, ...]:
    """The instructions of ``nvdisasm -c`` output (one kernel), in address order, less the
    tail padding (a closing branch to itself and the NOPs after it)."""
    raw, labels, pending = [], {}, []
    for line in text.splitlines():
        label = _LABEL.match(line)
        if label:
            pending.append(label.group(1))
            continue
        found = INSTRUCTION_LINE.match(line)
        if not found:
            continue
        address = int(found.group(1), 16)
        for name in pending:
            labels[name] = address
        pending = []
        target = _TARGET.search(found.group(3))
        raw.append((address, found.group(2), target and target.group(1),
                    '(*"SpillRefill"*)' in found.group(3)))
    for name in pending:       # a label after the last instruction (the section's end)
        labels[name] = raw[-1][0] + 16 if raw else 0
    out = [Instruction(a, m, labels.get(t) if t and m.split(".")[0] in ("BRA", "JMP") else None, s)
           for a, m, t, s in raw]
    while out and out[-1].mnemonic == "NOP":
        out.pop()
    if out and out[-1].target == out[-1].address:
        out.pop()
    return tuple(out)


#: nvdisasm -hex: an instruction's second 64-bit word, alone on the line after it.
_HIGH_WORD = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")


def stall_counts(text: str) -> dict[int, int]:
    """Address -> stall count of each instruction of ``nvdisasm -c -hex`` output of sm_70+
    code (empty without ``-hex``): the 4-bit field at bits 105-108 of the 128-bit encoding,
    bits 41-44 of the second word, the cycles the warp waits before it issues its next
    instruction (the compiler's schedule for fixed-latency results; ncu's "wait" stall). At
    least 1."""
    out, lines = {}, text.splitlines()
    for line, after in zip(lines, lines[1:]):
        found, high = INSTRUCTION_LINE.match(line), _HIGH_WORD.match(after)
        if found and high:
            out[int(found.group(1), 16)] = max(1, (int(high.group(1), 16) >> 41) & 0xF)
    return out


_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')


def source_lines(text: str) -> dict[int, tuple[str, int]]:
    """Address -> (source file name, line) of each instruction that has one, from ``nvdisasm
    -c -g`` output of a cubin assembled with ``ptxas -lineinfo`` (a line holds from its
    ``//## File`` comment to the next, within one function)."""
    out, current = {}, None
    for line in text.splitlines():
        marker = _LINE.search(line)
        if marker:
            current = (marker.group(1).rsplit("/", 1)[-1], int(marker.group(2)))
        elif "@function" in line:
            current = None
        else:
            found = INSTRUCTION_LINE.match(line)
            if found and current:
                out[int(found.group(1), 16)] = current
    return out


def format_lines(lines: Iterable[tuple[str, int]]) -> str:
    """``[("a.py", 3), ("a.py", 4), ("a.py", 5), ("a.py", 9)]`` -> ``"a.py:3-5,9"`` (files
    apart by spaces)."""
    by_file: dict[str, set[int]] = {}
    for name, number in lines:
        by_file.setdefault(name, set()).add(number)
    parts = []
    for name in sorted(by_file):
        numbers, runs = sorted(by_file[name]), []
        for n in numbers:
            if runs and n == runs[-1][1] + 1:
                runs[-1][1] = n
            else:
                runs.append([n, n])
        parts.append(f"{name}:" + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs))
    return " ".join(parts)


@dataclass(frozen=True)
class Loop:
    """The address range [start, end] of a loop (start: its header; end: its last backward
    branch) and its nesting depth (1: not inside another loop)."""

    start: int
    end: int
    depth: int

    def __contains__(self, address: int) -> bool:
        return self.start <= address <= self.end

    def holds(self, other: "Loop") -> bool:
        return other is not self and self.start <= other.start and other.end <= self.end


def _overlap(a: list[int], b: list[int]) -> bool:
    """Whether two address ranges are one loop: one header, or overlapping without nesting."""
    (s0, e0), (s1, e1) = sorted((a, b))
    return s0 == s1 or s0 < s1 <= e0 < e1


def find_loops(instructions: Iterable[Instruction]) -> tuple[Loop, ...]:
    """Every loop closed by a backward branch, sorted by start address (outer before inner).
    Ranges with one header are one loop; ranges that overlap without nesting are merged."""
    spans = [[i.target, i.address] for i in instructions
             if i.target is not None and i.target < i.address]
    merging = True
    while merging:
        merging = False
        for a in range(len(spans)):
            b = next((b for b in range(a + 1, len(spans)) if _overlap(spans[a], spans[b])), None)
            if b is not None:
                spans[a] = [min(spans[a][0], spans[b][0]), max(spans[a][1], spans[b][1])]
                del spans[b]
                merging = True
                break
    spans.sort(key=lambda span: (span[0], -span[1]))
    return tuple(Loop(s, e, 1 + sum(1 for s2, e2 in spans
                                    if (s2, e2) != (s, e) and s2 <= s and e <= e2))
                 for s, e in spans)


@dataclass(frozen=True)
class Region:
    """A named address range of a kernel and its instructions."""

    name: str
    start: int
    end: int
    depth: int
    instructions: tuple[Instruction, ...]


def tally(instructions: Iterable[Instruction]) -> tuple[dict[str, int], dict[str, int]]:
    """(the COUNTS of ``instructions``, their opcode histogram by ``opcode_key``)."""
    instructions = tuple(instructions)
    opcodes = Counter(i.key for i in instructions)
    counts = dict.fromkeys(COUNTS, 0)
    for i in instructions:
        if i.spill:
            kind = {"LDL": "spill_load_bytes", "STL": "spill_store_bytes"}[i.key.split(".")[0]]
            counts[kind] += access_bytes(i.key)
    for key, n in opcodes.items():
        counts[pipe_class(key)] += n
        counts["total"] += n
        if key in _FP32:
            counts["fp32"] += n
        if key.split(".")[0] in ("LDL", "STL"):
            counts[f"{key[:3].lower()}_bytes"] += n * access_bytes(key)
    return counts, dict(sorted(opcodes.items()))


def regions(instructions: tuple[Instruction, ...]) -> tuple[Region, ...]:
    """The kernel, its main loop, the loops nested in it and every other loop (see the module
    docstring), in that order."""
    if not instructions:
        raise ValueError("no instructions")
    out = [Region(KERNEL, instructions[0].address, instructions[-1].address, 0, instructions)]
    loops = find_loops(instructions)

    def inside(loop):
        return tuple(i for i in instructions if i.address in loop)

    def weight(loop):
        counts, _ = tally(inside(loop))
        return counts["hmma"], counts["fp32"], counts["total"]

    top = [loop for loop in loops if loop.depth == 1]
    main = max(top, key=weight, default=None)
    if main is not None:
        out.append(Region(MAIN_LOOP, main.start, main.end, 1, inside(main)))
    inner = [loop for loop in loops if main is not None and main.holds(loop)]
    rest = [loop for loop in loops if loop is not main and loop not in inner]
    out += [Region(f"{INNER_LOOP}{k}", loop.start, loop.end, loop.depth, inside(loop))
            for k, loop in enumerate(inner, 1)]
    out += [Region(f"{LOOP}{k}", loop.start, loop.end, loop.depth, inside(loop))
            for k, loop in enumerate(rest, 1)]
    return tuple(out)


#: Global loads, the copies' unit (LDG, LD, and LDGSTS for cp.async: ``KernelSass``'s ldg32 /
#: ldg64 / ldg128 and ldgsts).
_GLOBAL_LOADS = {"LDG", "LD", "LDGSTS"}
#: Instructions that may not sit between a peel's end and its loop's header (``peeled_copies``).
_NOT_IN_GAP = _GLOBAL_LOADS | _TENSOR | _ATOM | {"LDS", "STS", "STG", "ST", "LDSM", "BAR"}
#: At most this many instructions between a peel's end and its loop's header: the loop's trip
#: count and its entry guard.
PEEL_GAP = 24


def _global_loads(instructions: Iterable[Instruction]) -> int:
    return sum(1 for i in instructions if i.mnemonic.split(".")[0] in _GLOBAL_LOADS)


def _beside(loop: Region, nested: Iterable[Region]):
    """Whether an instruction lies outside the ``nested`` loops that do not hold ``loop``
    (the code around ``loop`` at its own nesting level)."""
    others = [(r.start, r.end) for r in nested if not (r.start <= loop.start and loop.end <= r.end)]
    return lambda i: not any(a <= i.address <= b for a, b in others)


def peeled_copies(body: tuple[Instruction, ...], loop: Region,
                  nested: Iterable[Region] = ()) -> tuple[tuple[int, int], ...]:
    """The peeled copies ptxas places before ``loop``, a strided copy it unrolled u-fold
    inside the loop whose instructions are ``body`` (the main loop's): ((first, last) address
    of each, in order), () where there are none.

    A strided copy ``for e in range(tid, n, T)`` has a trip count that depends on ``tid``, so
    ptxas compiles it as a peel of the first ``iterations mod u`` iterations, then a loop of u
    iterations a trip (e.g. the FFMA backward's Qi, dOi and L_i, D_i copies, the half
    backward's cp.async row copy, backward v13's L_i, D_i copy; sm_90, ptxas 13.0). The peel
    is u - 1 copies of one iteration, each after an exit branch; every exit jumps to the peel's
    end, a few instructions (the loop's trip count and entry guard) before the loop: a warp
    that has r = iterations mod u iterations to peel runs the copies 1..r and the exit after
    copy r, then the loop ``iterations // u`` times (ncu's executed instructions of backward
    v13, H200, 2026-12-04: its row copy's peeled copies 2 and 3 and its 4-fold loop never ran
    in warp 0, which has 1 row; results/h200/stalls/source). Found from the branches: the
    forward branches of ``body`` before ``loop``, outside the ``nested`` loops that do not
    hold it, that share a target T at most ``PEEL_GAP`` instructions before ``loop`` with no
    memory access, mma or barrier between them; copy k runs from the instruction after exit k
    to exit k + 1 (the last copy: to T); each copy must make the same number of global loads,
    c > 0, and the loop (m + 1) c for m copies, and no copy may hold a loop -- else () (no
    peel recognised)."""
    loads = _global_loads(loop.instructions)
    if not loads:
        return ()
    outside = _beside(loop, nested)
    before = [i for i in body if i.address < loop.start]
    exits: dict[int, list[Instruction]] = {}
    for i in before:
        if i.target is not None and i.address < i.target <= loop.start and outside(i):
            exits.setdefault(i.target, []).append(i)
    for target in sorted(exits, reverse=True):           # the nearest end first
        gap = [i for i in before if i.address >= target]
        if len(gap) > PEEL_GAP or any(i.mnemonic.split(".")[0] in _NOT_IN_GAP for i in gap):
            continue
        ends = [i.address for i in exits[target]] + [target]
        copies = [[i for i in before if ends[k] < i.address <= ends[k + 1]
                   and not (k == len(ends) - 2 and i.address == target)]
                  for k in range(len(ends) - 1)]
        each = [_global_loads(c) for c in copies]
        looped = any(not outside(i) for c in copies for i in c)
        if copies and all(c for c in copies) and each[0] > 0 and len(set(each)) == 1 \
                and loads == (len(copies) + 1) * each[0] and not looped:
            return tuple((c[0].address, c[-1].address) for c in copies)
    return ()


def guarded(body: tuple[Instruction, ...], loop: Region,
            nested: Iterable[Region] = ()) -> tuple[int, int] | None:
    """(first, last) address of the code a warp skips with ``loop`` when its guard branch is
    taken, None where no guard is found: of the forward branches of ``body`` before the loop,
    outside the ``nested`` loops that do not hold it, that jump to just past the loop's end (at
    most ``PEEL_GAP`` instructions on), the first of those with the nearest target (the loop's
    own entry guard, for fewer iterations than its unroll, jumps there too). A row copy
    ``range(tid, Br, T)`` is compiled so: a warp with no row branches over its set-up, peeled
    copies and loop (the FFMA and half backwards' L_i, D_i copies; sm_90, ptxas 13.0), while
    what the call does besides (the half backward's cp.async of the next Qi, dOi) runs before
    the guard in every warp."""
    outside = _beside(loop, nested)
    after = set([i.address for i in body if i.address > loop.end][:PEEL_GAP])
    skips = [i for i in body if i.address < loop.start and i.target in after and outside(i)]
    if not skips:
        return None
    end = min(i.target for i in skips)                       # the nearest end past the loop,
    first = min(i.address for i in skips if i.target == end)  # its outermost jump
    within = [i.address for i in body if first < i.address < end]
    return within[0], within[-1]


#: Pipe classes of the code ptxas may sink into a branch from elsewhere (address arithmetic):
#: no memory access, mma or barrier (``skipped_by_branches``).
SUNK = frozenset({"alu", "fma", "uniform", "nop", "branch"})


def skipped_by_branches(body: tuple[Instruction, ...], within: Callable[[int], bool | None],
                        nested: Iterable[Region] = ()) -> frozenset[int]:
    """Addresses of the code of ``body`` (a loop's instructions) that forward branches jump
    over where ``within`` (address -> True, False or None: e.g. by source line) is True for
    some instruction they skip and, for every other one, False -- or, where the branch itself
    is on a True line (the ``if``'s own branch), of a ``SUNK`` class (code ptxas moved in from
    another line: it runs only where the branch's code runs). Branches outside the ``nested``
    loops, to a target inside ``body``. An ``if`` ptxas compiles as a branch (the half
    kernels' mask on edge tiles only: ``tiles.needs_mask``) is such a stretch; one it
    predicates instead runs on every trip and is not."""
    if not body:
        return frozenset()
    outside = [(r.start, r.end) for r in nested]
    out: set[int] = set()
    for i in body:
        if i.target is None or not i.address < i.target <= body[-1].address:
            continue
        if any(a <= i.address <= b for a, b in outside):
            continue
        jumped = [x for x in body if i.address < x.address < i.target]
        marks = [within(x.address) for x in jumped]
        own = within(i.address) is True
        if any(marks) and all(m is not None or (own and pipe_class(x.key) in SUNK)
                              for x, m in zip(jumped, marks)):
            out.update(x.address for x in jumped)
    return frozenset(out)


# ---- the CSV -------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelSass:
    """One row of ``kernel_sass.csv``: the static instruction counts of one region of a
    compiled kernel (sm_90 SASS; per warp; see the module docstring for the classes).

    kernel, function, variant, tiling, d, causal: as in ``simulator.occupancy.KernelResources``
    (the same configurations). region: ``kernel``, ``main_loop``, ``inner_loop_<k>``,
    ``loop_<k>``; start, end: its first and last instruction's address (bytes); depth: 0 for
    the kernel, else the loop's nesting depth. ldl_bytes, stl_bytes: local-memory bytes a thread
    reads / writes in one pass over the region; spill_load_bytes, spill_store_bytes: the
    register refills' and spills' part (the rest: local arrays on the stack). opcodes: count
    by ``opcode_key``. lines: the source lines of its instructions (``format_lines``; "" if
    the line-annotated compile differed).
    """

    kernel: str
    function: str
    variant: str
    tiling: Tiling | None
    d: int | None
    causal: bool | None
    region: str
    start: int
    end: int
    depth: int
    hmma: int
    fma: int
    alu: int
    xu: int
    fp64: int
    lds32: int
    lds64: int
    lds128: int
    ldsm: int
    sts32: int
    sts64: int
    sts128: int
    ldg32: int
    ldg64: int
    ldg128: int
    stg32: int
    stg64: int
    stg128: int
    ldl: int
    stl: int
    shfl: int
    atom: int
    ldgsts: int
    ldc: int
    bar: int
    branch: int
    uniform: int
    nop: int
    other: int
    fp32: int
    ldl_bytes: int
    stl_bytes: int
    spill_load_bytes: int
    spill_store_bytes: int
    total: int
    opcodes: Mapping[str, int]
    lines: str
    ptxas: str
    date: str
    kernel_source: str

    @property
    def counts(self) -> dict[str, int]:
        """COUNTS by name."""
        return {name: getattr(self, name) for name in COUNTS}

    @property
    def reductions(self) -> int:
        """Global reductions and atomics (``GLOBAL_REDUCTIONS``): the ``atom`` class less the
        shared ATOMS and the warp's REDUX."""
        return sum(n for key, n in self.opcodes.items() if key.split(".")[0] in GLOBAL_REDUCTIONS)

    @property
    def lsu(self) -> int:
        """Instructions of the LSU classes."""
        return sum(getattr(self, name) for name in LSU)

    @property
    def lds(self) -> int:
        return self.lds32 + self.lds64 + self.lds128 + self.ldsm

    @property
    def sts(self) -> int:
        return self.sts32 + self.sts64 + self.sts128

    @property
    def lds_bytes(self) -> int:
        """Shared-memory bytes a thread reads by LDS in one pass (LDSM not included)."""
        return 4 * self.lds32 + 8 * self.lds64 + 16 * self.lds128

    @property
    def ldg_bytes(self) -> int:
        """Global bytes a thread loads by LDG in one pass (LDGSTS not included)."""
        return 4 * self.ldg32 + 8 * self.ldg64 + 16 * self.ldg128


def format_opcodes(opcodes: Mapping[str, int]) -> str:
    """``{"FFMA": 3, "LDS.128": 2}`` -> ``"FFMA:3 LDS.128:2"`` (the CSV's opcodes column)."""
    return " ".join(f"{key}:{n}" for key, n in sorted(opcodes.items()))


def parse_opcodes(text: str) -> dict[str, int]:
    """The inverse of ``format_opcodes``."""
    return {key: int(n) for key, n in (item.rsplit(":", 1) for item in text.split())}


@lru_cache(maxsize=None)
def kernel_sass(path: Path = SASS_CSV) -> tuple[KernelSass, ...]:
    """Every row of the SASS CSV (read once per path)."""
    from .occupancy import key_fields

    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return tuple(KernelSass(
        **key_fields(r),
        region=r["region"], start=int(r["start"], 16), end=int(r["end"], 16),
        depth=int(r["depth"]), opcodes=parse_opcodes(r["opcodes"]), lines=r["lines"],
        ptxas=r["ptxas"],
        date=r["date"], kernel_source=r["kernel_source"],
        **{name: int(r[name]) for name in COUNTS},
    ) for r in rows)


def sass(kernel: str, tiling: Tiling | None, d: int, causal: bool, variant: str = "",
         region: str = MAIN_LOOP, path: Path = SASS_CSV) -> KernelSass:
    """The recorded instruction counts of ``region`` of ``kernel`` (its ``variant``) compiled
    for ``tiling`` (None for the row kernels), head dim ``d`` and ``causal``, mirroring
    ``simulator.occupancy.resources``. LookupError, listing what was compiled (or the regions
    the kernel has), if there is no such row: counts are read from the SASS, never guessed."""
    from .occupancy import compiled_rows, never_compiled
    from .tiling import table_variant

    variant = table_variant(variant, tiling)
    matches = regions_of(kernel, tiling, d, causal, variant, path)
    for r in matches:
        if r.region == region:
            return r
    if matches:
        raise LookupError(
            f"{kernel}{f' ({variant})' if variant else ''} with tiling={tiling}, d={d}, "
            f"causal={causal} has no region {region!r}; its regions: "
            f"{[r.region for r in matches]}")
    raise never_compiled(compiled_rows(kernel_sass(path), kernel, variant), kernel, variant,
                         tiling, d, causal, path.name,
                         "add it to tools/kernel_resources.py and rerun tools/kernel_sass.py (it "
                         "needs a CUDA toolkit's ptxas and nvdisasm)")


def regions_of(kernel: str, tiling: Tiling | None, d: int, causal: bool, variant: str = "",
               path: Path = SASS_CSV) -> list[KernelSass]:
    """Every recorded region of ``kernel`` compiled for this configuration (none: [])."""
    from .occupancy import compiled_rows, matching
    from .tiling import table_variant

    return matching(compiled_rows(kernel_sass(path), kernel, table_variant(variant, tiling)),
                    tiling, d, causal)

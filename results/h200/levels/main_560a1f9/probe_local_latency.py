# Probe (2026-12-07, not a model change): the tensor-core forward's time with each spill refill at
# L1 latency + q (L2 - L1), q the MEASURED L1 miss fraction of its local loads (ncu), against the
# model as it is (all-hit or all-miss by simulator.local). Run from the repository root:
#   python results/h200/levels/main_560a1f9/probe_local_latency.py  (output: probe_local_latency.log)
import csv, sys, functools
import simulator.issue as iss
from experiments.common.cases import Case
from experiments.common import model
from experiments.levels import SPLITS, DEVELOPMENT
Q = {"q": None}
real = iss.loop_cycles
def patched(stream, warps, rates, *a, **k):
    if Q["q"] is not None and "local_latency" in k:
        l2, l1 = iss.memory_latencies(rates)
        k["local_latency"] = l1 + Q["q"] * (l2 - l1)
    return real(stream, warps, rates, *a, **k)
iss.loop_cycles = patched
kr = [r for r in csv.DictReader(open('results/h200/levels/levels_kernels.csv')) if r['algorithm']=='flash_forward_tc' and r['name'].startswith('flash_forward_fa2_tc')]
byl = {c.label: c for cs in list(SPLITS.values()) + [DEVELOPMENT] for c in cs}
for x in kr:
    case = byl.get(x['case'])
    if case is None: print('no case', x['case']); continue
    ld = float(x['local_ld_sectors']); q = 1 - float(x['local_ld_hit_sectors'])/ld if ld else 0
    m = float(x['gpu_time_ns'])*1e-9
    out = []
    for qq in (None, q):
        Q["q"] = qq
        iss_cache = [f for f in vars(iss).values() if hasattr(f, 'cache_clear')]
        for f in iss_cache: f.cache_clear()
        import simulator.runtime as rt
        for f in vars(rt).values():
            if hasattr(f, 'cache_clear'): f.cache_clear()
        rep = [r for r in model.reports(case, gpu='H200_MEASURED') if r.algorithm == 'flash_forward_tc'][0]
        out.append(rep.levels.time_s)
    print(f"{x['case'][12:45]:33s} miss={q:.3f} base {100*(out[0]-m)/m:+6.1f}%  probe {100*(out[1]-m)/m:+6.1f}%", flush=True)

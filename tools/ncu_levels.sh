#!/usr/bin/env bash
# Every memory level and pipe of one kernel launch, as ncu counts them (groundwork for the cost
# model's per-level checks): the metric names this ncu knows (--query-metrics), then one
# profiled launch of tools/profile_forward.py per ARGS set with those of CANDIDATES it has.
#   bash tools/ncu_levels.sh OUT "--algorithm fa2 --d 64" "--algorithm fa1 --n 1024" ...
set -u
out=${1:?usage: ncu_levels.sh OUT ARGS...}; shift
mkdir -p "$out"
ncu --query-metrics --chip gh100 > "$out/ncu_query_metrics.txt" 2>&1
CANDIDATES="dram__bytes_read.sum dram__bytes_write.sum lts__t_sectors_srcunit_tex_op_read.sum
lts__t_sectors_srcunit_tex_op_write.sum l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum
l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum
l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum sm__warps_active.avg.pct_of_peak_sustained_active
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active sm__inst_executed.sum sm__cycles_elapsed.avg
gpu__time_duration.sum launch__registers_per_thread launch__occupancy_limit_registers
launch__occupancy_limit_shared_mem launch__waves_per_multiprocessor"
known=""
for m in $CANDIDATES; do
  base=${m%%.*}
  if grep -q "^$base " "$out/ncu_query_metrics.txt" || [[ $base == launch__* ]]; then known="$known,$m"
  else echo "not in this ncu: $m" >> "$out/ncu_levels.log"; fi
done
i=0
for args in "$@"; do
  echo "### $args" >> "$out/ncu_levels.log"
  ncu --clock-control none -k regex:flash_forward --launch-skip 1 --launch-count 1 --csv \
      --metrics "${known#,}" python3 tools/profile_forward.py $args > "$out/levels_$i.csv" 2>> "$out/ncu_levels.log"
  echo "### exit $? ($args)" >> "$out/ncu_levels.log"; i=$((i + 1))
done

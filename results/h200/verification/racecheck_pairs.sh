#!/bin/bash
# Issue 16 (open after 2026-12-04): does racecheck's report on the warp-pair backward
# (sanitizer_v14_2026-12-04.log: hazards at sites a block-wide BAR.SYNC 0 separates) follow the
# pairs, and v14, or neither? The d = 80 shape of tools/sanitize_kernels.py with and without
# pairs, on this tree and on backward v13's (commit fb0d99b, pairs since v12): each built once
# without the sanitizer (disk cache), then racecheck. Usage, from the repository root:
#   source .whl/prefix.sh; bash results/h200/verification/racecheck_pairs.sh OUT
out=${1:?out}
mkdir -p "$out"
root=$PWD
rm -rf /tmp/v13tree && mkdir -p /tmp/v13tree && git archive fb0d99b | tar x -C /tmp/v13tree
for tree in "$root" /tmp/v13tree; do
  name=$([ "$tree" = "$root" ] && echo head || echo v13)
  for t in 16x64p 16x64; do
    (cd "$tree" && PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}" python3 "$root/tools/sanitize_kernels.py" --only bwd_fa2 --shape 61,97,80,causal --tiling $t > /dev/null 2>&1) &
  done
done
wait
for tree in "$root" /tmp/v13tree; do
  name=$([ "$tree" = "$root" ] && echo head || echo v13)
  for t in 16x64p 16x64; do
    (cd "$tree" && PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}" timeout 120 compute-sanitizer --tool racecheck python3 "$root/tools/sanitize_kernels.py" \
       --only bwd_fa2 --shape 61,97,80,causal --tiling $t > "$out/racecheck_${name}_$t.log" 2>&1)
    echo "$name $t: $(grep -c 'Race reported' "$out/racecheck_${name}_$t.log") race reports; $(grep 'max abs' "$out/racecheck_${name}_$t.log")"
  done
done

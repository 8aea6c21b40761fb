#!/usr/bin/env bash
# The machine cache as `remat train` uses it, in a scratch XDG_CACHE_HOME:
# the first run measures the peak and the layer times and keeps them, the
# second reports against the kept peak (the same GFLOP/s) and predicts from
# the kept times; --measure-peak and --measure-times measure again;
# --peak-gflops neither
# reads nor writes the peak's file; a damaged file (a flipped byte, a cut
# file) is measured again and rewritten, never trusted; without
# XDG_CACHE_HOME and HOME nothing is kept and the run goes on; runs started
# at once leave a whole file. The summary predicts the step from the kept
# layer times.
# usage: cache.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1
export XDG_CACHE_HOME=$tmp/cache
R=(train --config tiny --batch 2 --seq 32 --steps 3 --threads 1 --precision fp32 --quiet)
peak_of() { sed -n 's/^peak    sgemm \([0-9.]*\) GFLOP\/s.*/\1/p' "$1"; }

"$remat" "${R[@]}" >first.out 2>&1
peak_file=$(ls "$XDG_CACHE_HOME"/remat/peak-*-fp32-1t 2>/dev/null)
layers_file=$(ls "$XDG_CACHE_HOME"/remat/layers-*-fp32-1t 2>/dev/null)
grep -q "^peak    measured now in .* and kept in $peak_file" first.out && [[ -s $peak_file ]] &&
  ok "first run: peak measured and kept in $peak_file" || bad "first run keeps the peak"
grep -q "^times   this machine's layer times measured now .*and kept" first.out && [[ -s $layers_file ]] &&
  ok "first run: layer times measured and kept" || bad "first run keeps the layer times"
grep -q "^time    step [0-9.]* s measured (the median of 2 steps; their mean [0-9.]* s), [0-9.]* s predicted from this machine.s layer times" first.out &&
  ok "the summary predicts the step" || bad "no prediction in the summary"

"$remat" "${R[@]}" >second.out 2>&1
[[ -n $(peak_of first.out) && $(peak_of first.out) == "$(peak_of second.out)" ]] &&
  grep -q "^peak    kept from .* in $peak_file; --measure-peak measures again" second.out &&
  grep -q "^times   this machine's layer times, kept from" second.out &&
  ok "second run: the kept peak ($(peak_of second.out) GFLOP/s) and layer times" ||
  bad "second run reuses the cache"

"$remat" "${R[@]}" --measure-peak >again.out 2>&1
grep -q "^peak    measured now in .* and kept in" again.out &&
  ok "--measure-peak measures again" || bad "--measure-peak"

"$remat" "${R[@]}" --measure-times >times.out 2>&1
grep -q "^times   this machine's layer times measured now .*and kept" times.out &&
  grep -q "^peak    kept from" times.out &&
  ok "--measure-times measures the layer times again, the peak stays kept" || bad "--measure-times"

before=$(cksum <"$peak_file")
"$remat" "${R[@]}" --peak-gflops 100 >given.out 2>&1
grep -q "^peak    100.0 GFLOP/s given" given.out && [[ $(cksum <"$peak_file") == "$before" ]] &&
  ok "--peak-gflops overrides, the kept file untouched" || bad "--peak-gflops"

# damage: a flipped digit, then a file cut short; each measured again, never used
sed -i '0,/^entry/s/^\(entry .* | .* | \)\([0-9]\)/\1X\2/' "$peak_file"
"$remat" "${R[@]}" >flipped.out 2>&1
grep -q "^peak    measured now .*, as cache file .* is damaged" flipped.out &&
  ok "a changed byte: damaged, measured again" || bad "a changed byte is not caught"
head -c 40 "$peak_file" >"$peak_file.cut" && mv "$peak_file.cut" "$peak_file"
head -c 50 "$layers_file" >"$layers_file.cut" && mv "$layers_file.cut" "$layers_file"
"$remat" "${R[@]}" >cut.out 2>&1
grep -q "^peak    measured now .*, as cache file .* is damaged (cut short)" cut.out &&
  grep -q "^times   .* measured now .*, as cache file .* is damaged" cut.out &&
  ok "a cut file: damaged, measured again" || bad "a cut file is not caught"
"$remat" "${R[@]}" >repaired.out 2>&1
grep -q "^peak    kept from" repaired.out && grep -q "^times   this machine's layer times, kept" repaired.out &&
  ok "the rewritten files are used" || bad "rewritten files"

env -u XDG_CACHE_HOME -u HOME "$remat" "${R[@]}" >nohome.out 2>&1 &&
  grep -q "^peak    measured now .*, not kept: .*HOME" nohome.out &&
  ok "no HOME: measured, not kept, the run goes on" || bad "no HOME"

# runs started at once, into an empty cache: the file left is whole
export XDG_CACHE_HOME=$tmp/race
for k in 1 2 3; do "$remat" "${R[@]}" >race$k.out 2>&1 & done
wait
"$remat" "${R[@]}" >after.out 2>&1
grep -q "^peak    kept from" after.out && ! grep -q damaged race*.out after.out &&
  ok "3 runs at once leave a whole cache" || bad "concurrent runs"

summary

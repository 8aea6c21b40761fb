#!/usr/bin/env bash
# A checkpoint directory is one run's: a resume checkpoints into the
# directory it resumed from (a copy, a moved directory), not the path the
# run first wrote; a new run in a directory that holds another run's
# checkpoints is refused (or, with --replace-checkpoints, removes them
# first), while the same run started again is told it writes them again; a
# run holds the directory's lock from set-up to its end, so a second run
# given it is refused with a clear message; a second Ctrl-C during the
# final save removes the save's temporary and says so.
# usage: ckpt_dir.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

FN=(--config tiny --batch 4 --seq 32 --peak-gflops 10 --threads 1 --precision fp32)
F=("${FN[@]}" --quiet)
steps() { ls "$1" 2>/dev/null | tr '\n' ' '; }

# --- a resume checkpoints where it resumes
"$remat" train "${F[@]}" --steps 8 --checkpoint-dir ck --checkpoint-every 4 --save ref8.bin >/dev/null
"$remat" train "${F[@]}" --steps 12 --save ref12.bin >/dev/null
cp -r ck copy
mkdir -p away
(cd away && "$remat" train --resume ../copy --steps 12 --quiet --threads 1 --peak-gflops 10 \
  --save ../copy12.bin >../copy.out 2>&1)
[[ $(steps copy) == "step_00000004 step_00000008 step_00000012 " && $(steps ck) == "step_00000004 step_00000008 " ]] &&
  cmp -s ref12.bin copy12.bin && ok "a copy resumed from another directory checkpoints into the copy, ck untouched" ||
  bad "resume of a copy: copy has $(steps copy), ck has $(steps ck); $(tail -1 copy.out)"
grep -q "^checkpoint-dir $tmp/copy\$" copy/step_00000012/settings &&
  ok "its settings name the copy as the checkpoint directory" ||
  bad "settings of the copy: $(grep '^checkpoint-dir' copy/step_00000012/settings)"
mv ck moved
"$remat" train --resume moved/step_00000004 --steps 12 --quiet --threads 1 --peak-gflops 10 >moved.out 2>&1
[[ ! -e ck && $(steps moved) == "step_00000004 step_00000008 step_00000012 " ]] &&
  ok "a moved directory resumed: checkpoints into it, the old path not made again" ||
  bad "resume of a moved directory: ck $( [[ -e ck ]] && echo exists), moved has $(steps moved)"
expect_error "a resume into another directory than the one resumed is refused" \
  "\-\-checkpoint-dir elsewhere differs from the saved run's .*moved" \
  train --resume moved --steps 16 --checkpoint-dir elsewhere --quiet

# --- another run's checkpoints: refused, or replaced on request
expect_error "a new run in a directory of another run's checkpoints is refused" \
  "moved holds another run's checkpoints (to step 12, saved with \-\-seed 1337, not 7): resume it (\-\-resume moved), choose another \-\-checkpoint-dir, or give \-\-replace-checkpoints" \
  train "${F[@]}" --seed 7 --steps 4 --checkpoint-dir moved --checkpoint-every 4
[[ $(steps moved) == "step_00000004 step_00000008 step_00000012 " ]] &&
  ok "the refused run left the other run's checkpoints as they were" || bad "moved: $(steps moved)"
"$remat" train "${F[@]}" --seed 7 --steps 4 --checkpoint-dir moved --checkpoint-every 4 \
  --replace-checkpoints --save s7.bin >/dev/null 2>rep.err
"$remat" train "${F[@]}" --seed 7 --steps 4 --save s7ref.bin >/dev/null
[[ $(steps moved) == "step_00000004 " ]] && grep -q "^seed 7\$" moved/step_00000004/settings &&
  cmp -s s7.bin s7ref.bin && ok "--replace-checkpoints: the other run's step directories removed, this run's written" ||
  bad "--replace-checkpoints: moved has $(steps moved); $(cat rep.err)"
"$remat" train "${FN[@]}" --seed 7 --steps 4 --checkpoint-dir moved --checkpoint-every 2 \
  --replace-checkpoints >rep.out 2>&1
grep -q "^note    removed 1 step directory from moved (--replace-checkpoints)" rep.out &&
  ok "--replace-checkpoints says what it removed" || bad "note: $(grep note rep.out)"
"$remat" train --resume moved --steps 8 --quiet --threads 1 --peak-gflops 10 >/dev/null 2>&1
grep -q "^seed 7\$" moved/step_00000008/settings && ok "a later resume continues the new run" ||
  bad "resume after --replace-checkpoints"
expect_error "--replace-checkpoints with --resume" "a resume goes on in its own: drop it" \
  train --resume moved --steps 10 --replace-checkpoints --quiet
# the same run started again: accepted, told its checkpoints are written again
"$remat" train "${FN[@]}" --steps 8 --checkpoint-dir copy --checkpoint-every 4 >same.out 2>&1
rc=$?
[[ $rc -eq 0 ]] && grep -q "^note    copy holds this run's checkpoints to step 12; they are written again (--resume copy goes on from the newest)" same.out &&
  ok "the same run started again in its directory: accepted, with a note" ||
  bad "the same run again (rc $rc): $(grep -v '^step' same.out | tail -3)"

# --- one run at a time in a directory: the lock is held for the whole run
"$remat" train "${F[@]}" --steps 100000 --checkpoint-dir busy --checkpoint-every 1 >/dev/null 2>&1 &
first=$!
for _ in $(seq 200); do [[ -f busy/step_00000001/DONE ]] && break; sleep 0.1; done
expect_error "a second run in a directory in use is refused" \
  "the checkpoint directory 'busy' is in use by another run, process $first (it holds .remat-lock's lock)" \
  train "${F[@]}" --steps 4 --checkpoint-dir busy --checkpoint-every 1
expect_error "a resume of a directory in use is refused" "in use by another run" \
  train --resume busy --steps 200000 --quiet --threads 1
kill -9 "$first" 2>/dev/null
wait "$first" 2>/dev/null
"$remat" train --resume busy --steps 1000000 --plan-only >/dev/null 2>&1 &&
  ok "the lock goes with the process that held it: a killed run's directory resumes" ||
  bad "the directory of a killed run stays locked"
[[ -d busy ]] && ! ls -A busy | grep -qv '^step_\|^\.remat-lock$' &&
  ok "the directory holds its step directories and .remat-lock, nothing else" || bad "busy holds: $(ls -A busy 2>&1 | tr "\n" " ")"

# --- a second Ctrl-C during the final save removes its temporary
# The save's rename waits for the lock of its directory (remat's saves take
# it to rename): holding it here stops the save with its temporary written.
mkdir saves
flock saves sleep 60 &
holder=$!
sleep 0.3
"$remat" train "${F[@]}" --steps 2 --save saves/m.bin >sig.out 2>sig.err &
run=$!
for _ in $(seq 300); do compgen -G "saves/m.bin.tmp.*" >/dev/null && break; sleep 0.1; done
tmpfile=$(compgen -G "saves/m.bin.tmp.*")
sleep 0.2
kill -INT "$run"
sleep 0.5
kill -INT "$run"
wait "$run"
rc=$?
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
if [[ -n $tmpfile && $rc -eq 130 && -z $(compgen -G "saves/m.bin.tmp.*") && ! -e saves/m.bin ]] &&
  grep -q "stopped by a second signal" sig.err &&
  grep -q "a save was in progress and is not complete: removed its temporary .*${tmpfile#saves/}" sig.err; then
  ok "a second Ctrl-C during the final save: its temporary removed and named, exit 130"
else bad "second Ctrl-C during the save (rc $rc, temporary '$tmpfile'): $(ls saves) / $(cat sig.err)"; fi

summary

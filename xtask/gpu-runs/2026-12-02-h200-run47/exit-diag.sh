#!/bin/bash
# Run 47: where the exit SIGSEGV of the daemon-thread script happens
# (variants, core dumps, cuda-gdb), plus the torch start-call timing.
set -u
ROOT=$PWD
B=$ROOT/target/hostcopy-gpu-bundle
RES=/tmp/res; mkdir -p $RES /tmp/cores
save() { tar -czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
PY=/tmp/pyhc
python3 -m pip install -q --no-index --no-deps --target $PY $B/python/wheels/hostcopy-*.whl > $RES/pip.log 2>&1
export PYTHONPATH=$PY
python3 - "$B/python/tests/test_gpu.py" <<'PYEOF'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
for node in tree.body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_EXIT_SCRIPT":
        script = ast.literal_eval(node.value)
open("/tmp/v_asis.py", "w").write(script)
loop = script.index("hostcopy.copy_to_host(host, buffer)\nfor blocking")
open("/tmp/v_nothreads.py", "w").write(script[:loop] + "hostcopy.copy_to_host(host, buffer)\n")
open("/tmp/v_blocking.py", "w").write(script.replace("(True, False, True)", "(True, True, True)"))
open("/tmp/v_nonblocking.py", "w").write(script.replace("(True, False, True)", "(False, False, False)"))
open("/tmp/v_osexit.py", "w").write(script + "import os\nos._exit(0)\n")
open("/tmp/v_closefirst.py", "w").write(script + "buffer.close()\nstream.sync()\n")
open("/tmp/v_nocore.py", "w").write(script.replace("hostcopy.copy_to_host(host, buffer)\nfor", "hostcopy.copy_to_host(host, buffer)\nimport gc\nfor"))
PYEOF
cat /proc/sys/kernel/core_pattern > $RES/core_pattern.txt 2>&1
ulimit -c unlimited
for v in asis nothreads blocking nonblocking osexit closefirst; do
  n=0
  for i in 1 2 3 4 5 6 7 8; do
    (cd /tmp/cores && timeout 30 python3 /tmp/v_$v.py > /dev/null 2>/tmp/err_$v.$i); rc=$?
    [ $rc -ne 0 ] && n=$((n+1))
    echo "$v run $i rc=$rc" >> $RES/variants.log
  done
  echo "$v: $n of 8 failed" | tee -a $RES/summary.txt
  save
done
ls -la /tmp/cores > $RES/cores.txt 2>&1
core=$(ls /tmp/cores/core* 2>/dev/null | head -1)
if [ -n "$core" ]; then
  timeout 120 cuda-gdb -q -batch -ex "info threads" -ex "thread apply all bt 30" python3 "$core" > $RES/core_bt.log 2>&1
else
  for i in 1 2 3 4 5 6 7 8 9 10; do
    timeout 40 cuda-gdb -q -batch -ex run -ex "info threads" -ex "thread apply all bt 30" --args python3 /tmp/v_asis.py > $RES/gdb_$i.log 2>&1
    if grep -q "SIGSEGV" $RES/gdb_$i.log; then cp $RES/gdb_$i.log $RES/gdb_crash.log; break; fi
  done
fi
save
cat $RES/summary.txt
ls $RES
for f in $RES/core_bt.log $RES/gdb_crash.log; do [ -f $f ] && { grep -n "SIGSEGV\|^Thread\|^#" $f | head -150; }; done
save

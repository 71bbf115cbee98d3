#!/bin/bash
# Run 76, on starts queued in the call (no start thread): the lock probe
# with the copier's own waits, each GPU async test alone, then a short
# async_lag; a run still alive after its watchdog gets every thread's
# backtrace (cuda-gdb) and Python's stacks (faulthandler), then is killed.
# Copied into the bundle folder and run from there.
set -u
bundle="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$bundle/out}"; mkdir -p "$out"
target="$(mktemp -d)"
python3 -m pip install --quiet --no-index --no-deps --target "$target" "$bundle"/python/wheels/hostcopy-*.whl || exit 2
export PYTHONPATH="$target" HOSTCOPY_REQUIRE_GPU=1 PYTHONFAULTHANDLER=1
timeout 60 python3 "$bundle/lock_probe.py" > "$out/lock_probe.log" 2>&1; echo "lock_probe rc=$?"; cat "$out/lock_probe.log"
cd "$target"
watch() { # NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s)
    "$@" > "$out/$name.log" 2>&1 &
    local pid=$!
    while kill -0 $pid 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do sleep 0.5; done
    if kill -0 $pid 2>/dev/null; then
        # the python process itself (pytest runs in-process)
        timeout 40 cuda-gdb -q -p $pid -batch -ex "info threads" -ex "thread apply all bt 25" > "$out/$name.gdb" 2>&1
        kill -USR1 $pid 2>/dev/null; sleep 1
        kill -9 $pid 2>/dev/null
        echo "$name: HUNG after ${limit}s (backtraces in $name.gdb)"
        grep -E "^Thread|^#[0-9]+ .* in (cu[A-Z]|pthread|futex|__futex|syscall|std::|hostcopy)" "$out/$name.gdb" | head -80
    else
        wait $pid; echo "$name: rc=$? in $(( $(date +%s) - t0 ))s"; tail -3 "$out/$name.log"
    fi
}
cat > "$target/fh.py" <<'PY'
import faulthandler, signal
faulthandler.register(signal.SIGUSR1, all_threads=True)
PY
export PYTHONSTARTUP=
for t in \
  "test_a_download_started_on_the_loop_reads_what_was_queued_before_the_call_not_after[torch stream]" \
  "test_a_download_started_on_the_loop_reads_what_was_queued_before_the_call_not_after[legacy default stream]" \
  "test_an_upload_started_on_the_loop_is_seen_by_work_queued_after_the_call[torch stream]" \
  "test_an_upload_started_on_the_loop_is_seen_by_work_queued_after_the_call[legacy default stream]" \
  "test_a_blocking_copy_on_another_thread_after_uploads_started_on_the_loop_sees_them[torch stream]" \
  "test_a_blocking_copy_on_another_thread_after_uploads_started_on_the_loop_sees_them[legacy default stream]"; do
    n=$(echo "$t" | tr -c 'a-z0-9\n' '_' | cut -c1-60)
    watch "$n" 40 python3 -X faulthandler -c "import sys; sys.path.insert(0, '$target'); import fh, pytest; sys.exit(pytest.main(['-q', '-s', '-p', 'no:cacheprovider', '$bundle/python/tests/test_gpu_async.py::$t']))"
done
watch async_lag 60 python3 -X faulthandler -c "import sys; sys.path.insert(0, '$target'); import fh, runpy; sys.argv=['async_lag.py','--seconds','1','--runs','1']; runpy.run_path('$bundle/python/bench/async_lag.py', run_name='__main__')"
tar czf "$out/diag.tgz" -C "$out" --exclude diag.tgz . 2>/dev/null

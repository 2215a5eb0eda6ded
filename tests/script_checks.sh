# Shell helpers the script tests source (tests/gpu_bundle_test.sh, tests/gpu_validate_cpu_test.sh).
# The caller sets t (its temporary folder, with t/elsewhere a folder that is none of the
# project's) and fails=0 before using them, and exits with a failure when fails > 0.
#
#   check DESCRIPTION COMMAND...   the command must succeed; prints "ok" or "FAIL" and counts
#                                  failures in $fails
#   run EXPECTED_CODE COMMAND...   runs the command from $t/elsewhere with a bare environment
#                                  (PATH=/usr/bin:/bin, HOME=$t), output in $t/last.txt; fails,
#                                  showing the output's last 30 lines, when its exit code is not
#                                  EXPECTED_CODE
check() {
  local what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
run() {
  local want=$1
  shift
  (cd "$t/elsewhere" && env -i PATH=/usr/bin:/bin HOME="$t" "$@") >"$t/last.txt" 2>&1
  local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "exit $rc, expected $want: $*"
    tail -n 30 "$t/last.txt"
    return 1
  fi
}

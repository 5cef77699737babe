# Prints what each failed test printed itself, from go test -v output: the lines after
# "=== RUN|CONT|NAME|PAUSE <test>" up to the next marker, at most 80 lines a test. The
# tests are the ones "--- FAIL" names (read in a first pass over the same file). Log lines
# at DEBUG or INFO are left out: a daemon's chatter must not push a test's own message
# out of the printed tail.
# Usage: awk -f test-output.awk LOG LOG
FNR == NR {
  if (match($0, /--- FAIL: [^ ]+/)) failed[substr($0, RSTART + 10, RLENGTH - 10)] = 1
  next
}
/^=== (RUN|CONT|NAME|PAUSE) / {
  cur = $3
  show = (cur in failed)
  if (show && !(cur in head)) { head[cur] = 1; print "-- " cur }
  next
}
/^(--- |PASS$|FAIL$|ok  |FAIL\t|-test\.)/ { show = 0; next }
/^[ \t>]*time=[^ ]+ level=(DEBUG|INFO) / { next }
show && n[cur]++ < 80 { print substr($0, 1, 400) }

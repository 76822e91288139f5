#!/bin/sh
# Harness self-test: plant a leak and leave the scan to the suite's end.
# The suite must come out red.
. /scenarios/lib.sh
load harness_selftest_leak
unload harness_selftest_leak
pass

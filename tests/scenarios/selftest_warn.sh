#!/bin/sh
# Harness self-test: plant a WARN. The suite must come out red.
. /scenarios/lib.sh
load harness_selftest_warn
unload harness_selftest_warn
pass

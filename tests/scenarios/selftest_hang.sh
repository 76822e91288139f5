#!/bin/sh
# Harness self-test: never finish. The host's timeout must turn it red.
. /scenarios/lib.sh
log "sleeping forever"
while :; do sleep 1000; done

#!/bin/sh
# The container's entry point: one broker from $SERVER_PROPERTIES (the image's /etc/strata/server.properties unless
# set) with every STRATA_* environment variable on top (STRATA_NODE_ID -> node.id, as Kafka's image maps KAFKA_*).
# Extra arguments go to `strata broker` (`--override key=value`, `--print-config` to see the result and exit).
set -e
exec strata broker --config "${SERVER_PROPERTIES:-/etc/strata/server.properties}" --env-prefix STRATA_ "$@"

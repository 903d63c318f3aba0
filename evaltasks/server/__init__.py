"""The command line's Prefect servers: a temporary server for one command (:mod:`evaltasks.server.temporary`) and
the long-lived ``evaltasks server`` that keeps one warm with the library imported (:mod:`evaltasks.server.daemon`,
its client :mod:`evaltasks.server.client`). docs/server.md#faster-repeated-runs-evaltasks-server; used by :mod:`evaltasks.cli` only."""

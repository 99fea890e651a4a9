"""The measurement: targets, load, transports and responses, request records, per-level summaries,
and the runner (deploy → sweep → report → gate → teardown).

Sub-packages, each importing only those below it: `sweep` and `targets` → `load` → `client`."""

"""Load on an endpoint: one level, closed or open loop, run in this process or split across workers
(processes or Ray actors)."""

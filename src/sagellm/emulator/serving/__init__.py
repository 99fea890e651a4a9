"""The simulated serving core, no HTTP: batching, model copies paced on wall time, the same engine on a virtual
clock (simulate), and target tracking. Nothing here imports the HTTP face (`frontend`)."""

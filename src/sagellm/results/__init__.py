"""What is made from a run: the results.json schema, the sweep's picks (knee, max, cost), report, plot,
JUnit and gate."""

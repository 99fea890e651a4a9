"""What is made from a run: the results.json schema, the sweep's picks (knee, max, cost), report, plot,
JUnit, gate and the planner's calibration."""

"""Which levels a bench measures and in what order: the list, doubling and adaptive choosers, the sweep loop, the ramp."""

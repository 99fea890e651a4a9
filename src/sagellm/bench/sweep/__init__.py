"""Which levels a bench measures and in what order: the sweep loop, the list, doubling and adaptive
choosers, the ramp."""

"""The process: options, the kopf entry point and its handlers, health, the heartbeat command
of step pods, heap trimming. The only layer that imports every other (but kubectl)."""

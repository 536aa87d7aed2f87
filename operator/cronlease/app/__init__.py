"""The process: the composition root (wiring), the entry point under kopf (main), options,
health, the heartbeat command of step pods, heap trimming. The only layer that builds the others."""

"""cronlease: a Kubernetes operator that creates Jobs on schedule, exactly once per slot.

The package is layered (docs/architecture.md); no layer imports one above it (`make lint`):

- `cronlease.app`: the process: options, wiring, health, the heartbeat command.
- `cronlease.shell`: I/O: the API client, watches and the model, the keyed loop, the fenced
  writer, the controllers (scheduler, supervisor), Events and metrics.
- `cronlease.core`: pure rules, "now" passed in: names, schedules, the spec, decisions, bodies.
- `cronlease.kubectl`: the kubectl plugin; it imports only the core.
"""

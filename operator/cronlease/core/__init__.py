"""The core: pure rules, with "now" and every reading passed in. No asyncio, aiohttp, kopf,
prometheus_client, clock or logging (`make lint` enforces it, pyproject's import-linter
contracts). Inside, each package imports only those listed after it:

- `bodies`: the bodies of Jobs and Runs the shell creates (templates, env, step Jobs).
- `decide`: what a ScheduledJob, a RunRequest or a Run needs now (reconcile.decide).
- `specs`: a ScheduledJob's spec and its steps, parsed and checked once.
- `schedule`, `names`: cron and schedules; the names, labels and conditions on objects.
"""

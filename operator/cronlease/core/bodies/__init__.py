"""The bodies the shell creates: a slot's Job, a Run and its step Jobs, their environment,
prepared before the slot's instant."""

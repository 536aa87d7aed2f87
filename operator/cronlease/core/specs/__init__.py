"""A ScheduledJob's spec and its steps, parsed and checked once; a bad one is a SpecError that
names the field."""

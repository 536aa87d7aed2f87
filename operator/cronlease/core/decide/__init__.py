"""What to do now, as data: slots and catch-up, overlap, pausing, retries and dead letters,
history, RunRequests, and a multi-step Run's next action (supervision)."""

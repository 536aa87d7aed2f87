"""When slots fall: cron (CronJob's grammar and more), several schedules, jitter."""

"""The shell: every read and write of the API server, around the core's decisions.

One implementation of each mechanism: the client (kube), the list-and-watch (listwatch) feeding
the model, the keyed loop with its wake-ups and work pool, the fenced writer, the Lease elector;
two controllers on them (scheduler for ScheduledJobs and RunRequests, supervisor for Runs);
Events and metrics. It imports the core, never the app.
"""

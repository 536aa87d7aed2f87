"""cronlease: a Kubernetes operator that creates Jobs on schedule, exactly once per slot."""

GROUP = "cronlease.io"
VERSION = "v1alpha1"
PLURAL = "scheduledjobs"
KIND = "ScheduledJob"
REQUEST_PLURAL = "runrequests"
REQUEST_KIND = "RunRequest"

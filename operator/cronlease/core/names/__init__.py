"""The vocabulary shared by every layer: object names, labels and annotations, conditions,
what a Job's fields say, the API server's `Date`, the installed version."""

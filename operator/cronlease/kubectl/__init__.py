"""kubectl-cronlease: the kubectl plugin (issue 18).

Pure modules, each one concern, all with "now" passed in: `ledger` (the slot ledger of `audit`),
`evidence` (what the API objects say of the slots), `firing` (the next fire times of `next`),
`translate` (CronJob to ScheduledJob, and what differs), `views` (history, dead letters, leader,
as rows), `output` (tables, colour, JSON and YAML), `window` (times and names as typed).
The shell: `client` (the official `kubernetes` client, the only module that imports it),
`context` (flags, output, waiting), the commands (`commands`, `runrequests`, `audit`, `adopt`),
`cli` (arguments, errors, exit codes: `errors`), `impersonation` (--as) and `completion`
(kubectl_complete-cronlease). The plugin runs from its own environment: its own distribution,
kubectl-cronlease (hack/plugin_dist.py: these modules and the pure core they import, nothing of
the operator's runtime), or `make plugin` in a checkout; the operator's environment must never
hold that client, which kopf imports whenever it is installed.
"""

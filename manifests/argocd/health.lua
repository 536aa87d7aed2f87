-- Argo CD health of cronlease's ScheduledJob, Run and RunRequest (cronlease.io/v1alpha1), read
-- from what the operator writes for kstatus: status.observedGeneration and the conditions Ready,
-- Reconciling and Stalled (present only while True). One script for the three kinds: see
-- argocd-cm.yaml beside it. Argo CD runs it with `obj`, the live object, and wants `hs` back.
local hs = {}

local function condition(conditions, kind)
  for _, item in ipairs(conditions) do
    if item.type == kind then
      return item
    end
  end
  return nil
end

local status = obj.status or {}
local generation = (obj.metadata or {}).generation
-- The operator has not seen this generation yet (a new object reads observedGeneration 0).
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the cronlease operator to observe generation " .. tostring(generation)
  return hs
end

local conditions = status.conditions or {}

-- Stalled and Reconciling (abnormal-true: present only while True): when `kind` is True, the
-- health `health` with its reason and message; else nil.
local function abnormal(kind, health)
  local found = condition(conditions, kind)
  if found ~= nil and found.status == "True" then
    return { status = health, message = (found.reason or kind) .. ": " .. (found.message or "") }
  end
  return nil
end

local flagged = abnormal("Stalled", "Degraded") or abnormal("Reconciling", "Progressing")
if flagged ~= nil then
  return flagged
end
local ready = condition(conditions, "Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the cronlease operator"
  return hs
end
if ready.status == "True" then
  -- A suspended ScheduledJob is as Argo CD shows a suspended CronJob.
  if ready.reason == "Suspended" then
    hs.status = "Suspended"
  else
    hs.status = "Healthy"
  end
  hs.message = ready.message or ""
  return hs
end
hs.status = "Progressing"
hs.message = (ready.reason or "NotReady") .. ": " .. (ready.message or "")
return hs

-- Argo CD health of a jsoperator.io Stream or Consumer, from its kstatus-style conditions.
-- Paused -> Suspended; Stalled (an error retrying cannot cure) -> Degraded; a spec generation the
-- operator has not applied yet, or Ready=False while it retries -> Progressing; Ready -> Healthy.
local hs = {}
local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for jsoperator to report status"
  return hs
end
local conditions = {}
for _, condition in ipairs(status.conditions) do
  conditions[condition.type] = condition
end
local paused = conditions["ReconciliationPaused"]
if paused ~= nil and paused.status == "True" then
  hs.status = "Suspended"
  hs.message = paused.message
  return hs
end
local stalled = conditions["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for jsoperator to apply generation " .. tostring(generation)
  return hs
end
local ready = conditions["Ready"]
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
  return hs
end
hs.status = "Progressing"
if ready ~= nil then
  hs.message = ready.reason .. ": " .. ready.message
else
  hs.message = "Waiting for the Ready condition"
end
return hs

-- Argo CD health of a jsoperator.io Stream, Consumer, KeyValue, ObjectStore or (Cluster)JetStreamConnection,
-- from its kstatus-style conditions.
-- Paused -> Suspended; Stalled (an error retrying cannot cure) -> Degraded; a spec generation the
-- operator has not applied yet, or Ready=False while it retries -> Progressing; Ready -> Healthy.
local function health(status, message)
  return {status = status, message = message}
end
local function holds(condition)
  return condition ~= nil and condition.status == "True"
end
local status = obj.status
if status == nil or status.conditions == nil then
  return health("Progressing", "Waiting for jsoperator to report status")
end
local conditions = {}
for _, condition in ipairs(status.conditions) do
  conditions[condition.type] = condition
end
if holds(conditions["ReconciliationPaused"]) then
  return health("Suspended", conditions["ReconciliationPaused"].message)
end
if holds(conditions["Stalled"]) then
  return health("Degraded", conditions["Stalled"].message)
end
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  return health("Progressing", "Waiting for jsoperator to apply generation " .. tostring(generation))
end
local ready = conditions["Ready"]
if holds(ready) then
  return health("Healthy", ready.message)
end
if ready ~= nil then
  return health("Progressing", ready.reason .. ": " .. ready.message)
end
return health("Progressing", "Waiting for the Ready condition")

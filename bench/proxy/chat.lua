-- wrk script: POST chat completions as agents would, each request with the next session's env token (round
-- robin over the tokens in $CORRAL_TOKENS_FILE, one per line). CORRAL_STREAM=1 for streamed completions;
-- CORRAL_DELAY_MS=N waits N ms on each connection before its next request (a fixed request rate: connections / N).
local stream = os.getenv("CORRAL_STREAM") == "1"
local pause = tonumber(os.getenv("CORRAL_DELAY_MS") or "0")
local tokens = {}
for line in io.lines(os.getenv("CORRAL_TOKENS_FILE")) do tokens[#tokens + 1] = line end
local body = '{"model":"fake-model","stream":' .. (stream and "true" or "false") ..
  ',"messages":[{"role":"system","content":"You are a helpful agent."},' ..
  '{"role":"user","content":"Summarise the repository layout in one sentence please."}]}'
local counter = 0
local offset = 0

function setup(thread)
  thread:set("offset", math.random(#tokens))
end

function request()
  counter = counter + 1
  local token = tokens[(counter + offset) % #tokens + 1]
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token}, body)
end

if pause > 0 then
  function delay()
    return pause
  end
end

function done(summary, latency, requests)
  -- One machine-readable line for run.sh.
  io.write(string.format("WRK rps=%.1f mean_ms=%.3f p50_ms=%.3f p90_ms=%.3f p95_ms=%.3f p99_ms=%.3f errors=%d non2xx=%d\n",
    summary.requests / (summary.duration / 1e6), latency.mean / 1000, latency:percentile(50) / 1000,
    latency:percentile(90) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end

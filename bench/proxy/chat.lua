-- wrk script: POST a chat completion as an agent would, with its session's env token.
-- Env: CORRAL_TOKEN (Bearer token), CORRAL_STREAM=1 for streamed completions.
local token = os.getenv("CORRAL_TOKEN") or "none"
local stream = os.getenv("CORRAL_STREAM") == "1"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. token
wrk.body = '{"model":"fake-model","stream":' .. (stream and "true" or "false") ..
  ',"messages":[{"role":"system","content":"You are a helpful agent."},' ..
  '{"role":"user","content":"Summarise the repository layout in one sentence please."}]}'

function done(summary, latency, requests)
  -- One machine-readable line for run.sh.
  io.write(string.format("WRK rps=%.1f p50_ms=%.3f p99_ms=%.3f errors=%d non2xx=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end

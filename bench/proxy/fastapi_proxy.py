"""The peer users run today: an LLM-interception proxy in the style of ROLL's ProxyServer and rLLM's gateway.

A FastAPI app that relays OpenAI chat completions to one upstream with a pooled httpx.AsyncClient (whole and
streamed, without buffering a stream), and records every call in memory under the caller's bearer token: the
request, the response (or the streamed chunks), timings. One uvicorn worker, because the recording lives in the
process (a second worker would split an episode's calls between two memories), with uvloop and httptools.
For bench/proxy/run.sh only; Debian's python3-fastapi, python3-uvicorn, python3-httpx, python3-uvloop and
python3-httptools.

    python3 bench/proxy/fastapi_proxy.py --listen 127.0.0.1:8100 --upstream http://127.0.0.1:8000
"""
import argparse
import collections
import json
import time

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse


def make_app(upstream: str) -> FastAPI:
    app = FastAPI()
    client = httpx.AsyncClient(base_url=upstream, timeout=httpx.Timeout(300.0),
                               limits=httpx.Limits(max_connections=1000, max_keepalive_connections=1000))
    calls = collections.defaultdict(list)  # bearer token -> recorded calls

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/stats")
    async def stats():
        return {"sessions": len(calls), "calls": sum(len(c) for c in calls.values())}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        token = request.headers.get("authorization", "")
        raw = await request.body()
        body = json.loads(raw)
        record = {"request": body, "received": time.time()}
        calls[token].append(record)
        if not body.get("stream"):
            r = await client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
            record["response"] = r.json()
            record["done"] = time.time()
            return JSONResponse(record["response"], status_code=r.status_code)
        upstream = await client.send(
            client.build_request("POST", "/v1/chat/completions", content=raw,
                                 headers={"content-type": "application/json"}),
            stream=True)
        chunks = record["chunks"] = []

        async def relay():
            try:
                async for piece in upstream.aiter_raw():
                    chunks.append(piece)
                    yield piece
            finally:
                await upstream.aclose()
                record["done"] = time.time()

        return StreamingResponse(relay(), status_code=upstream.status_code, media_type="text/event-stream")

    @app.on_event("shutdown")
    async def close():
        await client.aclose()

    return app


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8100")
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    uvicorn.run(make_app(args.upstream), host=host, port=int(port), workers=1, loop="uvloop", http="httptools",
                log_level="warning", access_log=False)


if __name__ == "__main__":
    main()

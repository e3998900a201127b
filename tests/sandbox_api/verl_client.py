#!/usr/bin/env python3
"""verl's SandboxFusion client, as a test drives it: the request verl's code tools and code rewards send.

The wire is verl's `call_sandbox_api` (verl/utils/reward_score/sandbox_fusion/utils.py): a POST of
json.dumps({"compile_timeout", "run_timeout", "code", "stdin", "memory_limit_MB", "language", "files",
"fetch_files"}) in that key order, with Content-Type and Accept set to application/json, a timeout of
compile_timeout + run_timeout + 10 seconds, and up to three attempts when the answer is HTTP 504 (1 s, then 2 s
apart). Any other non-2xx is a failure. Written with urllib so it needs nothing beyond python3.

Prints one JSON line per call: {"http": status, "attempts": n, "body": parsed answer or text, "seconds": t}.
With --concurrency N, N identical calls run at once (threads), one line each. --raw-body and --code-bytes send
what verl never would (bad input).
"""
import argparse
import concurrent.futures
import json
import sys
import time
import urllib.error
import urllib.request


def call_sandbox_api(url, code, stdin, compile_timeout, run_timeout, memory_limit_mb, language, files, fetch_files,
                     raw_body=None):
    payload = raw_body if raw_body is not None else json.dumps({
        "compile_timeout": compile_timeout,
        "run_timeout": run_timeout,
        "code": code,
        "stdin": stdin,
        "memory_limit_MB": memory_limit_mb,
        "language": language,
        "files": files,
        "fetch_files": fetch_files,
    })
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    started = time.monotonic()
    for attempt in range(1, 4):
        data = payload if isinstance(payload, bytes) else payload.encode()
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=compile_timeout + run_timeout + 10) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        if status == 504 and attempt < 3:
            time.sleep(attempt)
            continue
        break
    try:
        body = json.loads(text)
    except ValueError:
        body = text
    return {"http": status, "attempts": attempt, "body": body, "seconds": time.monotonic() - started}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", help="the sandbox_fusion_url, e.g. http://127.0.0.1:8090/run_code")
    p.add_argument("--code", default="")
    p.add_argument("--code-bytes", type=int, default=0, help="instead of --code: a comment this many bytes long")
    p.add_argument("--raw-body", default=None, help="a file whose bytes are posted as they are (bad input)")
    p.add_argument("--language", default="python")
    p.add_argument("--stdin", default=None)
    p.add_argument("--timeout", type=float, default=10, help="compile_timeout and run_timeout, as verl sets both")
    p.add_argument("--memory-limit-mb", type=int, default=1024)
    p.add_argument("--files", default="{}", help="JSON object: path -> base64 content")
    p.add_argument("--fetch-files", default="[]", help="JSON list of paths")
    p.add_argument("--concurrency", type=int, default=1)
    a = p.parse_args()
    timeout = int(a.timeout) if a.timeout == int(a.timeout) else a.timeout
    code = "#" * a.code_bytes if a.code_bytes else a.code
    raw_body = open(a.raw_body, "rb").read() if a.raw_body else None

    def one(_):
        return call_sandbox_api(a.url, code, a.stdin, timeout, timeout, a.memory_limit_mb, a.language,
                                json.loads(a.files), json.loads(a.fetch_files), raw_body)

    with concurrent.futures.ThreadPoolExecutor(max_workers=a.concurrency) as pool:
        for result in pool.map(one, range(a.concurrency)):
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A small tool-calling agent for Harbor-style tasks, written for Corral's examples (Python standard library only).

It reads the task's instruction ($CORRAL_INSTRUCTION_FILE, an absolute path, where Corral writes it), offers the model one tool,
`bash`, runs every call in the sandbox and sends the output back, until the model answers without a tool call
or --max-turns is reached. It reaches the model through OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL, which
Corral sets to the episode's proxy session: every call is recorded in the episode's trajectory.

    corral run examples/tasks --agent 'python3 .corral/agent/shell_agent.py' \\
        --agent-file examples/agents/shell_agent.py

Works with any OpenAI-compatible model that can call tools (vLLM or SGLang with a tool parser). The scripted
model of `corral up` cannot fix bugs: with it the episodes run end to end and the tests fail (reward 0).
"""
import argparse
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

SYSTEM = ("You are fixing a small software project in the current directory. Use the bash tool to look at the "
          "files, edit them and run them. When the task is done, answer with a one-line summary and no tool call.")
TOOLS = [{
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the project directory; returns its exit code and output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}]


def chat(messages):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps({"model": os.environ.get("OPENAI_MODEL", ""), "messages": messages, "tools": TOOLS}).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.load(response)["choices"][0]["message"]


def run_bash(arguments, timeout, limit):
    try:
        command = json.loads(arguments or "{}").get("command", "")
    except json.JSONDecodeError as e:
        return f"error: the arguments are not JSON ({e})"
    try:
        done = subprocess.run(["bash", "-c", command], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"error: the command ran longer than {timeout}s and was stopped"
    output = (done.stdout + done.stderr).decode(errors="replace")
    if len(output) > limit:
        output = output[:limit] + f"\n[... {len(output) - limit} more characters]"
    return f"exit code {done.returncode}\n{output}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Corral writes the instruction into the sandbox and names it (absolute) in CORRAL_INSTRUCTION_FILE.
    default_instruction = os.environ.get("CORRAL_INSTRUCTION_FILE",
                                         os.path.join(os.environ.get("HOME", "."), ".corral/instruction.md"))
    parser.add_argument("--instruction", default=default_instruction)
    parser.add_argument("--max-turns", type=int, default=12)
    parser.add_argument("--tool-timeout", type=int, default=60, help="seconds per bash call")
    parser.add_argument("--max-output", type=int, default=8000, help="characters of output sent back per call")
    args = parser.parse_args()
    with open(args.instruction) as f:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f.read()}]
    for turn in range(args.max_turns):
        try:
            reply = chat(messages)
        except (urllib.error.URLError, KeyError, ValueError) as e:
            print(f"agent: the model call failed: {e}", file=sys.stderr)
            return 1
        messages.append({k: v for k, v in reply.items() if k in ("role", "content", "tool_calls")})
        calls = reply.get("tool_calls") or []
        if not calls:
            print(f"agent: done after {turn + 1} turn(s): {(reply.get('content') or '').strip()[:200]}")
            return 0
        for call in calls:
            output = run_bash(call["function"].get("arguments"), args.tool_timeout, args.max_output)
            print(f"agent: $ {call['function'].get('arguments')}\n{output}")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    print(f"agent: stopped after {args.max_turns} turns")
    return 0


if __name__ == "__main__":
    sys.exit(main())

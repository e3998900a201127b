"""A tiny server's entry point: reads config.json; --check prints what it would listen on and exits."""
import json
import sys


def load(path="config.json"):
    with open(path) as f:
        config = json.load(f)
    return config["host"], config["port"], config["worker"]


if __name__ == "__main__":
    host, port, workers = load()
    if "--check" in sys.argv:
        print(f"listening on {host}:{port} with {workers} workers")

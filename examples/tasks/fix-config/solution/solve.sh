#!/usr/bin/env bash
# The reference fix: valid JSON (no trailing comma) and the key the file really has ("workers").
set -euo pipefail
sed -i 's/"workers": 4,/"workers": 4/' config.json
sed -i 's/config\["worker"\]/config["workers"]/' server.py

#!/usr/bin/env bash
# Reward 1 when the server reads its settings from config.json, 0 otherwise.
mkdir -p /logs/verifier
ok=1
[ "$(python3 server.py --check 2>&1)" = "listening on 0.0.0.0:8080 with 4 workers" ] || ok=0
# The settings come from the file, not from the code.
cp config.json /tmp/config.json.orig
python3 -c 'import json; c = json.load(open("config.json")); c["port"] = 9090; json.dump(c, open("config.json", "w"))' || ok=0
[ "$(python3 server.py --check 2>&1)" = "listening on 0.0.0.0:9090 with 4 workers" ] || ok=0
cp /tmp/config.json.orig config.json
[ $ok = 1 ] && echo "all checks passed"
echo $ok > /logs/verifier/reward.txt

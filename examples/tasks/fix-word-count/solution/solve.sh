#!/usr/bin/env bash
# The reference fix: lower-case the text and drop punctuation before counting.
set -euo pipefail
sed -i "s/^tr -s '\[:space:\]' '\\\\n' < \"\$1\"/tr '[:upper:]' '[:lower:]' < \"\$1\" | tr -d '[:punct:]' | tr -s '[:space:]' '\\\\n'/" wordcount.sh

#!/usr/bin/env bash
# wordcount.sh FILE: how many times each word occurs in FILE, most frequent first ("COUNT WORD" per line).
set -euo pipefail
tr -s '[:space:]' '\n' < "$1" | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2 | awk '{print $1, $2}'

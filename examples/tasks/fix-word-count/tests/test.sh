#!/usr/bin/env bash
# Reward 1 when wordcount.sh counts case-insensitively without punctuation, 0 otherwise.
mkdir -p /logs/verifier
expected=$'4 the\n3 cat\n2 a\n1 dog\n1 end\n1 mat\n1 on\n1 sat\n1 slept'
printf 'The cat sat on the mat, the cat slept.\nA dog, a cat: the end.\n' > /tmp/words.txt
actual=$(bash wordcount.sh /tmp/words.txt 2>&1)
if [ "$actual" = "$expected" ]; then
  echo "all checks passed"; echo 1 > /logs/verifier/reward.txt
else
  printf 'expected:\n%s\ngot:\n%s\n' "$expected" "$actual"; echo 0 > /logs/verifier/reward.txt
fi

#!/bin/sh
# check_json.sh FIXTURE: kdatctl's JSON, as rendered by FIXTURE, parses (list documents, and
# watch output line by line).
set -eu
fixture=$1
"$fixture" list | python3 -m json.tool >/dev/null
"$fixture" empty | python3 -m json.tool >/dev/null
"$fixture" counters | python3 -m json.tool >/dev/null
"$fixture" watch | while IFS= read -r line; do
	printf '%s\n' "$line" | python3 -m json.tool >/dev/null
done
test "$("$fixture" watch | wc -l)" -ge 2
echo "kdatctl JSON: valid"

#!/bin/sh
# check_json.sh FIXTURE: kdatctl's JSON, as rendered by FIXTURE from a fake table of awkward bytes,
# parses, and says what the table holds (names escaped, bytes that are not UTF-8 replaced, every
# object's RDMA device and port, the totals' shape); watch output line by line.
set -eu
fixture=$1
check() {
	mode=$1
	shift
	"$fixture" "$mode" | python3 -c "import json, sys; d = json.load(sys.stdin); $*"
}
check list '
t = d["tables"][0]
assert d["now_ns"] == 123 and len(d["tables"]) == 2, d
assert t["comm"] == "a\"\\\n\x01\ufffdz" and t["flags"] == ["kernel", "closed"], t
ep = t["objects"][0]
assert ep["type"] == "EP" and ep["handle"] == 0x10001 and ep["local"].endswith(":0"), ep
assert (ep["rdma_device"], ep["rdma_device_number"], ep["rdma_port"], ep["qp_num"]) == \
    ("rxe\ufffd", 1, 1, 17), ep
cr = t["objects"][1]
assert cr["rdma_device"] is None and cr["rdma_port"] is None and cr["remote"] is None, cr'
check show 'assert d["object"]["handle"] == 0x10001 and d["object"]["rdma_port"] == 1, d'
check empty 'assert d == {"now_ns": 0, "tables": []}, d'
check counters 'assert len(d) == 2 and d[0]["connects"] == 3 and d[0]["rejected_no_listener"] == 1, d'
check totals 'assert d == {"module": {"connects": 5}, "devices": [{"device": "rxe\"0", "number": 1, "connects": 4}]}, d'
"$fixture" watch | while IFS= read -r line; do
	printf '%s\n' "$line" | python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["change"] == "new", d'
done
test "$("$fixture" watch | wc -l)" -ge 2
echo "kdatctl JSON: valid"

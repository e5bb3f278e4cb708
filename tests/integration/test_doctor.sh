#!/bin/sh
# tensorwire doctor (include/tensorwire/doctor.h, docs/gpudirect.md): runs
# cleanly on this machine, reads NICs and topology through --sysfs-root from
# a fixture tree, writes valid JSON, and its exit status follows the rule
# documented in tools/doctor.c (0: admitted somewhere or no GPU; 3: GPUs but
# none admitted).
set -u
B="${TW_BUILD_DIR:?}"
S="${TW_SOURCE_DIR:?}"
TW="$B/tensorwire"
[ -x "$TW" ] || { echo "SKIP: $TW not built"; exit 77; }
PY=$(command -v python3) || { echo "SKIP: no python3 to parse JSON"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Text report on the real machine: exit 0 without a GPU, 0 or 3 with one.
"$TW" doctor --fabric tcp,shm >"$tmp/text" 2>"$tmp/err"
rc=$?
cat "$tmp/text"
[ $rc -eq 0 ] || [ $rc -eq 3 ] || fail "doctor exit $rc: $(cat "$tmp/err")"
grep -q '^libfabric' "$tmp/text" || fail "no libfabric section"
grep -q '^Verdict: ' "$tmp/text" || fail "no verdict line"

# JSON against the DGX-like fixture: the NIC and its placement come from it.
"$TW" doctor --json --fabric tcp,shm --sysfs-root "$S/tests/fixtures/gdr/dgx-pxb" >"$tmp/json"
jrc=$?
"$PY" - "$tmp/json" "$jrc" <<'PYEOF' || fail "JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
nics = d["nics"]
assert [n["name"] for n in nics] == ["mlx5_0"], nics
n = nics[0]
assert n["pci"] == "0000:06:00.0" and n["numa_node"] == 0, n
assert n["dma_mask_bits"] == 64 and n["iommu"] == "identity", n
probes = {p["provider"]: p for p in d["probes"]}
assert probes["tcp"]["kind"] == "socket" and probes["shm"]["kind"] == "host-local", probes
assert isinstance(d["libfabric"]["providers"], list)
gpus = d["gpus"]
want = 0 if (not gpus or d["gpus_admitted"] > 0) else 3
assert rc == want, (rc, want, d["gpus_admitted"])
for a in d["admission"]:
    # A socket provider never admits GPUDirect, whatever it registers.
    if a["provider"] == "tcp":
        assert not a["admitted"] and a["reason"] == "provider_rdma", a
    assert len(a["checks"]) == 10, a["checks"]
    assert a["path"].endswith("+ staging") or a["path"].startswith("gdr push"), a["path"]
print("json ok:", len(gpus), "GPU(s),", len(d["admission"]), "verdicts")
PYEOF

# Usage errors name the problem and exit 2.
"$TW" doctor --bogus >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "--bogus: exit not 2"
grep -q "unknown option '--bogus'" "$tmp/err" || fail "--bogus: $(cat "$tmp/err")"
"$TW" doctor --fabric >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "--fabric without a value: exit not 2"
echo "test_doctor: passed"

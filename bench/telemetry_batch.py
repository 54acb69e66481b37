"""Prints the telemetry benchmarks' batch: 100 load events of demo-mlp (a quarter failed), at
the time given as the first argument, without receipts (bench/telemetry.sh, bench/journal.sh)."""
import json
import sys

at = sys.argv[1]
events = []
for i in range(100):
    ok = i % 4 != 0
    e = {"kind": "load", "model": "demo-mlp", "release": "1.0.0",
         "variant": "vulkan-fp32" if i % 2 else "xnnpack-fp32", "delegate": "vulkan" if i % 2 else "xnnpack",
         "outcome": "ok" if ok else "failed", "install_id": f"bench-{i}", "platform": "android",
         "soc": f"SOC{i % 7}", "device_model": f"phone-{i % 13}", "os_version": "14", "app_version": "1.0.0",
         "runtime_version": "1.5.1", "at": at, "load_ms": 10.0 + i}
    if not ok:
        e["error_code"] = "runtime_load_failed"
    events.append(e)
print(json.dumps({"events": events}))

#!/usr/bin/env python3
"""Runs `anelab probe --out X.json` and validates the report's fields (schema anelab.probe/1).

usage: check_probe_json.py <anelab binary> <out dir> system|fake
  system: on a host without an ANE, ane.available is false with a reason and every case's "ane" is null;
  fake:   the ANE half runs through FakeShim, so each case has ane timings and max_rel_diff == 0.
"""
import json
import math
import os
import subprocess
import sys


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def number(obj, key, where, positive=False):
    v = obj.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        fail(f"{where}.{key} is not a finite number: {v!r}")
    if v < 0 or (positive and v <= 0):
        fail(f"{where}.{key} = {v} out of range")
    return v


def main():
    anelab, out_dir, shim = sys.argv[1], sys.argv[2], sys.argv[3]
    out = os.path.join(out_dir, f"probe_{shim}.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [anelab, "probe", "--out", out, "--repeats", "1", "--threads", "1", "--shim", shim]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(run.stdout, run.stderr, sep="")
    if run.returncode != 0:
        fail(f"{' '.join(cmd)} exited {run.returncode}")
    with open(out) as f:
        r = json.load(f)
    if r.get("schema") != "anelab.probe/1":
        fail(f"schema is {r.get('schema')!r}")
    if r.get("device_profile") != "m4":
        fail("device_profile is not the default m4")
    host = r.get("host", {})
    for k in ("os", "os_version", "machine"):
        if not isinstance(host.get(k), str) or not host[k]:
            fail(f"host.{k} missing")
    ane = r.get("ane", {})
    if not isinstance(ane.get("available"), bool) or not isinstance(ane.get("chip_family"), str):
        fail(f"ane.available / ane.chip_family missing: {ane}")
    names = [c.get("name") for c in r.get("cases", [])]
    if names != ["conv", "attention", "train_layer"]:
        fail(f"cases are {names}")
    if shim == "system" and sys.platform != "darwin":
        if ane["available"] or ane["chip_family"] != "n/a" or "no Apple Neural Engine" not in ane.get("reason", ""):
            fail(f"expected an unavailable ANE with a reason here: {ane}")
        if "not available" not in run.stdout:
            fail("stdout does not say the ANE is not available")
    for c in r["cases"]:
        where = c["name"]
        number(c, "gflop", where, positive=True)
        emu = c.get("emulator") or fail(f"{where}: no emulator result")
        for k in ("compile_ms", "eval_ms", "gflops"):
            number(emu, k, where + ".emulator", positive=(k != "compile_ms"))
        if ane["available"]:
            a = c.get("ane") or fail(f"{where}: no ane result")
            for k in ("compile_ms", "load_ms", "eval_ms", "tflops"):
                number(a, k, where + ".ane")
            d = number(c, "max_rel_diff", where)
            if shim == "fake" and d != 0:
                fail(f"{where}: fake shim + emulator differ from the emulator (max_rel_diff {d})")
        elif c.get("ane") is not None or c.get("max_rel_diff") is not None:
            fail(f"{where}: ane results without an ANE")
    print("probe report OK:", out)


if __name__ == "__main__":
    main()

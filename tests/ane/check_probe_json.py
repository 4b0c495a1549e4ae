#!/usr/bin/env python3
"""Runs `anelab probe --out X.json` and validates the report's fields (schema anelab.probe/2).

usage: check_probe_json.py <anelab binary> <out dir> system|fake|fake-discrepancy|fake-crash
  system: on a host without an ANE, ane.available is false with a reason and every case's "ane" is null;
          the emulator half of every rule probe agrees with the device profile;
  fake:   the ANE half runs through FakeShim (= the profile's model), so each case has ane timings,
          max_rel_diff == 0 and every rule agrees on both halves;
  fake-discrepancy: FakeShim plays a device whose rows are 256 bytes apart (the profiles say 128) and whose compiler numbers
          procedure symbols by name, with --compile-limit: the report must flag row_stride and
          procedures as differing from the profile (naming the fields), io_order as not agreeing (its
          names are not in alphabetical order), and count 120 compiles.
  fake-crash: FakeShim aborts the process in its first evaluate (a crash in a private call): the report
          written so far must be there, valid JSON with "complete": false, the host and the emulator's rules.
  fake-crash-late: FakeShim aborts in its first evaluate_direct, in the last seed section (direct_eval): the
          report must hold every section before it (sram, quant, io_size_order) with "complete": false.
  fake-io-order: FakeShim plants maderix/ANE #47's size-order rule (inputs ascending, outputs descending, else
          zeros): the io_size_order section must find the zeros and say that the order matters.
The seed sections (sram, quant, io_size_order, direct_eval) are in every report: {"ane": null, "reason"}
without an ANE, their fields through the fake, whose timings they (and the report) call not ANE numbers.
Every complete report has "complete": true and "last_section": "done".
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
    mode = shim
    shim = "fake" if mode.startswith("fake") else "system"
    out = os.path.join(out_dir, f"probe_{mode}.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [anelab, "probe", "--out", out, "--repeats", "1", "--threads", "1", "--shim", shim]
    if mode == "fake-discrepancy":
        cmd += ["--fake-row-align", "256", "--fake-symbol-order", "by_name", "--compile-limit", "130"]
    if mode == "fake-crash":
        cmd += ["--fake-abort-at", "evaluate"]
    if mode == "fake-crash-late":
        cmd += ["--fake-abort-at", "evaluate_direct"]
    if mode == "fake-io-order":
        cmd += ["--fake-io-size-order"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(run.stdout, run.stderr, sep="")
    if mode == "fake-crash":
        if run.returncode == 0:
            fail("the probe with --fake-abort-at evaluate exited 0")
        if not os.path.exists(out):
            fail("a crash in a private call lost the report: no " + out)
        with open(out) as f:
            r = json.load(f)
        if r.get("complete") is not False or r.get("last_section") != "rules_emulator":
            fail(f"partial report: complete={r.get('complete')!r} last_section={r.get('last_section')!r}")
        if not r.get("host") or not isinstance(r.get("rules"), list) or not r["rules"]:
            fail("partial report lacks the host or the emulator's rules")
        print("OK: the report written before the crash survives")
        return
    if mode == "fake-crash-late":
        if run.returncode == 0 or not os.path.exists(out):
            fail(f"the probe with --fake-abort-at evaluate_direct exited {run.returncode}, report there: "
                 f"{os.path.exists(out)}")
        with open(out) as f:
            r = json.load(f)
        if r.get("complete") is not False or r.get("last_section") != "io_size_order" or "direct_eval" in r:
            fail(f"partial report: complete={r.get('complete')!r} last_section={r.get('last_section')!r}")
        check_seeds(r, True, mode, sections=SEEDS[:3])
        print("OK: the seed sections before the crash survive")
        return
    if run.returncode != 0:
        fail(f"{' '.join(cmd)} exited {run.returncode}")
    with open(out) as f:
        r = json.load(f)
    if r.get("complete") is not True or r.get("last_section") != "done":
        fail(f"complete={r.get('complete')!r} last_section={r.get('last_section')!r} in a finished report")
    if r.get("schema") != "anelab.probe/2":
        fail(f"schema is {r.get('schema')!r}")
    if r.get("device_profile") != "m4" or r.get("device_profile_requested") != "auto":
        fail("device_profile is not auto -> m4 (no ANE here; the fake reports h16)")
    if not isinstance(r.get("anelab_commit"), str) or not r["anelab_commit"]:
        fail("anelab_commit missing")
    host = r.get("host", {})
    for k in ("os", "os_version", "machine", "chip"):
        if not isinstance(host.get(k), str) or not host[k]:
            fail(f"host.{k} missing")
    ane = r.get("ane", {})
    if not isinstance(ane.get("available"), bool) or not isinstance(ane.get("chip_family"), str):
        fail(f"ane.available / ane.chip_family missing: {ane}")
    names = [c.get("name") for c in r.get("cases", [])]
    if names != ["conv", "conv_w8", "conv_w8a8", "attention", "train_layer"]:
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
            if mode == "fake-discrepancy" and "error" in a:
                continue  # a device whose rows differ may fail a workload: recorded, the probe goes on
            for k in ("compile_ms", "load_ms", "eval_ms", "tflops"):
                number(a, k, where + ".ane")
            d = number(c, "max_rel_diff", where)
            if mode == "fake" and d != 0:
                fail(f"{where}: fake shim + emulator differ from the emulator (max_rel_diff {d})")
        elif c.get("ane") is not None or c.get("max_rel_diff") is not None:
            fail(f"{where}: ane results without an ANE")
    # the silent-zeros self-check (issue 40 item 4) is the summary line: agrees on the profile's layout,
    # not on a device whose rows are 256 bytes apart
    if ane["available"]:
        sc = r.get("self_check") or fail("no self_check in the report")
        if sc.get("agrees") is not (mode in ("fake", "fake-io-order")):  # one input, one output: no order
            fail(f"self_check: agrees {sc.get('agrees')} in mode {mode}: {sc}")
        if "summary: [self-check]" not in run.stdout:
            fail("stdout has no self-check summary line")
    check_kernels_and_rules(r, ane["available"], mode)
    check_seeds(r, ane["available"], mode)
    print("probe report OK:", out)


SEEDS = ["sram", "quant", "io_size_order", "direct_eval"]
NOT_ANE = "not ANE numbers"


def check_seeds(r, available, mode, sections=SEEDS):
    for name in sections:
        x = r.get(name) or fail(f"no seed section {name}")
        if not available:
            if x.get("ane", 0) is not None or not x.get("reason"):
                fail(f"{name} without an ANE: {x}")
            continue
        if NOT_ANE not in x.get("numbers", "") or NOT_ANE not in r.get("numbers", ""):
            fail(f"{name}: the fake's timings are not called 'not ANE numbers': {x.get('numbers')!r}")
        if not isinstance(x.get("answer"), str) or not x["answer"]:
            fail(f"{name}: no answer")
    if not available:
        return
    tolerant = mode == "fake-discrepancy"  # a device with other row strides may fail a program: recorded
    if "sram" in sections:
        sizes = r["sram"].get("sizes", [])
        if [z.get("convs") for z in sizes] != [1, 2, 4, 8, 16, 32] or "knee" not in r["sram"]:
            fail(f"sram: sizes {[z.get('convs') for z in sizes]}, knee present: {'knee' in r['sram']}")
        for z in sizes:
            if not (tolerant and "error" in z):
                number(z, "tflops", "sram.sizes", positive=True)
                number(z, "working_set_bytes", "sram.sizes", positive=True)
    if "quant" in sections:
        q = r["quant"]
        for k in ("fp16", "int8", "uint4", "uint4_block32", "lut4", "lut6"):
            x = q.get(k) or fail(f"quant: no form {k}")
            if tolerant and "error" in x:
                continue
            number(x, "tflops", "quant." + k, positive=True)
            d = number(x, "max_rel_diff_vs_emulator", "quant." + k)
            if mode == "fake" and d != 0:  # the fake shim runs the emulator: the same program gives the same bits
                fail(f"quant.{k}: fake shim differs from the emulator (max_rel_diff_vs_emulator {d})")
            # The form's outputs against the fp16 program's: 0 for fp16 itself; for the compressed forms the
            # weights' rounding, > 0 and below 0.5 (4 bits of a normal matrix: about 0.1); the emulator's the same.
            for f in ("max_rel_diff_vs_fp16", "max_rel_diff_vs_fp16_emulator"):
                v = number(x, f, "quant." + k)
                if (k == "fp16") != (v == 0) or v >= 0.5:
                    fail(f"quant.{k}: {f} {v} (0 for fp16, in (0, 0.5) for a compressed form)")
                if mode == "fake" and v != x["max_rel_diff_vs_fp16_emulator"]:
                    fail(f"quant.{k}: the fake shim's diff vs fp16 {v} differs from the emulator's")
            if k != "fp16":
                number(x, "vs_fp16", "quant." + k, positive=True)
        if not tolerant:
            number(q, "int8_vs_fp16", "quant", positive=True)
    if "io_size_order" in sections:
        io = r["io_size_order"]
        cases = ("inputs_ascending_outputs_descending", "inputs_descending", "outputs_ascending")
        want_zero = {"fake-io-order": {"inputs_descending", "outputs_ascending"}}.get(mode, set())
        for c in cases:
            x = io.get(c) or fail(f"io_size_order: no case {c}")
            if tolerant:
                continue
            if x.get("agrees") is not (c not in want_zero) or x.get("zeros") is not (c in want_zero):
                fail(f"io_size_order.{c}: agrees {x.get('agrees')} zeros {x.get('zeros')} in mode {mode}: {x}")
        if not tolerant and (io.get("inputs_any_order"), io.get("outputs_any_order")) != ((not want_zero),) * 2:
            fail(f"io_size_order: inputs_any_order {io.get('inputs_any_order')}, outputs_any_order "
                 f"{io.get('outputs_any_order')} in mode {mode}")
        if mode == "fake-io-order" and "ascending size order" not in io["answer"]:
            fail(f"io_size_order: the answer does not name the rule: {io['answer']}")
    if "direct_eval" in sections:
        d = r["direct_eval"]
        for k in ("xpc", "direct"):
            number(d.get(k, {}), "eval_ms", "direct_eval." + k, positive=True)
        if d.get("outputs_equal") is not True:
            fail(f"direct_eval: outputs of the two paths differ through the fake: {d}")


RULES = ["row_stride", "min_surface", "io_order", "procedures", "max_dim", "float_literals"]


def check_kernels_and_rules(r, available, mode):
    tk = r.get("training_kernels") or fail("no training_kernels")
    if len(tk.get("emulator", [])) != 9:
        fail(f"training_kernels.emulator has {len(tk.get('emulator', []))} kernels, not 9")
    for k in tk["emulator"]:
        number(k, "eval_ms", "training_kernels.emulator", positive=True)
        number(k, "gflop", "training_kernels.emulator", positive=True)
    if available:
        for k in tk.get("ane") or fail("no ane training kernels"):
            if mode == "fake-discrepancy" and "error" in k:
                continue
            number(k, "tflops", "training_kernels.ane", positive=True)
    elif tk.get("ane") is not None:
        fail("ane training kernels without an ANE")
    d = r.get("dispatch_overhead_ms") or fail("no dispatch_overhead_ms")
    number(d, "emulator", "dispatch_overhead_ms")
    if available and mode == "fake":
        number(d, "ane", "dispatch_overhead_ms")
    rules = {x["name"]: x for x in r.get("rules", [])}
    want = RULES + (["compile_limit"] if mode == "fake-discrepancy" else [])
    if sorted(rules) != sorted(want):
        fail(f"rules are {sorted(rules)}, want {sorted(want)}")
    for name, x in rules.items():
        if x.get("emulator_agrees") is not True:
            fail(f"rule {name}: the emulator half disagrees with the profile: {x.get('emulator_differences')}")
        if not available:
            if x.get("ane") is not None or x.get("ane_agrees") is not None:
                fail(f"rule {name}: ane results without an ANE")
            continue
        if mode == "fake" and x.get("ane_agrees") is not True:
            fail(f"rule {name}: the fake (the profile's model) disagrees: {x.get('ane_differences')}")
    if mode == "fake-discrepancy":
        for name, field in (("row_stride", "64.input_stride_bytes"), ("procedures", "symbols")):
            x = rules[name]
            diffs = " ".join(x.get("ane_differences", []))
            if x.get("ane_agrees") is not False or field not in diffs:
                fail(f"rule {name}: expected a difference in {field}, got {x.get('ane_agrees')} {diffs}")
        for name in ("min_surface", "max_dim", "float_literals"):
            if rules[name].get("ane_agrees") is not True:
                fail(f"rule {name} should still agree: {rules[name].get('ane_differences')}")
        # io_order's names are out of alphabetical order: a device that numbers symbols by name must not
        # look like one that binds by position (an error or a difference, never agreement).
        io = rules["io_order"]
        if io.get("ane_agrees") is True or not (io.get("ane_differences") or (io.get("ane") or {}).get("error")):
            fail(f"rule io_order: by-name numbering not told apart from by-position: {io}")
        cl = rules["compile_limit"]
        for side in ("emulator", "ane"):
            if cl[side].get("compiles_until_failure") != 120:
                fail(f"compile_limit.{side}: {cl[side]}")


if __name__ == "__main__":
    main()

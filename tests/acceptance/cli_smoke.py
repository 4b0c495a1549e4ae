#!/usr/bin/env python3
"""CLI smoke test of the real `anelab` binary: generate, train a few steps, convert. Small enough to run under
qemu-user (the aarch64 CI build runs it there), so that the binary itself, not only the test suites, is exercised
on every build. Standard library only.

  1. generate  stories260K + tok512 with run.c's settings (-t 0 -n 64 -i "Once upon a time"): stdout byte for
               byte as run.c's (../shared/data/reference/runc_260K_t0_n64_once.stdout)
  2. convert   stories260K.bin -> GGUF -> anelab; each generates run.c's text again (the files hold fp32)
  3. tokenize  data/tinytales/corpus.txt with its tokenizer.json
  4. train     4 steps of the stories260k preset from scratch on the ANE kernels (emulator, --strategy dynamic):
               events.jsonl has steps 1..4 with finite losses, last.ckpt exists; then `export` to GGUF and a
               greedy generation from the export

Usage: cli_smoke.py ANELAB SOURCE_DIR DATA_DIR WORK_DIR. Exit 0: passed; 77: the reference data is missing
(skipped, with the reason); 1: the first failure, with the command and its output.
"""
import json
import math
import os
import shutil
import subprocess
import sys


def run(anelab, args, cwd):
    p = subprocess.run([anelab] + args, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       timeout=1800)
    if p.returncode != 0:
        print(f"FAIL: `anelab {' '.join(args)}` exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        sys.exit(1)
    return p.stdout


def check(cond, msg):
    if not cond:
        print(f"FAIL: {msg}")
        sys.exit(1)


def main():
    anelab, src, data, work = sys.argv[1:5]
    model = os.path.join(data, "llama2c", "stories260K.bin")
    tok = os.path.join(data, "llama2c", "tok512.bin")
    ref = os.path.join(data, "reference", "runc_260K_t0_n64_once.stdout")
    for f in (model, tok, ref):
        if not os.path.exists(f):
            print(f"SKIP: {f} is missing (reference data, see ../shared/data/PROVENANCE.md)")
            sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    want = open(ref, encoding="utf-8").read()

    def runc_text(path):
        return run(anelab, ["infer", "generate", "--model", path, "--tokenizer", tok, "--prompt", "Once upon a time",
                            "--steps", "64", "--temperature", "0", "--backend", "cpu", "--quiet"], work)

    print("--- generate (run.c settings)", flush=True)
    got = runc_text(model)
    check(got == want, f"stories260K greedy text differs from run.c's:\n got {got!r}\nwant {want!r}")

    print("--- convert llama2.c -> GGUF -> anelab", flush=True)
    gguf, ane = os.path.join(work, "s.gguf"), os.path.join(work, "s.anelab")
    run(anelab, ["convert", model, gguf], work)
    run(anelab, ["convert", gguf, ane], work)
    for path in (gguf, ane):
        got = runc_text(path)
        check(got == want, f"{os.path.basename(path)} generates {got!r}, run.c {want!r}")

    print("--- tokenize", flush=True)
    tokenizer = os.path.join(src, "data", "tinytales", "tokenizer.json")
    tokens = os.path.join(work, "tinytales.bin")
    run(anelab, ["tokenize", "--tokenizer", tokenizer, os.path.join(src, "data", "tinytales", "corpus.txt"), tokens],
        work)

    print("--- train 4 steps (ANE kernels on the emulator)", flush=True)
    run_dir = os.path.join(work, "run")
    run(anelab, ["train", "--preset", "stories260k", "--data", tokens, "--tokenizer", tokenizer, "--run-dir", run_dir,
                 "--strategy", "dynamic", "--steps", "4", "--batch-size", "2", "--seq-len", "64", "--eval-every", "0",
                 "--quiet"], work)
    events = [json.loads(l) for l in open(os.path.join(run_dir, "events.jsonl"), encoding="utf-8")]
    steps = [e for e in events if e.get("event") == "step"]
    check([e["step"] for e in steps] == [1, 2, 3, 4], f"events.jsonl steps: {[e.get('step') for e in steps]}")
    check(all(math.isfinite(e["loss"]) and e["loss"] > 0 for e in steps), f"losses: {[e['loss'] for e in steps]}")
    check(os.path.exists(os.path.join(run_dir, "last.ckpt")), "no last.ckpt")
    exported = os.path.join(work, "trained.gguf")
    run(anelab, ["export", run_dir, exported], work)
    text = run(anelab, ["infer", "generate", "--model", exported, "--tokenizer", tokenizer, "--prompt", "Once",
                        "--max-tokens", "8", "--temperature", "0", "--backend", "cpu", "--quiet"], work)
    check(text.startswith("Once"), f"the trained export's text does not start with the prompt: {text!r}")
    print("cli smoke: passed")


if __name__ == "__main__":
    main()

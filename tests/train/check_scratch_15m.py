#!/usr/bin/env python3
"""stories15m from scratch reaches a clearly falling loss within a CI-sized budget.

Tokenizes the TinyStories prefix with the Llama 2 tokenizer (`anelab tokenize`), trains the
stories15m preset from a seeded random init for 40 steps (B=8, T=64, CPU strategy) and checks, from
events.jsonl, that the validation loss falls at every evaluation and the last train losses sit well
below the first (ln 32000 = 10.4 at init). At T=64 (half the tokens of T=128, measured 2026-11-28): the last
five train losses average 3.6 nats below the first five (the check asks for 2) and the validation loss falls at each
of its four evaluations (6.76, 6.57, 6.46, 6.41).

usage: check_scratch_15m.py ANELAB_BINARY DATA_DIR WORK_DIR   (exit 77 = skipped: data absent)
"""
import json
import os
import shutil
import subprocess
import sys


def main():
    binary, data, work = sys.argv[1:4]
    tok = os.path.join(data, "llama2c", "tokenizer.bin")
    text = os.path.join(data, "tinystories", "tinystories_valid_prefix.txt")
    if not (os.path.exists(tok) and os.path.exists(text)):
        print(f"skipped: reference data missing under {data}")
        sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tokens = os.path.join(work, "ts32k.bin")
    subprocess.run([binary, "tokenize", "--tokenizer", tok, text, tokens], check=True)
    run = os.path.join(work, "run")
    subprocess.run([binary, "train", "--preset", "stories15m", "--data", tokens, "--run-dir", run, "--steps", "40",
                    "--batch-size", "8", "--seq-len", "64", "--lr", "2e-3", "--warmup-steps", "5",
                    "--eval-every", "10", "--strategy", "cpu", "--seed", "1", "--quiet"], check=True)
    events = [json.loads(l) for l in open(os.path.join(run, "events.jsonl"))]
    train = [e["loss"] for e in events if e["event"] == "step"]
    val = [e["val_loss"] for e in events if e["event"] == "eval"]
    print("train:", [round(x, 3) for x in train[:3]], "...", [round(x, 3) for x in train[-3:]])
    print("val:", [round(x, 3) for x in val])
    ok = len(train) == 40 and len(val) >= 3
    ok &= all(b < a for a, b in zip(val, val[1:]))                        # validation falls at every eval
    ok &= sum(train[-5:]) / 5 < sum(train[:5]) / 5 - 2.0                  # > 2 nats lower than at the start
    print("ok" if ok else "FAIL: loss is not clearly falling")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The first hour with anelab, scripted: every step a new user takes, in order, each one
checked. Standard library only; runs the built `anelab` binary from a scratch directory outside the
checkout, on the corpus and tokenizer the repo carries (data/tinytales).

  0. a typo     `anelab trian` is an unknown command that names `train`
  1. tokenize   data/tinytales/corpus.txt -> token file
  2. train      from a config file whose paths are relative to the config's directory, run from another
                directory, stopped half way (--stop-after)
  3. resume     the same config with --resume: finishes the run
  4. generate   from the run directory (= its best checkpoint), the prompt echoed whole; the dashboard's
                "Sample now" command
  5. export     to anelab, GGUF, a Hugging Face directory and llama2.c (and refused: x.safetensors, x.txt)
  6. generate   from every export: the same greedy text as from the run directory; `convert --tokenizer`
                (a cwd-relative path) makes an anelab file that carries the tokenizer
  7. serve      the anelab export; a stdlib HTTP client gets the same greedy text; a second server on the
                same port is refused, naming the port
  8. train --init from the run directory (a checkpoint is a model for training too)

Each step is one function taking the shared context, so later fixes add steps (or checks) in one place.
Usage: first_hour.py ANELAB_BINARY CHECKOUT_DIR [WORK_DIR] [--strategy cpu|dynamic]
Exit 0 when every step passed; the first failure prints the command, its output and exits 1.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PROMPT = "Once upon a time"
N_TOKENS = 20


class Ctx:
    pass


def run(c, args, ok=True, stdin=None, cwd=None):
    """Runs anelab with args; returns (rc, stdout, stderr). ok=True: a non-zero exit fails the script."""
    p = subprocess.run([c.anelab] + args, cwd=cwd or c.elsewhere, capture_output=True, text=True,
                       stdin=stdin if stdin is not None else subprocess.DEVNULL, timeout=600)
    if ok and p.returncode != 0:
        fail(c, f"`anelab {' '.join(args)}` exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p.returncode, p.stdout, p.stderr


def fail(c, msg):
    print(f"FAIL [{c.step}]: {msg}", flush=True)
    sys.exit(1)


def check(c, cond, msg):
    if not cond:
        fail(c, msg)


def step(c, name):
    c.step = name
    print(f"--- {name}", flush=True)


def typo(c):
    step(c, "unknown command")
    rc, out, err = run(c, ["trian", "--help"], ok=False)
    check(c, rc != 0 and "trian" in err and "train" in err.replace("trian", ""),
          f"`anelab trian` should be refused naming `train`: rc {rc}, stderr {err!r}")


def tokenize(c):
    step(c, "tokenize")
    run(c, ["tokenize", "--tokenizer", c.tokenizer, c.corpus, c.tokens])
    side = json.load(open(c.tokens + ".json"))
    check(c, side["n_tokens"] > 10000, f"token file too small: {side}")


def train(c):
    step(c, "train from a config, run from another directory")
    cfg_dir = os.path.dirname(c.config)
    rel = lambda p: os.path.relpath(p, cfg_dir)  # paths in a config are relative to the config file
    with open(c.config, "w") as f:
        f.write(f'''# first-hour acceptance run (written by tests/acceptance/first_hour.py)
preset = "stories260k"
data = "{rel(c.tokens)}"
tokenizer = "{rel(c.tokenizer)}"
run_dir = "{rel(c.run_dir)}"
strategy = "{c.strategy}"
steps = 60
batch_size = 8
seq_len = 64
lr = 5e-3
warmup_steps = 2
eval_every = 30
eval_batches = 2
''')
    run(c, ["train", "--config", c.config, "--stop-after", "30", "--quiet"])
    check(c, os.path.exists(os.path.join(c.run_dir, "last.ckpt")), "no last.ckpt after the first half")
    check(c, os.path.exists(os.path.join(c.run_dir, "tokenizer.anetok")), "the run did not save its tokenizer")


def resume(c):
    step(c, "resume")
    run(c, ["train", "--config", c.config, "--resume", "--quiet"])
    steps = [json.loads(l) for l in open(os.path.join(c.run_dir, "events.jsonl")) if '"event":"step"' in l]
    check(c, steps and steps[-1]["step"] == 60, f"the resumed run did not reach step 60: {steps[-1:]}")


def greedy(c, model, extra=()):
    _, out, _ = run(c, ["infer", "generate", "--model", model, "--prompt", PROMPT, "--temp", "0", "--max-tokens",
                        str(N_TOKENS), "--backend", "cpu"] + list(extra))
    return out


def generate_from_run(c):
    step(c, "generate from the run directory")
    c.text = greedy(c, c.run_dir)
    check(c, len(c.text.strip()) > len(PROMPT), f"no continuation: {c.text!r}")
    check(c, c.text.startswith(PROMPT), f"the output does not start with the whole prompt {PROMPT!r}: {c.text!r}")
    print(c.text.strip())
    same = greedy(c, os.path.join(c.run_dir, "best.ckpt"))
    check(c, same == c.text, f"best.ckpt and the run dir differ: {same!r} vs {c.text!r}")
    # The dashboard's "Sample now" (dashboard/gui_panels.cpp sample_now): this argv, stdin /dev/null.
    run(c, ["infer", "generate", "--model", os.path.join(c.run_dir, "best.ckpt"), "--temperature", "0.8",
            "--top-p", "0.9", "--max-tokens", "16"])
    _, out, _ = run(c, ["info", c.run_dir])
    check(c, "format: checkpoint" in out, f"info does not name the checkpoint: {out}")


def export(c):
    step(c, "export")
    c.exports = {"anelab": os.path.join(c.work, "x.anelab"), "gguf": os.path.join(c.work, "x.gguf"),
                 "safetensors": os.path.join(c.work, "x-hf"), "llama2c": os.path.join(c.work, "x.bin")}
    for fmt, out in c.exports.items():
        _, so, _ = run(c, ["export", c.run_dir, out])
        check(c, f"({fmt})" in so, f"export to {out} did not write {fmt}: {so}")
    for name in ("x.safetensors", "x.txt"):
        rc, so, se = run(c, ["convert", c.run_dir, os.path.join(c.work, name)], ok=False)
        check(c, rc != 0 and name in se, f"convert to {name} was not refused: rc {rc}, {se}")
        check(c, not os.path.exists(os.path.join(c.work, name)), f"{name} was written")
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        check(c, os.path.exists(os.path.join(c.exports["safetensors"], f)), f"the HF export lacks {f}")


def generate_from_exports(c):
    step(c, "generate from each export")
    for fmt, path in c.exports.items():
        extra = ["--tokenizer", c.tokenizer] if fmt == "llama2c" else []
        got = greedy(c, path, extra)
        check(c, got == c.text, f"{fmt} export generates {got!r}, the run dir {c.text!r}")
    # convert --tokenizer with a path relative to this cwd: the anelab file embeds it, so it runs from anywhere.
    os.makedirs(os.path.join(c.work, "tok"), exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(os.path.dirname(c.tokenizer), f), os.path.join(c.work, "tok", f))
    run(c, ["convert", c.exports["llama2c"], os.path.join(c.work, "y.anelab"), "--tokenizer", "tokenizer.json"],
        cwd=os.path.join(c.work, "tok"))
    got = greedy(c, os.path.join(c.work, "y.anelab"))
    check(c, got == c.text, f"convert --tokenizer (embedded) generates {got!r}, the run dir {c.text!r}")


def finetune_from_run(c):
    step(c, "train --init from the run directory")
    run(c, ["train", "--init", c.run_dir, "--data", c.tokens, "--run-dir", os.path.join(c.work, "runs", "ft"),
            "--strategy", "cpu", "--steps", "2", "--batch-size", "2", "--seq-len", "32", "--quiet"])


def serve(c):
    step(c, "serve the export")
    port_file = os.path.join(c.work, "port")
    srv = subprocess.Popen([c.anelab, "serve", "--model", c.exports["anelab"], "--port", "0", "--port-file", port_file,
                            "--backend", "cpu", "--no-log"], cwd=c.elsewhere, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        t0 = time.time()
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if srv.poll() is not None or time.time() - t0 > 60:
                fail(c, f"server did not start: {srv.stdout.read() if srv.poll() is not None else 'timeout'}")
            time.sleep(0.1)
        port = int(open(port_file).read().strip())
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = json.dumps({"prompt": PROMPT, "max_tokens": N_TOKENS, "temperature": 0})
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = json.loads(r.read())
        check(c, r.status == 200, f"HTTP {r.status}: {data}")
        got = data["choices"][0]["text"]
        want = c.text.strip("\n")
        check(c, want.endswith(got) and len(got) > 0,
              f"server text {got!r} is not the continuation of the CLI's {want!r}")
        rc, out, err = run(c, ["serve", "--model", c.exports["anelab"], "--port", str(port), "--backend", "cpu",
                               "--no-log"], ok=False)
        check(c, rc != 0 and str(port) in err and "in use" in err,
              f"a second server on port {port} was not refused naming it: rc {rc}, stderr {err!r}")
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()


STEPS = [typo, tokenize, train, resume, generate_from_run, export, generate_from_exports, serve, finetune_from_run]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("anelab")
    ap.add_argument("checkout")
    ap.add_argument("work", nargs="?")
    ap.add_argument("--strategy", default="cpu")
    a = ap.parse_args()
    c = Ctx()
    c.anelab = os.path.abspath(a.anelab)
    c.strategy = a.strategy
    c.tokenizer = os.path.join(os.path.abspath(a.checkout), "data", "tinytales", "tokenizer.json")
    c.corpus = os.path.join(os.path.abspath(a.checkout), "data", "tinytales", "corpus.txt")
    c.work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="anelab_first_hour_")
    shutil.rmtree(c.work, ignore_errors=True)
    os.makedirs(c.work)
    c.elsewhere = os.path.join(c.work, "elsewhere")  # the cwd of every command: not the checkout, not the config dir
    os.makedirs(c.elsewhere)
    os.makedirs(os.path.join(c.work, "cfg"))
    c.config = os.path.join(c.work, "cfg", "tiny.toml")
    c.tokens = os.path.join(c.work, "tinytales.bin")
    c.run_dir = os.path.join(c.work, "runs", "tiny")
    t0 = time.time()
    for s in STEPS:
        s(c)
    print(f"first hour: all {len(STEPS)} steps passed in {time.time() - t0:.1f} s ({c.work})")
    shutil.rmtree(c.work, ignore_errors=True)


if __name__ == "__main__":
    main()

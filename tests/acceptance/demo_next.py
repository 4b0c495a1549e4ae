#!/usr/bin/env python3
"""`anelab demo`, then every command its "Next:" list prints, verbatim, as a new user pastes them.

Runs the demo (a shorter configuration than ./run.sh's, same code path) in a scratch directory, takes the
lines after "Next:" (each one a complete shell command) and runs each one with bash from that directory:

  infer generate   exits 0; stdout is the prompt and a continuation; the greedy lines of the GGUF and the
                   llama2.c exports print the same text
  serve            prints "listening on http://HOST:PORT", answers /v1/completions with text, and exits 0
                   on SIGTERM (when its default port is taken by another program, --port 0 is appended)
  dashboard        stays up for a few seconds without an error (under xvfb-run when there is no display;
                   skipped, saying so, when neither is available)
  train            stopped early (--stop-after appended, as by a kill after a checkpoint), then run again
                   verbatim it continues the run to its --steps (a resumed run_start), and a third time it
                   says the run is finished; each exits 0

Usage: demo_next.py ANELAB_BINARY WORK_DIR [extra `anelab demo` arguments]
Exit 0 when every line passed; the first failure prints the command and its output and exits 1.
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

DEMO_ARGS = ["--steps", "12", "--batch-size", "4", "--seq-len", "64"]


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def bash(line, cwd, timeout=900):
    p = subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def next_lines(out):
    lines = out.splitlines()
    at = [i for i, l in enumerate(lines) if l.rstrip().endswith("Next:")]
    if not at:
        fail(f"the demo printed no 'Next:' list:\n{out}")
    cmds = []
    for l in lines[at[-1] + 1:]:
        if not l.startswith("  "):
            break
        cmds.append(l.strip())
    return cmds


def check_generate(line, cwd, prompt):
    rc, out, err = bash(line, cwd)
    if rc != 0:
        fail(f"`{line}` exited {rc}\nstdout:\n{out}\nstderr:\n{err}")
    if not out.startswith(prompt) or len(out.strip()) <= len(prompt):
        fail(f"`{line}` printed no continuation of {prompt!r}: {out!r}")
    print(f"  ok: {out.strip()[:100]!r}")
    return out


def wait_listening(proc, timeout):
    """The port of serve's 'listening on http://HOST:PORT' line, or None when it exits first."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        line = proc.stdout.readline()
        if not line:
            return None
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            return int(m.group(1))
    return None


def check_serve(line, cwd, prompt):
    for attempt in (line, line.split("#")[0].rstrip() + " --port 0"):
        proc = subprocess.Popen(["bash", "-c", "exec " + attempt], cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        port = wait_listening(proc, 120)
        if port is not None:
            break
        proc.wait(timeout=30)
        err = proc.stderr.read()
        if attempt == line and "in use" in err:
            print(f"  (the default port is taken on this machine: {err.strip()}; retrying with --port 0)")
            continue
        fail(f"`{attempt}` did not start listening (rc {proc.returncode}):\n{err}")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = json.loads(r.read())
        if r.status != 200 or not data["choices"][0]["text"]:
            fail(f"`{line}`: HTTP {r.status}: {data}")
        print(f"  ok: HTTP 200, {data['choices'][0]['text']!r}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail(f"`{line}` did not stop on SIGTERM")
    if rc != 0:
        fail(f"`{line}` exited {rc} on SIGTERM:\n{proc.stderr.read()}")


def check_dashboard(line, cwd):
    cmd = line
    if not os.environ.get("DISPLAY"):
        if not shutil.which("xvfb-run"):
            print("  skipped: no display and no xvfb-run")
            return
        cmd = "xvfb-run -a " + line
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        rc = proc.wait(timeout=8)
        if rc != 0:
            fail(f"`{cmd}` exited {rc}:\n{proc.stderr.read()}")
    except subprocess.TimeoutExpired:
        print("  ok: the window stayed up for 8 s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def check_train(line, cwd):
    m = re.search(r"--run-dir (\S+)", line)
    steps = re.search(r"--steps (\d+)", line)
    if not m or not steps:
        fail(f"`{line}` names no --run-dir or --steps")
    run = os.path.join(cwd, m.group(1))
    rc, out, err = bash(line.split("#")[0].rstrip() + " --stop-after 2", cwd)
    if rc != 0 or not os.path.exists(os.path.join(run, "last.ckpt")):
        fail(f"`{line} --stop-after 2` exited {rc} (or wrote no last.ckpt)\nstdout:\n{out[-3000:]}\nstderr:\n{err}")
    print("  ok: started, stopped after 2 steps with last.ckpt")
    rc, out, err = bash(line, cwd)
    if rc != 0:
        fail(f"`{line}` run again exited {rc}\nstdout:\n{out[-3000:]}\nstderr:\n{err}")
    with open(os.path.join(run, "events.jsonl")) as f:
        events = [json.loads(l) for l in f if l.strip()]
    starts = [e for e in events if e.get("event", e.get("type")) == "run_start"]
    last = [e for e in events if e.get("event", e.get("type")) == "step"]
    if len(starts) != 2 or not starts[1].get("resumed") or not last or last[-1].get("step") != int(steps.group(1)):
        fail(f"`{line}` run again did not continue the run to step {steps.group(1)}: {starts} ... {last[-1:]}")
    print(f"  ok: again: resumed and finished at step {steps.group(1)}")
    rc, out, err = bash(line, cwd)
    if rc != 0 or "already finished" not in out:
        fail(f"`{line}` a third time: rc {rc}, stdout {out!r}, stderr {err!r}")
    print(f"  ok: a third time: {out.strip().splitlines()[-1]}")


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    anelab, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prompt = "Once upon a time"
    t0 = time.time()
    p = subprocess.run([anelab, "demo"] + DEMO_ARGS + sys.argv[3:], cwd=work, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=900)
    print(p.stdout, flush=True)
    if p.returncode != 0:
        fail(f"`anelab demo` exited {p.returncode}:\n{p.stderr}")
    cmds = next_lines(p.stdout)
    if len(cmds) < 5:
        fail(f"expected at least 5 Next: lines, got {cmds}")
    greedy = {}
    for line in cmds:
        print(f"--- {line}", flush=True)
        words = line.split()
        if words[0] != anelab and words[0] != f"'{anelab}'":
            fail(f"the line does not start with this anelab ({anelab}): {line}")
        sub = words[1]
        if sub == "infer":
            out = check_generate(line, work, prompt)
            if "--temp 0 " in line + " " or line.endswith("--temp 0"):
                greedy[line] = out
        elif sub == "serve":
            check_serve(line, work, prompt)
        elif sub == "dashboard":
            check_dashboard(line, work)
        elif sub == "train":
            check_train(line, work)
        else:
            fail(f"no check for a Next: line of `anelab {sub}`: {line}")
    if len(set(greedy.values())) > 1:
        fail(f"the greedy lines of the exports print different text: {greedy}")
    print(f"demo_next: the demo and all {len(cmds)} Next: lines passed in {time.time() - t0:.0f} s ({work})")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""The serve robustness checks with continuous batching on (issue 38), standard library only, Linux (VmRSS).

Starts `anelab serve --parallel 4 --api-key K` on a random-weight model (scripts/serve_structured_check.py's byte
tokenizer, qwen2.5 template, dim 256 x 4 layers so that requests overlap) and runs, against the real batched engine,
what tests/serve/test_http_robust.cpp checks with a fake generator:

  slow        16 sockets trickle a request head a byte every 200 ms; /health and a completion are answered within
              2 s meanwhile, and every slow socket is answered 408 and closed by the deadline
  pipeline    two completions and a /health in one write: three answers, in order
  caps        a Content-Length over --max-body: 413; a bad one: 400; --max-connections sockets each holding a
              begun request head: a completion answered 503, /health 200 (its extra slots); released: 200
  apikey      no key and a wrong key: 401; the key: 200; /health without it: 200
  batched     /metrics counts decode steps of 2 or more rows (the load really shared steps)
then the abusive load, sampling the server's VmRSS every 100 ms for the whole run:
  load        ROUNDS x scripts/serve_load_test.py --clients 32 --requests 96 --retries 2 --abuse 16 (slowloris
              heads, garbage, huge Content-Length, truncated bodies, streams left mid-way, pipelining)
  attack      scripts/serve_attack.py --phases burst,partial,abandon,sockets (large bodies, half-written bodies,
              abandoned requests, 300 trickling / idle keep-alive sockets)

RSS bounds (derived from the caps, docs/server.md "Memory"): while the attack runs, peak - idle <=
--max-buffered + (--max-connections + 32) x 32 KiB + 32 x --parse-budget + 1 MiB + the KV caches of the 4 slots at
full context (f32) + 8 MiB of allocator slack; flat: after each load round but the first, RSS within 6 MiB of
the RSS after the first (the warm-up: thread stacks, arenas), and after the attack within 8 MiB of before it.
Prints one JSON line per check and the RSS series; exit 1 when a check or a bound fails.

  scripts/serve_robust_batched.py --anelab build/bin/anelab [--rounds 3] [--work DIR] [--skip-attack]
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_structured_check as sc  # noqa: E402 (the byte tokenizer, the model maker, the server runner)

KEY = "k38"
HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = {"dim": 256, "hidden_dim": 768, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "head_dim": 64,
         "max_seq_len": 1024}
MAX_BODY, MAX_CONN, MAX_BUFFERED, PARSE_BUDGET = 1 << 20, 256, 32 << 20, 1 << 20  # the defaults


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class RssSeries:
    def __init__(self, pid):
        self.pid, self.t0, self.points, self.done = pid, time.time(), [], False
        self.marks = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.done:
            try:
                self.points.append((time.time() - self.t0, vm_rss_kib(self.pid)))
            except OSError:
                return
            time.sleep(0.1)

    def now(self):
        return vm_rss_kib(self.pid)

    def mark(self, name):
        self.marks.append((name, round(time.time() - self.t0, 2), self.now()))

    def peak_since(self, t):
        return max([k for s, k in self.points if s >= t] or [0])

    def stop(self):
        self.done = True
        self.t.join()


def mib(kib):
    return round(kib / 1024.0, 1)


def raw(port, data, timeout=5.0, read=True):
    """Sends bytes on a fresh socket and returns what comes back until the server closes or the timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = b""
    if read:
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except socket.timeout:
            pass
    s.close()
    return out


def req(method, path, body="", key=KEY, close=True):
    h = "%s %s HTTP/1.1\r\nHost: x\r\n" % (method, path)
    if key:
        h += "Authorization: Bearer %s\r\n" % key
    if body:
        h += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    if close:
        h += "Connection: close\r\n"
    return (h + "\r\n" + body).encode()


def status(resp):
    try:
        return int(resp.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def completion_body(n=8):
    return json.dumps({"prompt": "hello", "max_tokens": n, "temperature": 0})


def check(name, ok, detail, failures):
    print(json.dumps({"check": name, "ok": ok, **detail}), flush=True)
    if not ok:
        failures.append(name)


def check_slow(port, failures):
    socks = []
    for _ in range(16):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        socks.append(s)
    stop = threading.Event()
    answered = [0]

    def trickle():
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
        for i in range(len(head)):
            if stop.is_set():
                return
            for s in socks:
                try:
                    s.send(head[i:i + 1])
                except OSError:
                    pass
            time.sleep(0.2)

    t = threading.Thread(target=trickle)
    t.start()
    time.sleep(0.5)
    t0 = time.time()
    h = status(raw(port, req("GET", "/health", key="")))
    h_s = time.time() - t0
    t0 = time.time()
    c = status(raw(port, req("POST", "/v1/completions", completion_body())))
    c_s = time.time() - t0
    for s in socks:  # each is answered (408) and closed by the request deadline (--request-timeout 2)
        s.settimeout(6)
        try:
            data = s.recv(4096)
            answered[0] += status(data) == 408
        except OSError:
            pass
    stop.set()
    t.join()
    for s in socks:
        s.close()
    check("slow", h == 200 and c == 200 and h_s < 2 and c_s < 2 and answered[0] == 16,
          {"health": h, "health_s": round(h_s, 2), "completion": c, "completion_s": round(c_s, 2),
           "slow_answered_408": answered[0]}, failures)


def check_pipeline(port, failures):
    data = req("POST", "/v1/completions", completion_body(4), close=False) + \
        req("POST", "/v1/completions", completion_body(6), close=False) + req("GET", "/health", key="")
    out = raw(port, data, timeout=20)
    parts = out.split(b"HTTP/1.1 ")[1:]
    codes = [int(p[:3]) for p in parts]
    order = [b'"completion_tokens":4' in parts[0], b'"completion_tokens":6' in parts[1]] if len(parts) == 3 else []
    check("pipeline", codes == [200, 200, 200] and all(order), {"statuses": codes, "in_order": all(order)}, failures)


def check_caps(port, failures):
    big = raw(port, ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d"
                     "\r\n\r\n" % (KEY, MAX_BODY + 1)).encode())
    bad = raw(port, ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: -3"
                     "\r\n\r\n" % KEY).encode())
    held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(MAX_CONN)]
    for s in held:  # a request begun (not idle: idle ones would be closed to make room)
        s.send(b"GET /he")
    time.sleep(0.3)
    over = status(raw(port, req("POST", "/v1/completions", completion_body())))
    health = status(raw(port, req("GET", "/health", key="")))
    for s in held:
        s.close()
    time.sleep(0.3)
    after = status(raw(port, req("POST", "/v1/completions", completion_body())))
    check("caps", status(big) == 413 and status(bad) == 400 and over == 503 and health == 200 and after == 200,
          {"over_max_body": status(big), "bad_content_length": status(bad), "over_max_connections": over,
           "health_beyond_cap": health, "after_release": after}, failures)


def check_apikey(port, failures):
    none = status(raw(port, req("POST", "/v1/completions", completion_body(), key="")))
    wrong = status(raw(port, req("POST", "/v1/completions", completion_body(), key="nope")))
    right = status(raw(port, req("POST", "/v1/completions", completion_body())))
    health = status(raw(port, req("GET", "/health", key="")))
    check("apikey", (none, wrong, right, health) == (401, 401, 200, 200),
          {"no_key": none, "wrong_key": wrong, "key": right, "health_no_key": health}, failures)


def metric(port, name, label=""):
    text = raw(port, req("GET", "/metrics")).decode("utf-8", "replace")
    total = 0.0
    for line in text.split("\n"):
        if line.startswith(name) and (line[len(name):len(name) + 1] in (" ", "{")) and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anelab", required=True)
    ap.add_argument("--rounds", type=int, default=3, help="abusive load rounds (the first is the warm-up)")
    ap.add_argument("--skip-attack", action="store_true", help="no serve_attack.py phases (quicker)")
    ap.add_argument("--work", default="")
    a = ap.parse_args()
    if not os.path.exists("/proc/self/status"):
        print("serve_robust_batched: no /proc (VmRSS is Linux only): skipped")
        return 77
    work = a.work or tempfile.mkdtemp(prefix="serve_robust_")
    os.makedirs(work, exist_ok=True)
    tok = os.path.join(work, "tok.json")
    shape = dict(SHAPE, vocab_size=sc.write_tokenizer(tok, "qwen2.5"))
    model = os.path.join(work, "random-robust.gguf")
    r = subprocess.run([a.anelab, "convert", "--random", "qwen2.5-0.5b", model, "--dtype", "fp16", "--seed", "38",
                        "--shape", json.dumps(shape), "--tokenizer", tok], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("convert --random failed: " + r.stderr.strip())
    srv = sc.Server(a.anelab, model, work, "robust",
                    extra=["--api-key", KEY, "--request-timeout", "2", "--max-connections", str(MAX_CONN),
                           "--max-body", str(MAX_BODY), "--max-buffered", str(MAX_BUFFERED),
                           "--parse-budget", str(PARSE_BUDGET)])
    port = srv.port
    failures = []
    rss = RssSeries(srv.p.pid)
    try:
        rss.mark("start")
        check_apikey(port, failures)
        check_pipeline(port, failures)
        check_caps(port, failures)
        check_slow(port, failures)
        multi0 = metric(port, "anelab_batch_steps_by_size_total") - \
            metric(port, "anelab_batch_steps_by_size_total", 'size="1"')
        after_rounds = []
        for k in range(a.rounds):
            r = subprocess.run([sys.executable, os.path.join(HERE, "serve_load_test.py"), "--port", str(port),
                                "--pid", str(srv.p.pid), "--clients", "32", "--requests", "96", "--max-tokens", "24",
                                "--retries", "2", "--abuse", "16", "--api-key", KEY, "--max-rss-growth-mib", "64"],
                               capture_output=True, text=True)
            line = (r.stdout.strip().split("\n") or [""])[-1]
            try:
                s = json.loads(line)
            except ValueError:
                s = {"errors": [r.stdout[-300:] + r.stderr[-300:]]}
            time.sleep(1.5)  # deadlines of the abusers' sockets (2 s) pass, the memory they held goes back
            rss.mark("load round %d" % k)
            after_rounds.append(rss.now())
            check("load round %d" % k, r.returncode == 0,
                  {"status": s.get("status"), "ok_per_s": s.get("ok_per_s"), "p99_ms": s.get("latency_ms_200", {})
                   .get("p99"), "abuse_turns": s.get("abuse_turns"), "errors": s.get("errors"),
                   "rss_mib_after": mib(after_rounds[-1])}, failures)
        multi1 = metric(port, "anelab_batch_steps_by_size_total") - \
            metric(port, "anelab_batch_steps_by_size_total", 'size="1"')
        check("batched", multi1 - multi0 > 10, {"steps_of_2_or_more_rows": int(multi1 - multi0),
                                                "decode_tokens": int(metric(port, "anelab_batch_decode_tokens_total")),
                                                "steps": int(metric(port, "anelab_batch_steps_total"))}, failures)
        growth = [mib(x - after_rounds[0]) for x in after_rounds[1:]]
        check("rss flat over load rounds", all(g < 6.0 for g in growth),
              {"rss_mib_after_each_round": [mib(x) for x in after_rounds], "growth_after_warmup_mib": growth,
               "bound_mib": 6.0}, failures)
        if not a.skip_attack:
            t_attack, before = time.time() - rss.t0, rss.now()
            r = subprocess.run([sys.executable, os.path.join(HERE, "serve_attack.py"), "--port", str(port), "--pid",
                                str(srv.p.pid), "--api-key", KEY], capture_output=True, text=True)
            for line in r.stdout.strip().split("\n"):
                print(line, flush=True)
            time.sleep(1.0)
            after = rss.now()
            ctx, layers, kv = SHAPE["max_seq_len"], SHAPE["n_layers"], SHAPE["n_kv_heads"] * SHAPE["head_dim"]
            kv_mib = 4 * layers * ctx * kv * 2 * 4 / 2.0 ** 20
            bound = (MAX_BUFFERED + (MAX_CONN + 32) * 32 * 1024 + 32 * PARSE_BUDGET + (1 << 20)) / 2.0 ** 20 + \
                kv_mib + 8
            peak = rss.peak_since(t_attack)
            check("attack", r.returncode == 0 and mib(peak - before) <= bound and mib(after - before) <= 8.0,
                  {"rss_mib_before": mib(before), "rss_mib_peak": mib(peak), "rss_mib_after": mib(after),
                   "peak_bound_mib": round(bound, 1), "return_bound_mib": 8.0, "attack_exit": r.returncode},
                  failures)
        rss.mark("end")
    finally:
        rss.stop()
        srv.stop()
    pts = rss.points
    step = max(1, len(pts) // 40)
    print(json.dumps({"rss_series_mib": [[round(t, 1), mib(k)] for t, k in pts[::step]],
                      "marks": [[n, t, mib(k)] for n, t, k in rss.marks]}))
    print("%s: %d failures%s" % ("FAILED" if failures else "ok", len(failures),
                                 (" (" + ", ".join(failures) + ")") if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

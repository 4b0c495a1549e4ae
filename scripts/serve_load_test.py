#!/usr/bin/python3
"""Bounded load test for `anelab serve` (loopback only, standard library only).

CLIENTS threads send REQUESTS requests in all (a 503 may be retried --retries times; the last answer
counts; latency includes the retries) (a mix of /v1/completions and /v1/chat/completions -- completions
only when /v1/models says the model has no chat template, as base models like stories260K -- a quarter
of them streamed). Every answer must be 200 or 503 (queue full); anything else, a transport
error, a dead server, or RSS growth above --max-rss-growth-mib fails the run (exit 1).
Prints one JSON summary line: requests/s, latency percentiles of the 200s, status counts, RSS before/after.
With --abuse N, N more threads attack the server while the load runs (sockets that trickle a request a
byte at a time, garbage, a huge Content-Length, streams left mid-way, pipelined requests); the normal
clients' rules stay the same. --api-key KEY sends "Authorization: Bearer KEY".

  scripts/serve_load_test.py --port 8080 --pid $(pgrep -n anelab) --clients 64 --requests 320 [--abuse 16]

With --bench 1,8 it measures throughput instead: for each client count C, C threads each send --bench-rounds
streamed greedy requests of --max-tokens tokens one after another (distinct prompts), and it prints one JSON line
with, per C, the aggregate decode rate (generated tokens of all clients / wall time of the phase), the time to first
token (p50, p99, max) and the ratio of each rate to the first C's (continuous batching: 8 clients share steps); with
anelab, server_s splits each phase's time from /metrics: the engine's decode steps, its prompt chunks, and the time
between steps (anelab_batch_*_seconds_total).

  scripts/serve_load_test.py --port 8080 --bench 1,8 --max-tokens 128 --bench-rounds 2
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time


def rss_kib(pid):
    if not pid:
        return 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


CHAT = True  # set in main() from /v1/models: base models answer chat requests with 400 no_chat_template
HEADERS = {"Content-Type": "application/json"}  # + Authorization with --api-key


def abuse_once(host, port, k):
    """One hostile turn; what the server answers is not checked here (test_http_robust.cpp does)."""
    s = socket.create_connection((host, port), timeout=5)
    try:
        kind = k % 5
        if kind == 0:  # trickle a request head, then leave
            for ch in b"POST /v1/completions HTTP/1.1\r\nContent-Le":
                s.send(bytes([ch]))
                time.sleep(0.02)
        elif kind == 1:
            s.sendall(bytes(random.Random(k).randrange(256) for _ in range(2000)) + b"\r\n\r\n")
            s.recv(4096)
        elif kind == 2:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n")
            s.recv(4096)
        elif kind == 3:  # a stream left after its first bytes
            body = json.dumps({"prompt": "Once", "max_tokens": 200, "stream": True}).encode()
            auth = "".join("%s: %s\r\n" % kv for kv in HEADERS.items())
            s.sendall(b"POST /v1/completions HTTP/1.1\r\n" + auth.encode() +
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            s.recv(256)
        else:
            s.sendall(b"GET /health HTTP/1.1\r\n\r\n" * 20 + b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
            while s.recv(65536):
                pass
    except OSError:
        pass
    finally:
        s.close()


def body_for(i, max_tokens):
    rng = random.Random(i)
    stream = i % 4 == 3
    common = {"max_tokens": rng.randint(4, max_tokens), "temperature": 0.8, "seed": 1 + i, "stream": stream}
    if i % 2 == 0 or not CHAT:
        return "/v1/completions", dict(common, prompt=rng.choice(["Once upon a time", "The cat", "Lily and Tom"]))
    return "/v1/chat/completions", dict(common, messages=[{"role": "user", "content": "Tell me a story %d" % i}])


def one_request(host, port, i, max_tokens, timeout, retries=0):
    """One logical request; a 503 is retried up to `retries` times after a short jittered pause."""
    for attempt in range(retries + 1):
        r = one_attempt(host, port, i, max_tokens, timeout)
        if r[0] != 503 or attempt == retries:
            return r
        time.sleep(random.uniform(0.05, 0.25))


def one_attempt(host, port, i, max_tokens, timeout):
    path, body = body_for(i, max_tokens)
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body), headers=HEADERS)
        resp = conn.getresponse()
        data = resp.read()
        status = resp.status
        if status == 200:
            if body["stream"]:
                if b"data: [DONE]" not in data:
                    return ("bad-stream", time.perf_counter() - t0)
            else:
                json.loads(data)["usage"]["total_tokens"]
        elif status == 503 and resp.getheader("Retry-After") is None:
            return ("503-without-retry-after", time.perf_counter() - t0)
        return (status, time.perf_counter() - t0)
    finally:
        conn.close()


def bench_request(host, port, i, max_tokens, timeout, extra=None):
    """One streamed greedy request: (time to first token s, generated tokens, total s)."""
    words = ["time", "cat", "river", "house", "green", "small", "happy", "north", "stone", "light"]
    prompt = "Story %d: the %s %s and the %s" % (i, words[i % 10], words[(i * 3 + 1) % 10], words[(i * 7 + 2) % 10])
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update(extra or {})
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers=HEADERS)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError("status %d: %s" % (resp.status, resp.read()[:200]))
        ttft, tokens = None, None
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ttft is None and ev.get("choices") and ev["choices"][0].get("text"):
                ttft = time.perf_counter() - t0
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
        total = time.perf_counter() - t0
        return (ttft if ttft is not None else total, tokens or 0, total)
    finally:
        conn.close()


BATCH_SECONDS = ("decode", "prefill", "between")


def batch_seconds(host, port):
    """anelab's stepping-thread seconds from /metrics (anelab_batch_<what>_seconds_total), or None (another server)."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/metrics", headers=HEADERS)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace") if resp.status == 200 else ""
        conn.close()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        for w in BATCH_SECONDS:
            if line.startswith("anelab_batch_%s_seconds_total " % w):
                out[w] = float(line.split()[1])
    return out if len(out) == len(BATCH_SECONDS) else None


def bench(a):
    phases = []
    for c in [int(x) for x in a.bench.split(",")]:
        before = batch_seconds(a.host, a.port)
        results, lock = [], threading.Lock()

        def client(k):
            for r in range(a.bench_rounds):
                res = bench_request(a.host, a.port, 1000 * c + k * a.bench_rounds + r, a.max_tokens, a.timeout,
                                    json.loads(a.extra_body))
                with lock:
                    results.append(res)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(c)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        tokens = sum(r[1] for r in results)
        ttft = [r[0] * 1e3 for r in results]
        phases.append({"clients": c, "requests": len(results), "tokens": tokens,
                       "short": sum(1 for r in results if r[1] < a.max_tokens), "wall_s": round(wall, 3),
                       "decode_tok_s": round(tokens / wall, 2),
                       "ttft_ms": {"p50": round(percentile(ttft, 50), 1), "p99": round(percentile(ttft, 99), 1),
                                   "max": round(max(ttft), 1)}})
        after = batch_seconds(a.host, a.port)
        if before and after:  # the phase's wall split: the engine's decode steps and prefills, the rest between steps
            phases[-1]["server_s"] = {w: round(after[w] - before[w], 3) for w in BATCH_SECONDS}
    for p in phases:
        p["ratio_to_first"] = round(p["decode_tok_s"] / phases[0]["decode_tok_s"], 3)
    print(json.dumps({"bench": phases, "max_tokens": a.max_tokens, "rounds": a.bench_rounds}))


def percentile(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, default=0, help="server pid (for VmRSS)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=320)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--max-rss-growth-mib", type=float, default=64)
    ap.add_argument("--retries", type=int, default=0, help="retry a 503 this often (50-250 ms pause)")
    ap.add_argument("--abuse", type=int, default=0, help="hostile threads while the load runs")
    ap.add_argument("--api-key", default="", help="sent as 'Authorization: Bearer KEY'")
    ap.add_argument("--bench", default="", help="client counts, e.g. 1,8: measure decode tok/s and time to first token")
    ap.add_argument("--bench-rounds", type=int, default=2, help="--bench: requests per client, one after another")
    ap.add_argument("--extra-body", default="{}",
                    help='--bench: JSON fields added to each request (e.g. \'{"ignore_eos": true}\' for llama-server)')
    a = ap.parse_args()
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("serve_load_test: loopback only")

    global CHAT
    if a.api_key:
        HEADERS["Authorization"] = "Bearer " + a.api_key
    c = http.client.HTTPConnection(a.host, a.port, timeout=10)
    c.request("GET", "/v1/models", headers=HEADERS)
    CHAT = json.loads(c.getresponse().read())["data"][0].get("chat_template", "qwen2.5") is not None
    if a.bench:
        bench_request(a.host, a.port, 0, 8, a.timeout)  # warm-up
        return bench(a)
    for i in range(3):  # warm-up (first requests allocate per-worker buffers)
        one_request(a.host, a.port, -1 - i, a.max_tokens, a.timeout)
    rss0 = rss_kib(a.pid)
    results, errors, lock = [], [], threading.Lock()
    counter = iter(range(a.requests))

    def worker():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            try:
                r = one_request(a.host, a.port, i, a.max_tokens, a.timeout, a.retries)
            except Exception as e:
                r = ("%s: %s" % (type(e).__name__, e), 0.0)
            with lock:
                results.append(r)

    done = threading.Event()
    abuse_turns = [0]

    def abuser(j):
        k = j
        while not done.is_set():
            abuse_once(a.host, a.port, k)
            k += a.abuse
            with lock:
                abuse_turns[0] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(a.clients)]
    abusers = [threading.Thread(target=abuser, args=(j,)) for j in range(a.abuse)]
    for t in threads + abusers:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done.set()
    for t in abusers:
        t.join()
    time.sleep(0.2)
    rss1 = rss_kib(a.pid)

    counts = {}
    for s, _ in results:
        counts[str(s)] = counts.get(str(s), 0) + 1
    ok_lat = [dt * 1e3 for s, dt in results if s == 200]
    health = None
    try:
        c = http.client.HTTPConnection(a.host, a.port, timeout=10)
        c.request("GET", "/health")
        health = json.loads(c.getresponse().read())
    except Exception as e:
        errors.append("health: %s" % e)
    summary = {
        "clients": a.clients, "requests": len(results), "wall_s": round(wall, 3),
        "requests_per_s": round(len(results) / wall, 1), "ok_per_s": round(len(ok_lat) / wall, 1),
        "status": counts,
        "latency_ms_200": {"p50": round(percentile(ok_lat, 50), 1), "p90": round(percentile(ok_lat, 90), 1),
                           "p99": round(percentile(ok_lat, 99), 1), "max": round(max(ok_lat or [0]), 1)},
        "rss_kib_before": rss0, "rss_kib_after": rss1, "health": health, "abuse_turns": abuse_turns[0],
    }
    bad = {k: v for k, v in counts.items() if k not in ("200", "503")}
    if bad:
        errors.append("unexpected answers: %s" % bad)
    if not ok_lat:
        errors.append("no request succeeded")
    if a.pid and (rss1 - rss0) / 1024.0 > a.max_rss_growth_mib:
        errors.append("RSS grew by %.1f MiB" % ((rss1 - rss0) / 1024.0))
    summary["errors"] = errors
    print(json.dumps(summary))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Resource attack on a running `anelab serve` (loopback only, standard library only): issue 34's probes.

  burst      42 concurrent 0.7-1 MB JSON bodies with the api key (wide objects near the element limit, integer
             arrays over it, long prompt strings): RSS before / peak / after (VmRSS sampled every 2 ms, and
             VmHWM), status counts
  partial    200 sockets each announce a 1 MiB body without a key, send 1 MiB - 1 KiB of it and stall: RSS
             before / peak / after (the server answers them 408 at --request-timeout)
  abandon    17 non-streamed requests (max_tokens 500) sent and their sockets closed at once, then 15 short
             ones in parallel: seconds from their admission until the server is idle again (its wasted generation), cancelled
             count, completion tokens generated for the abandoned ones, short ones answered 200
  sockets    one address holds 300 sockets (half trickle a byte every 0.5 s, half idle; reopened when the
             server closes them) while /health is probed 300 times: success rate

Prints one JSON line per phase. Exit status 1 when a phase misses its bound (--rss-bound-mib for burst and
partial peak - before, --rss-return-mib for after - before, 1 s of wasted generation, 99 % of /health).

  scripts/serve_attack.py --port 8080 --pid $(pgrep -n anelab) --api-key K [--phases burst,partial,abandon,sockets]
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class RssSampler:
    """Largest VmRSS of pid seen every 2 ms while running."""

    def __init__(self, pid):
        self.pid, self.peak, self.done = pid, 0, False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.done:
            self.peak = max(self.peak, status_kib(self.pid, "VmRSS"))
            time.sleep(0.002)

    def stop(self):
        self.done = True
        self.t.join()
        return self.peak


def mib(kib):
    return round(kib / 1024.0, 1)


def post(port, path, body, key, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = "Bearer " + key
        c.request("POST", path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    except OSError as e:
        return type(e).__name__, b""
    finally:
        c.close()


def get(port, path, timeout=5, key=""):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path, headers={"Authorization": "Bearer " + key} if key else {})
        r = c.getresponse()
        return r.status, r.read()
    except OSError as e:
        return type(e).__name__, b""
    finally:
        c.close()


def health(port):
    st, body = get(port, "/health")
    return json.loads(body) if st == 200 else {}


def wait_idle(port, limit=120):
    t0 = time.time()
    while time.time() - t0 < limit:
        h = health(port)
        if h and h.get("running", 1) == 0 and h.get("waiting", 1) == 0:
            return time.time() - t0
        time.sleep(0.02)
    return None


def counts(statuses):
    out = {}
    for s in statuses:
        out[str(s)] = out.get(str(s), 0) + 1
    return out


def big_body(i, rng):
    size = rng.randint(700000, 1000000)
    kind = i % 3
    if kind == 0:  # a wide object: 24 bytes and 3 values/keys per member (under the 131072 limit at 1 MB)
        members = []
        n = 0
        while n < size - 40:
            m = '"k%07d_padding":[]' % len(members)
            members.append(m)
            n += len(m) + 1
        return '{"prompt": "Once", "max_tokens": 1, "metadata": {%s}}' % ",".join(members)
    if kind == 1:  # token ids: 2 bytes per value, over the element limit
        return '{"prompt": [%s], "max_tokens": 1}' % ",".join(["1"] * (size // 2))
    return json.dumps({"prompt": "Once upon a time " * (size // 17), "max_tokens": 1})


def phase_burst(a):
    rng = random.Random(1)
    bodies = [big_body(i, rng).encode() for i in range(42)]
    time.sleep(0.5)
    before, hwm0 = status_kib(a.pid, "VmRSS"), status_kib(a.pid, "VmHWM")
    sampler = RssSampler(a.pid)
    statuses = [None] * len(bodies)
    gate = threading.Barrier(len(bodies))

    def one(i):
        gate.wait()
        statuses[i] = post(a.port, "/v1/completions", bodies[i], a.api_key)[0]

    t0 = time.time()
    ths = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    secs = time.time() - t0
    time.sleep(1.0)
    peak = sampler.stop()
    after, hwm = status_kib(a.pid, "VmRSS"), status_kib(a.pid, "VmHWM")
    return {"phase": "burst", "bodies": len(bodies), "mb_sent": round(sum(map(len, bodies)) / 1e6, 1),
            "seconds": round(secs, 2), "statuses": counts(statuses), "rss_before_mib": mib(before),
            "rss_peak_mib": mib(max(peak, after)), "vmhwm_before_mib": mib(hwm0), "vmhwm_after_mib": mib(hwm),
            "rss_after_mib": mib(after), "ok": (max(peak, after) - before) / 1024.0 <= a.rss_bound_mib
            and (after - before) / 1024.0 <= a.rss_return_mib}


def phase_partial(a):
    time.sleep(0.5)
    before = status_kib(a.pid, "VmRSS")
    sampler = RssSampler(a.pid)
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n"
    chunk = b" " * (1048576 - 1024)
    answers = [None] * 200

    def one(i):
        try:
            s = socket.create_connection(("127.0.0.1", a.port), timeout=30)
        except OSError as e:
            answers[i] = type(e).__name__
            return
        try:
            s.sendall(head)
            s.sendall(chunk)  # blocks while the server does not read (no room in its body budget)
        except OSError:
            pass
        try:
            data = s.recv(4096)
            answers[i] = int(data[9:12]) if data.startswith(b"HTTP/1.1 ") else "closed"
        except OSError as e:
            answers[i] = type(e).__name__
        s.close()

    t0 = time.time()
    ths = [threading.Thread(target=one, args=(i,)) for i in range(200)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    secs = time.time() - t0
    time.sleep(1.0)
    peak = sampler.stop()
    after = status_kib(a.pid, "VmRSS")
    return {"phase": "partial", "sockets": 200, "seconds": round(secs, 2), "answers": counts(answers),
            "rss_before_mib": mib(before), "rss_peak_mib": mib(peak), "rss_after_mib": mib(after),
            "ok": (peak - before) / 1024.0 <= a.rss_bound_mib and (after - before) / 1024.0 <= a.rss_return_mib}


def metric(port, name, key):
    st, body = get(port, "/metrics", key=key)
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def phase_abandon(a):
    wait_idle(a.port)
    h0 = health(a.port)
    tok0 = metric(a.port, "anelab_completion_tokens_total", a.api_key)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 500, "temperature": 1.0}).encode()
    auth = b"Authorization: Bearer %s\r\n" % a.api_key.encode() if a.api_key else b""
    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
           b"Content-Length: %d\r\n\r\n" % len(body) + body)
    for _ in range(17):
        s = socket.create_connection(("127.0.0.1", a.port), timeout=5)
        s.sendall(raw)
        s.close()  # fire and forget
    t0 = time.time()
    while time.time() - t0 < 5:  # until the server has taken all 17 (admitted or refused)
        h = health(a.port)
        if h and h["admitted"] + h["rejected"] - h0["admitted"] - h0["rejected"] >= 17:
            break
        time.sleep(0.005)
    wasted = wait_idle(a.port)
    h1 = health(a.port)
    tok1 = metric(a.port, "anelab_completion_tokens_total", a.api_key)
    short = json.dumps({"prompt": "Once", "max_tokens": 8}).encode()
    statuses = [None] * 15

    def one(i):
        statuses[i] = post(a.port, "/v1/completions", short, a.api_key, timeout=10)[0]

    ths = [threading.Thread(target=one, args=(i,)) for i in range(15)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return {"phase": "abandon", "abandoned": 17, "seconds_until_idle": round(wasted, 3) if wasted is not None else None,
            "cancelled": h1.get("cancelled", 0) - h0.get("cancelled", 0),
            "completed": h1.get("completed", 0) - h0.get("completed", 0),
            "tokens_generated_for_abandoned": int(tok1 - tok0), "short_ok": statuses.count(200),
            "short_statuses": counts(statuses), "since_send_s": round(time.time() - t0, 2),
            "ok": wasted is not None and wasted < 1.0 and statuses.count(200) == 15}


def phase_sockets(a):
    stop = threading.Event()
    held = []
    lock = threading.Lock()

    def holder(k):
        trickle = k % 2 == 0
        s = None
        while not stop.is_set():
            try:
                if s is None:
                    s = socket.create_connection(("127.0.0.1", a.port), timeout=2)
                    s.setblocking(False)
                    with lock:
                        held.append(1)
                if trickle:
                    s.send(b"P")
                else:
                    if s.recv(4096) == b"":
                        raise OSError("closed")
            except BlockingIOError:
                pass
            except OSError:
                if s is not None:
                    s.close()
                s = None
            stop.wait(0.5)
        if s is not None:
            s.close()

    ths = [threading.Thread(target=holder, args=(k,), daemon=True) for k in range(300)]
    for t in ths:
        t.start()
    time.sleep(1.0)
    statuses = []
    t0 = time.time()
    for _ in range(300):
        statuses.append(get(a.port, "/health", timeout=2)[0])
        time.sleep(0.03)
    secs = time.time() - t0
    stop.set()
    for t in ths:
        t.join()
    ok = statuses.count(200)
    return {"phase": "sockets", "held_sockets": 300, "connects": len(held), "probes": len(statuses),
            "health_200": ok, "rate": round(ok / len(statuses), 4), "statuses": counts(statuses),
            "seconds": round(secs, 1), "ok": ok >= 0.99 * len(statuses)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pid", type=int, required=True, help="the server's pid (RSS from /proc/PID/status)")
    p.add_argument("--api-key", default="")
    p.add_argument("--phases", default="burst,partial,abandon,sockets")
    p.add_argument("--rss-bound-mib", type=float, default=80.0, help="peak - before allowed (docs/server.md)")
    p.add_argument("--rss-return-mib", type=float, default=8.0, help="after - before allowed")
    a = p.parse_args()
    phases = {"burst": phase_burst, "partial": phase_partial, "abandon": phase_abandon, "sockets": phase_sockets}
    failed = False
    for name in a.phases.split(","):
        if name not in phases:
            sys.exit("serve_attack: unknown phase '%s' (burst, partial, abandon, sockets)" % name)
        r = phases[name](a)
        print(json.dumps(r), flush=True)
        failed |= not r["ok"]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

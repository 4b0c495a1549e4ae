#!/usr/bin/env python3
"""Time to first token of a request that shares a long prefix with an earlier one (issue 38: "a request sharing a
1024-token prefix with an earlier one: time to first token <= 15 % of the first's"), against a running `anelab serve`
(or any OpenAI-compatible server that takes token-id prompts and answers usage.prompt_tokens_details.cached_tokens).

Per round: a fresh random prefix of --prefix token ids (so nothing of it is cached yet), then request A = prefix + tail A
and request B = prefix + tail B, one after the other, each streamed with max_tokens 1: its time to first token is the
client's time from sending to the first streamed token. Prints one JSON line: the TTFTs of A and B per round, the
cached tokens of B, and the median ratio B / A.
"""
import argparse
import http.client
import json
import random
import statistics
import time


def ttft(host, port, ids, timeout, extra):
    body = dict(prompt=ids, max_tokens=1, temperature=0, stream=True, cache_prompt=True,
                stream_options={"include_usage": True})
    body.update(extra)
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"[prefix_ttft] HTTP {r.status}: {r.read()[:300]!r}")
    first, cached = None, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if first is None and ev.get("choices"):
            first = (time.perf_counter() - t0) * 1e3
        u = ev.get("usage") or {}
        if u:
            cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", cached)
    c.close()
    return first, cached


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prefix", type=int, default=1024, help="shared prefix length in tokens")
    ap.add_argument("--tail", type=int, default=8, help="tokens after the prefix, different in A and B")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=0, help="ids drawn below this (0: the server's vocab_size)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--extra-body", default="{}", help="JSON merged into each request")
    a = ap.parse_args()
    extra = json.loads(a.extra_body)
    vocab = a.vocab
    if not vocab:
        c = http.client.HTTPConnection(a.host, a.port, timeout=a.timeout)
        c.request("GET", "/v1/models")
        vocab = json.loads(c.getresponse().read())["data"][0].get("vocab_size", 32000)
    rng = random.Random(38)
    hi = min(vocab, 150000) - 1
    firsts, seconds, cached, ratios = [], [], [], []
    for _ in range(a.rounds):
        prefix = [rng.randint(100, hi) for _ in range(a.prefix)]
        ta, _ = ttft(a.host, a.port, prefix + [rng.randint(100, hi) for _ in range(a.tail)], a.timeout, extra)
        tb, cb = ttft(a.host, a.port, prefix + [rng.randint(100, hi) for _ in range(a.tail)], a.timeout, extra)
        firsts.append(round(ta, 1)), seconds.append(round(tb, 1)), cached.append(cb), ratios.append(tb / ta)
    print(json.dumps({"prefix": a.prefix, "tail": a.tail, "first_ttft_ms": firsts, "second_ttft_ms": seconds,
                      "second_cached_tokens": cached, "ratio_median": round(statistics.median(ratios), 4),
                      "ratio_max": round(max(ratios), 4), "target": 0.15,
                      "holds": max(ratios) <= 0.15}))


if __name__ == "__main__":
    main()

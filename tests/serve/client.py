#!/usr/bin/python3
"""Minimal standard-library client for `anelab serve` tests (http.client only).

Sends one request and prints a JSON summary on stdout:
  {"status", "headers", "body" (parsed JSON or raw text), "events" (SSE data payloads, parsed),
   "done" (saw data: [DONE]), "text" (streamed text concatenated), "error" (client-side failure)}
--disconnect-after N closes the connection after N SSE events (to test cancellation).
"""
import argparse
import http.client
import json
import sys


def stream_text(events):
    out = []
    for e in events:
        for c in e.get("choices", []) if isinstance(e, dict) else []:
            if "text" in c:
                out.append(c["text"])
            elif isinstance(c.get("delta"), dict):
                out.append(c["delta"].get("content") or "")
    return "".join(out)


def run(host, port, method, path, body, disconnect_after, timeout):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    out = {"status": resp.status, "headers": {k.lower(): v for k, v in resp.getheaders()},
           "events": [], "done": False}
    if resp.getheader("Content-Type", "").startswith("text/event-stream"):
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.decode("utf-8").rstrip("\n")
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                out["done"] = True
                break
            out["events"].append(json.loads(data))
            if disconnect_after and len(out["events"]) >= disconnect_after:
                conn.sock.close()
                break
        out["text"] = stream_text(out["events"])
    else:
        raw = resp.read().decode("utf-8", errors="replace")
        try:
            out["body"] = json.loads(raw)
        except ValueError:
            out["body"] = raw
    conn.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--method", default="POST")
    ap.add_argument("--path", default="/v1/completions")
    ap.add_argument("--body", help="request body (text, sent as is)")
    ap.add_argument("--body-file")
    ap.add_argument("--disconnect-after", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    body = a.body
    if a.body_file:
        with open(a.body_file, "rb") as f:
            body = f.read()
    try:
        out = run(a.host, a.port, a.method, a.path, body, a.disconnect_after, a.timeout)
    except Exception as e:  # reported, not raised: the test decides
        out = {"error": "%s: %s" % (type(e).__name__, e)}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

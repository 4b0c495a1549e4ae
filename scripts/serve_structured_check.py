#!/usr/bin/python3
"""Structured output of `anelab serve` at scale (issue 38), standard library only.

Makes random-weight models (`anelab convert --random qwen2.5-0.5b` at a small --shape) over byte-level tokenizers
written here (256 byte tokens, one merge of two spaces, plus each chat template's control tokens), starts `anelab serve --parallel
4` on each and checks:

  schemas   COUNT seeded json_schema requests (/v1/completions, temperature 1): every answer parses and validates,
            by the validator below (written from the JSON Schema definitions, not from the converter), against its
            schema; and schemas with keywords the converter refuses get a 400 that names the keyword.
  tools     for each template (qwen2.5, qwen3, llama3, gemma3): chats with two tools and tool_choice "required" or a
            named function, non-streamed and streamed: each answer is OpenAI tool_calls (finish_reason
            "tool_calls") whose arguments are JSON valid against the tool's parameters.

Termination: every token of these vocabularies is at least one byte of the answer (the control tokens are masked
by the grammar), and every generated schema has a finite longest sentence (strings have maxLength, arrays maxItems,
numbers at most 38 characters in the grammar, no recursion): max_tokens is that length + 1, so a grammar that can
end always ends before it. An answer cut by max_tokens (finish_reason "length") is a failure, never a pass.

Keywords the generator uses: type (one or a list), enum, const, properties, required, additionalProperties false,
items, prefixItems (with items false), minItems, maxItems, minLength, maxLength, minimum / maximum /
exclusiveMinimum / exclusiveMaximum on integers, anyOf, oneOf (branches of disjoint types), allOf of one schema,
$ref to #/$defs. Refused by the converter (checked to be a 400): ranges on numbers or untyped values, multipleOf,
pattern, format, uniqueItems, not, patternProperties, minProperties.

  scripts/serve_structured_check.py --anelab build/bin/anelab [--count 200] [--tool-rounds 3] [--work DIR]
Exit status 0 when every check holds, 1 otherwise (each failure printed on one line).
"""
import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

# ---------------------------------------------------------------- tokenizers and models


def bytes_to_unicode():
    """GPT-2's byte -> printable code point table (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


TEMPLATE_TOKENS = {  # (special, non-special added tokens) that chat_template_for looks for, per family
    "none": ([], []),
    "qwen2.5": (["<|im_start|>", "<|im_end|>"], ["<tool_call>", "</tool_call>"]),
    "qwen3": (["<|im_start|>", "<|im_end|>", "<think>", "</think>"], ["<tool_call>", "</tool_call>"]),
    "llama3": (["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], []),
    "gemma3": (["<bos>", "<start_of_turn>", "<end_of_turn>"], []),
}


def write_tokenizer(path, family):
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    sp = table[ord(" ")]
    vocab[sp + sp] = 256  # one merge (GGUF wants some): two spaces, still at least one byte per token
    special, plain = TEMPLATE_TOKENS[family]
    added = []
    for i, t in enumerate(["<|endoftext|>"] + special + plain):
        added.append({"id": 257 + i, "content": t, "special": t not in plain})
    doc = {"model": {"type": "BPE", "vocab": vocab, "merges": [sp + " " + sp]}, "added_tokens": added,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}}
    with open(path, "w") as f:
        json.dump(doc, f)
    return 257 + len(added)


def make_model(anelab, work, family):
    tok = os.path.join(work, "tok-%s.json" % family)
    vocab = write_tokenizer(tok, family)
    model = os.path.join(work, "random-%s.gguf" % family)
    shape = {"dim": 64, "hidden_dim": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,
             "vocab_size": vocab, "max_seq_len": 4096}
    r = subprocess.run([anelab, "convert", "--random", "qwen2.5-0.5b", model, "--dtype", "fp16", "--seed", "38",
                        "--shape", json.dumps(shape), "--tokenizer", tok], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("convert --random failed: " + r.stderr.strip())
    return model


class Server:
    def __init__(self, anelab, model, work, tag, extra=(), parallel=4):
        self.port_file = os.path.join(work, "port-%s" % tag)
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.log = open(os.path.join(work, "serve-%s.log" % tag), "w")
        self.p = subprocess.Popen([anelab, "serve", "--model", model, "--backend", "cpu", "--parallel", str(parallel),
                                   "--threads", "1", "--queue", "64", "--max-tokens-cap", "4096", "--port", "0",
                                   "--port-file", self.port_file, "--no-log", "--warmup", "0"] + list(extra),
                                  stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            if os.path.exists(self.port_file) and open(self.port_file).read().strip():
                self.port = int(open(self.port_file).read())
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        sys.exit("server did not start (%s): see %s" % (tag, self.log.name))

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.log.close()


def post(port, path, body, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode("utf-8", "replace")
    c.close()
    return r.status, data


def post_stream(port, path, body, timeout=300):
    """The SSE data payloads (parsed) of a streamed request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    events = []
    for raw in r.read().decode("utf-8", "replace").split("\n"):
        if raw.startswith("data: ") and raw[6:] != "[DONE]":
            events.append(json.loads(raw[6:]))
    c.close()
    return r.status, events

# ---------------------------------------------------------------- the validator (JSON Schema's meanings)


def is_int(v):
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


def json_equal(a, b):
    """JSON equality: 1 == 1.0, true != 1, objects by keys, arrays in order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


TYPE_CHECK = {
    "string": lambda v: isinstance(v, str),
    "integer": is_int,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def valid(v, s, root):
    """Whether value v satisfies schema s (the keywords the generator uses); $ref resolved in root."""
    if isinstance(s, bool):
        return s
    if "$ref" in s:
        name = s["$ref"].split("/")[-1]
        return valid(v, root["$defs"][name], root)
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(TYPE_CHECK[t](v) for t in types):
            return False
    if "const" in s and not json_equal(v, s["const"]):
        return False
    if "enum" in s and not any(json_equal(v, e) for e in s["enum"]):
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if ("minimum" in s and v < s["minimum"]) or ("maximum" in s and v > s["maximum"]) or \
                ("exclusiveMinimum" in s and v <= s["exclusiveMinimum"]) or \
                ("exclusiveMaximum" in s and v >= s["exclusiveMaximum"]):
            return False
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0) or ("maxLength" in s and len(v) > s["maxLength"]):
            return False
    if isinstance(v, dict):
        if any(k not in v for k in s.get("required", [])):
            return False
        props = s.get("properties", {})
        for k, x in v.items():
            if k in props:
                if not valid(x, props[k], root):
                    return False
            elif "additionalProperties" in s and not valid(x, s["additionalProperties"], root):
                return False
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0) or ("maxItems" in s and len(v) > s["maxItems"]):
            return False
        prefix = s.get("prefixItems", [])
        for i, x in enumerate(v):
            sub = prefix[i] if i < len(prefix) else s.get("items", True)
            if not valid(x, sub, root):
                return False
    if "anyOf" in s and not any(valid(v, b, root) for b in s["anyOf"]):
        return False
    if "oneOf" in s and sum(1 for b in s["oneOf"] if valid(v, b, root)) != 1:
        return False
    if "allOf" in s and not all(valid(v, b, root) for b in s["allOf"]):
        return False
    return True

# ---------------------------------------------------------------- the schema generator


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


class SchemaGen:
    """Seeded random schemas; longest() is the most bytes a sentence of the converter's grammar can take."""

    WORDS = ["id", "name", "kind", "size", "tags", "items", "point", "meta", "unit", "color", "score", "ok",
             "value", "list", "a", "b", "x", "y", "label", "mode", "count", "note"]

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def leaf(self):
        r = self.rng.random()
        if r < 0.22:
            s = {"type": "string", "maxLength": self.rng.randint(0, 10)}
            if self.rng.random() < 0.3:
                s["minLength"] = self.rng.randint(0, s["maxLength"])
            return s
        if r < 0.30:
            return {"type": "integer"}
        if r < 0.38:  # a range: both ends, one end, exclusive ends, fractional ends
            lo = self.rng.randint(-2000, 2000)
            hi = lo + self.rng.choice([0, 1, 9, 10, 99, 12345])
            return self.rng.choice([{"type": "integer", "minimum": lo, "maximum": hi},
                                    {"type": "integer", "minimum": lo},
                                    {"type": "integer", "maximum": hi},
                                    {"type": "integer", "exclusiveMinimum": lo - 1, "exclusiveMaximum": hi + 1},
                                    {"type": "integer", "minimum": lo - 0.5, "maximum": hi + 0.25}])
        if r < 0.52:
            return {"type": "number"}
        if r < 0.6:
            return {"type": "boolean"}
        if r < 0.64:
            return {"type": "null"}
        if r < 0.8:
            pool = ["red", "green", "blue", "m", "s", 1, 2.5, -3, None, True, False, "a b", "é"]
            return {"enum": self.rng.sample(pool, self.rng.randint(1, 5))}
        if r < 0.86:
            return {"const": self.rng.choice(["k", 7, None, [1, "x"], {"u": 1}])}
        if r < 0.93:
            return {"type": ["string", "null"], "maxLength": self.rng.randint(1, 6)}
        return {"type": ["integer", "boolean"]}

    def schema(self, depth):
        if depth <= 0:
            return self.leaf()
        r = self.rng.random()
        if r < 0.35:
            return self.obj(depth)
        if r < 0.55:
            return self.arr(depth)
        if r < 0.63:
            return {"anyOf": [self.schema(depth - 1) for _ in range(self.rng.randint(2, 3))]}
        if r < 0.70:  # oneOf over disjoint types: exactly one branch can match
            kinds = self.rng.sample([{"type": "string", "maxLength": 5}, {"type": "integer"},
                                     {"type": "boolean"}, {"type": "null"},
                                     {"type": "array", "items": {"type": "integer"}, "maxItems": 2}], 2)
            return {"oneOf": kinds}
        if r < 0.74:
            return {"allOf": [self.schema(depth - 1)]}
        return self.leaf()

    def obj(self, depth):
        keys = self.rng.sample(self.WORDS, self.rng.randint(1, 4))
        s = {"type": "object", "properties": {k: self.schema(depth - 1) for k in keys}}
        req = [k for k in keys if self.rng.random() < 0.6]
        if req:
            s["required"] = req
        if self.rng.random() < 0.5:
            s["additionalProperties"] = False
        return s

    def arr(self, depth):
        if self.rng.random() < 0.2:
            return {"type": "array", "prefixItems": [self.schema(depth - 1) for _ in range(self.rng.randint(1, 3))],
                    "items": False}
        lo = self.rng.randint(0, 2)
        return {"type": "array", "items": self.schema(depth - 1), "minItems": lo, "maxItems": lo + self.rng.randint(0, 3)}

    def make(self, i):
        depth = 1 + i % 3
        if i % 10 == 9:  # a $defs entry used through $ref (twice: one rule, two uses)
            d = self.obj(depth)
            return {"$defs": {"thing": d}, "type": "object",
                    "properties": {"first": {"$ref": "#/$defs/thing"},
                                   "more": {"type": "array", "items": {"$ref": "#/$defs/thing"}, "maxItems": 2}},
                    "required": ["first", "more"]}
        return self.obj(depth) if i % 2 == 0 else self.schema(depth)


def longest(s, root):
    """The most bytes of a sentence of json_schema_to_gbnf's grammar for s (models/grammar/json_schema.cpp)."""
    if s is True:
        raise ValueError("unbounded")
    if "$ref" in s:
        return longest(root["$defs"][s["$ref"].split("/")[-1]], root)
    if "const" in s:
        return len(compact(s["const"]).encode())
    if "enum" in s:
        return max(len(compact(e).encode()) for e in s["enum"])
    for k in ("anyOf", "oneOf"):
        if k in s:
            return max(longest(b, root) for b in s[k])
    if "allOf" in s:
        return longest(s["allOf"][0], root)
    t = s.get("type")
    if isinstance(t, list):
        return max(longest(dict(s, type=x), root) for x in t)
    if t == "string":
        return 2 + 6 * s["maxLength"]  # each character at most 6 bytes (\uXXXX)
    if t == "integer":
        lo = s.get("minimum", s.get("exclusiveMinimum", -10 ** 16))
        hi = s.get("maximum", s.get("exclusiveMaximum", 10 ** 16))
        return min(17, max(len(str(int(lo))), len(str(int(hi))), 1) + 1)  # "-" and 16 digits at most
    if t == "number":
        return 38  # "-", 16 digits, ".", 16 digits, "e-12"
    if t == "boolean":
        return 5
    if t == "null":
        return 4
    if t == "object":
        props = s.get("properties", {})
        return 2 + sum(len(compact(k).encode()) + 2 + longest(v, root) for k, v in props.items()) + \
            2 * max(0, len(props) - 1)
    if t == "array":
        if "prefixItems" in s:
            p = s["prefixItems"]
            return 2 + sum(longest(x, root) for x in p) + 2 * (len(p) - 1)
        n = s["maxItems"]
        return 2 + n * longest(s["items"], root) + 2 * max(0, n - 1)
    raise ValueError("unbounded schema: %s" % compact(s))


REFUSED = [  # (keyword, schema, what the one-line 400 must say)
    ("minimum on a number", {"type": "number", "minimum": 0}, "integers only"),
    ("maximum on a number", {"type": "number", "maximum": 9}, "integers only"),
    ("exclusiveMinimum without a type", {"exclusiveMinimum": 0}, "integers only"),
    ("multipleOf", {"type": "integer", "multipleOf": 3}, "'multipleOf'"),
    ("pattern", {"type": "string", "pattern": "^a$"}, "'pattern'"),
    ("format", {"type": "string", "format": "date"}, "'format'"),
    ("uniqueItems", {"type": "array", "uniqueItems": True}, "'uniqueItems'"),
    ("not", {"not": {"type": "null"}}, "'not'"),
    ("patternProperties", {"type": "object", "patternProperties": {}}, "'patternProperties'"),
    ("minProperties", {"type": "object", "minProperties": 1}, "'minProperties'")]

# ---------------------------------------------------------------- the checks


def keywords(s, out):
    if isinstance(s, dict):
        for k, v in s.items():
            out[k] = out.get(k, 0) + 1
            if k in ("properties", "$defs"):
                for x in v.values():
                    keywords(x, out)
            elif k in ("items", "additionalProperties", "not"):
                keywords(v, out)
            elif k in ("anyOf", "oneOf", "allOf", "prefixItems"):
                for x in v:
                    keywords(x, out)
    return out


def validator_self_test(failures):
    """The validator rejects what it must (else a broken validator would pass every answer)."""
    s = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": [1, "x", None]},
                                          "c": {"type": "array", "items": {"type": "string", "maxLength": 2},
                                                "minItems": 1, "maxItems": 2},
                                          "d": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
                                          "r": {"type": "integer", "minimum": -2, "exclusiveMaximum": 5}},
         "required": ["a"], "additionalProperties": False}
    good = [{"a": 1}, {"a": 2.0, "b": None}, {"a": -3, "c": ["ab"]}, {"a": 0, "d": 1.5}, {"a": 0, "r": -2},
            {"a": 0, "r": 4}]
    bad = [{}, {"a": 1.5}, {"a": True}, {"a": 1, "b": True}, {"a": 1, "b": "y"}, {"a": 1, "c": []},
           {"a": 1, "c": ["abc"]}, {"a": 1, "c": ["a", "b", "c"]}, {"a": 1, "d": 2}, {"a": 1, "e": 0}, [1], {"a": 0, "r": -3}, {"a": 0, "r": 5}]
    for v in good:
        if not valid(v, s, s):
            failures.append("validator self-test: rejects %s" % compact(v))
    for v in bad:
        if valid(v, s, s):
            failures.append("validator self-test: accepts %s" % compact(v))


def check_schemas(port, count, seed, failures):
    validator_self_test(failures)
    gen = SchemaGen(seed)
    jobs = []
    used = {}
    for i in range(count):
        s = gen.make(i)
        jobs.append((i, s, longest(s, s)))
        keywords(s, used)
    results = [None] * count
    lock = threading.Lock()
    queue = list(range(count))

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
            _, s, n = jobs[i]
            body = {"prompt": "{", "max_tokens": n + 1, "temperature": 1.0, "seed": 1000 + i,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "s%d" % i, "schema": s}}}
            results[i] = post(port, "/v1/completions", body)

    ts = [threading.Thread(target=worker) for _ in range(6)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.time() - t0
    ok, tokens, longest_answer = 0, 0, 0
    for i, (status, data) in enumerate(results):
        s = jobs[i][1]
        if status != 200:
            failures.append("schema %d: HTTP %d %s" % (i, status, data[:200]))
            continue
        r = json.loads(data)
        text, finish = r["choices"][0]["text"], r["choices"][0]["finish_reason"]
        tokens += r["usage"]["completion_tokens"]
        longest_answer = max(longest_answer, len(text.encode()))
        if finish != "stop":
            failures.append("schema %d: finish_reason %s (cut at max_tokens %d): %s" % (i, finish, jobs[i][2] + 1,
                                                                                        text[:120]))
            continue
        try:
            v = json.loads(text)
        except ValueError:
            failures.append("schema %d: not JSON: %r" % (i, text[:200]))
            continue
        if not valid(v, s, s):
            failures.append("schema %d: does not validate: %s against %s" % (i, text[:200], compact(s)[:300]))
            continue
        ok += 1
    refused = 0
    for kw, s, said in REFUSED:
        status, data = post(port, "/v1/completions", {"prompt": "{", "max_tokens": 8,
                                                      "response_format": {"type": "json_schema",
                                                                          "json_schema": {"name": "r", "schema": s}}})
        msg = json.loads(data).get("error", {}).get("message", "") if status == 400 else ""
        if status == 400 and said in msg and "\n" not in msg:
            refused += 1
        else:
            failures.append("refused keyword %s: HTTP %d %s" % (kw, status, data[:200]))
    print(json.dumps({"check": "schemas", "requests": count, "valid": ok, "completion_tokens": tokens,
                      "longest_answer_bytes": longest_answer, "seconds": round(secs, 2),
                      "refused_keywords": "%d/%d" % (refused, len(REFUSED)),
                      "keywords_used": dict(sorted(used.items()))}))


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "maxLength": 12},
                                          "unit": {"enum": ["c", "f"]},
                                          "days": {"type": "integer"}},
                                          "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add_items", "parameters": {"type": "object", "properties": {
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string", "maxLength": 6}, "qty": {"type": "integer"}}, "required": ["sku", "qty"]},
            "minItems": 1, "maxItems": 3},
        "note": {"type": ["string", "null"], "maxLength": 8}}, "required": ["items"]}}},
]


def call_bound(form):
    """max_tokens that any forced call fits in: the longer call object, wrapped as the template writes it."""
    worst = 0
    for t in TOOLS:
        f = t["function"]
        obj = {"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": f["parameters"]}}
        worst = max(worst, longest(obj, obj))
    return worst + (len("<tool_call>\n\n</tool_call>") if form == "tagged" else 0) + 1


def check_call(tag, calls, want, failures):
    if len(calls) != 1:
        failures.append("%s: %d tool calls" % (tag, len(calls)))
        return False
    f = calls[0].get("function", {})
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    if f.get("name") not in schemas or (want and f.get("name") != want):
        failures.append("%s: called %r" % (tag, f.get("name")))
        return False
    try:
        args = json.loads(f.get("arguments", ""))
    except ValueError:
        failures.append("%s: arguments are not JSON: %r" % (tag, f.get("arguments")))
        return False
    if not valid(args, schemas[f["name"]], schemas[f["name"]]):
        failures.append("%s: arguments do not validate: %s" % (tag, f["arguments"]))
        return False
    return True


def check_tools(port, family, rounds, failures):
    form = "json" if family in ("llama3", "gemma3") else "tagged"
    n, ok = 0, 0
    for k in range(rounds):
        for want in ("", "get_weather", "add_items"):
            choice = "required" if not want else {"type": "function", "function": {"name": want}}
            body = {"messages": [{"role": "system", "content": "Use the tools."},
                                 {"role": "user", "content": "Weather in Paris, and order 2 apples."}],
                    "tools": TOOLS, "tool_choice": choice, "max_tokens": call_bound(form), "temperature": 1.0,
                    "seed": 7 + 31 * k + len(want)}
            tag = "%s %s round %d" % (family, want or "required", k)
            status, data = post(port, "/v1/chat/completions", body)
            n += 1
            if status != 200:
                failures.append("%s: HTTP %d %s" % (tag, status, data[:200]))
            else:
                c = json.loads(data)["choices"][0]
                if c["finish_reason"] != "tool_calls":
                    failures.append("%s: finish_reason %s, content %r" % (tag, c["finish_reason"],
                                                                          c["message"].get("content")))
                elif check_call(tag, c["message"].get("tool_calls", []), want, failures):
                    ok += 1
            body["stream"] = True
            status, events = post_stream(port, "/v1/chat/completions", body)
            n += 1
            calls, finish, text = [], None, ""
            for e in events:
                for c in e.get("choices", []):
                    d = c.get("delta", {})
                    calls += d.get("tool_calls", []) or []
                    text += d.get("content") or ""
                    finish = c.get("finish_reason") or finish
            if status != 200 or finish != "tool_calls":
                failures.append("%s streamed: HTTP %d finish %s text %r" % (tag, status, finish, text[:100]))
            elif check_call(tag + " streamed", calls, want, failures):
                ok += 1
    print(json.dumps({"check": "tools", "template": family, "form": form, "requests": n, "parsed_valid": ok}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anelab", required=True)
    ap.add_argument("--count", type=int, default=200, help="json_schema requests")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--tool-rounds", type=int, default=3, help="rounds of 3 forced calls x (plain, streamed)")
    ap.add_argument("--templates", default="qwen2.5,qwen3,llama3,gemma3")
    ap.add_argument("--work", default="", help="directory for models and logs (default: a temporary one)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="serve_structured_")
    os.makedirs(work, exist_ok=True)
    failures = []
    families = [f for f in a.templates.split(",") if f]
    for i, family in enumerate(families):
        srv = Server(a.anelab, make_model(a.anelab, work, family), work, family)
        try:
            if i == 0 and a.count > 0:
                check_schemas(srv.port, a.count, a.seed, failures)
            if a.tool_rounds > 0:
                check_tools(srv.port, family, a.tool_rounds, failures)
        finally:
            srv.stop()
    for f in failures:
        print("FAIL " + f)
    print("%s: %d failures" % ("FAILED" if failures else "ok", len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

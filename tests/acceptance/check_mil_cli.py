#!/usr/bin/env python3
"""`anelab mil check|print|run` as a user drives them: exit codes and one-line errors naming the
file, line and op ("anelab mil").

usage: check_mil_cli.py ANELAB_BINARY PROGRAM.mil WORK_DIR
"""
import os
import subprocess
import sys

failures = []


def run(args, expect_rc, must_contain=(), label=""):
    p = subprocess.run(args, capture_output=True, text=True)
    out = p.stdout + p.stderr
    ok = (p.returncode == 0) == (expect_rc == 0) and all(s in out for s in must_contain)
    if expect_rc != 0:
        # Errors are one line on stderr, starting with "anelab: error:".
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        ok &= len(lines) == 1 and lines[0].startswith("anelab: error:")
    print(f"{'ok  ' if ok else 'FAIL'} {label}: rc={p.returncode} {out.strip()[:200]!r}")
    if not ok:
        failures.append(label)
    return p


def main():
    binary, program, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    run([binary, "mil", "check", program], 0, ["ok"], "check of the hand-written program")

    # ios18 <-> ios16: print in one dialect, parse it back, print in the other: identical text.
    p18 = run([binary, "mil", "print", program, "--dialect", "ios18"], 0, ["program(1.3)"], "print ios18").stdout
    p16 = run([binary, "mil", "print", program, "--dialect", "ios16"], 0, ["program(1.0)", "tensor<string, []>"],
              "print ios16").stdout
    f16 = os.path.join(work, "p16.mil")
    open(f16, "w").write(p16)
    again = run([binary, "mil", "print", f16, "--dialect", "ios18"], 0, [], "reprint ios16 as ios18").stdout
    if again != p18:
        failures.append("ios16 -> ios18 round trip differs")
    run([binary, "mil", "check", f16, "--device", "m1"], 0, ["ok"], "ios16 text accepted on m1")
    run([binary, "mil", "check", program, "--device", "m1"], 1, ["ios16"], "ios18 text rejected on m1")

    # Weights: a missing model dir entry names the BLOBFILE path.
    empty = os.path.join(work, "empty_model")
    os.makedirs(os.path.join(empty, "weights"), exist_ok=True)
    run([binary, "mil", "check", program, "--model-dir", empty], 1, ["BLOBFILE '@model_path/weights/", "empty_model/weights/"], "missing blob named")

    # A type error: the declared type of one op is wrong; the message names the line and the op.
    src = open(program).read().splitlines()
    bad_line = next(i for i, l in enumerate(src) if 'name=string("sq")' in l)
    src[bad_line] = src[bad_line].replace("tensor<fp16, [1,768,1,256]> sq", "tensor<fp16, [1,768,1,128]> sq")
    bad = os.path.join(work, "bad_type.mil")
    open(bad, "w").write("\n".join(src) + "\n")
    run([binary, "mil", "check", bad], 1, [f"{bad_line + 1}", "sq", "mul"], "wrong declared type")

    # A syntax error names line and column.
    broken = os.path.join(work, "broken.mil")
    open(broken, "w").write("program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 64, 1, 32]> x) {\n"
                            "        tensor<fp16, [1, 64, 1, 32]> y = sigmoid(x=x)[name=string(\"y\")\n    } -> (y);\n}\n")
    run([binary, "mil", "check", broken], 1, ["broken.mil:5:5"], "syntax error location")

    # Device limits: spatial extent below 32 for fp16 I/O.
    small = os.path.join(work, "small.mil")
    open(small, "w").write("program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 64, 1, 16]> x) {\n"
                           "        tensor<fp16, [1, 64, 1, 16]> y = sigmoid(x=x)[name=string(\"y\")];\n"
                           "    } -> (y);\n}\n")
    run([binary, "mil", "check", small], 1, ["16 < 32"], "minimum spatial extent")

    # run: bad --in forms and shapes.
    run([binary, "mil", "run", program, "--model-dir", empty, "--in", "x"], 1, ["NAME=FILE.npy"], "bad --in syntax")
    run([binary, "mil", "run", "/nonexistent.mil"], 1, ["/nonexistent.mil"], "missing program file")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

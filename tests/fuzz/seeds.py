#!/usr/bin/env python3
"""Seed corpora of the routing fuzz targets (tests/fuzz/run): writes one file per seed
into SEEDS/<target>/ for the targets whose directory exists.

    seeds.py REPO SEEDS

router_fuzz: every SQL string literal of the router's unit tests and the differential
suites (a flag byte first: standard strings, no parameters); config_fuzz: the example
configurations (deploy/, the docs' YAML blocks, the fuzz world); copy_fuzz and
merge_fuzz: a few streams and row sets written here; auth_fuzz: one input per mode
(honest and hand-made SCRAM messages, verifier texts, a client's and a shard's
start-up conversations).
"""
import glob
import os
import re
import struct
import sys
import warnings

SQL_START = re.compile(r"^\s*(/\*.*?\*/\s*)?(SELECT|WITH|INSERT|UPDATE|DELETE|COPY|BEGIN|COMMIT|SET|SHOW|PREPARE|"
                       r"EXECUTE|CREATE|ALTER|DROP|TRUNCATE|EXPLAIN|VALUES|TABLE|DECLARE|FETCH|LISTEN|SAVEPOINT)\b",
                       re.I | re.S)


def write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def sql_literals(repo):
    out = set()
    files = glob.glob(os.path.join(repo, "tests/unit/routing/*.cpp")) + \
        glob.glob(os.path.join(repo, "tests/integration/test_*differential*.py")) + \
        glob.glob(os.path.join(repo, "tests/integration/test_transparency*.py"))
    for path in files:
        text = open(path, errors="replace").read()
        for m in re.finditer(r'"((?:[^"\\\n]|\\.)*)"', text):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # escapes Python does not know: as they are
                s = m.group(1).encode().decode("unicode_escape", errors="ignore")
            if SQL_START.match(s) and len(s) < 2000:
                out.add(s)
    return sorted(out)


def main(repo, seeds):
    if os.path.isdir(os.path.join(seeds, "router_fuzz")):
        for i, s in enumerate(sql_literals(repo)):
            write(os.path.join(seeds, "router_fuzz"), f"sql{i:05}", b"\0" + s.encode())
    d = os.path.join(seeds, "config_fuzz")
    if os.path.isdir(d):
        paths = glob.glob(os.path.join(repo, "deploy/**/*.yaml"), recursive=True) + \
            glob.glob(os.path.join(repo, "config/*.yaml"))
        for i, p in enumerate(paths):
            write(d, f"file{i:03}", open(p, "rb").read())
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", "".join(
                open(p, errors="replace").read() for p in glob.glob(os.path.join(repo, "docs/*.md"))), re.S)):
            write(d, f"doc{i:03}", block.encode())
        world = open(os.path.join(repo, "tests/fuzz/fuzz_world.hpp")).read()
        write(d, "world", re.search(r'R"\((.*?)\)"', world, re.S).group(1).encode())
    d = os.path.join(seeds, "copy_fuzz")
    if os.path.isdir(d):
        streams = [
            b"\x00\x011\tann\tx\n2\t\\N\ty\n\\.\n",
            b"\x01\x01a,b,c\n1,\"x,y\",z\r\n\"2\"\"\",,\n",
            b"\x02\x011;'q;x';N\n;;\n",
            b"\x03\x01PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x04\x00\x00\x00\x07\xff\xff",
            b"\x04\x011|a|\n|b|c\n",
            b"\x05\x01x,\"\"\n",
        ]
        for i, s in enumerate(streams):
            write(d, f"stream{i}", s)
    d = os.path.join(seeds, "merge_fuzz")
    if os.path.isdir(d):
        for case in range(9):
            for binary in (0, 1):
                rows = b""
                for n in range(6):
                    rows += b"\x01" + bytes([1]) + str(n).encode() + bytes([3]) + b"abc"
                write(d, f"case{case}_{binary}", bytes([case, binary]) + rows + b"\x00" + rows + b"\x00")
    d = os.path.join(seeds, "auth_fuzz")
    if os.path.isdir(d):
        for i, s in enumerate(auth_seeds()):
            write(d, f"auth{i:02}", s)


def auth_seeds():
    """auth_fuzz's inputs: a mode byte, then FuzzedDataProvider's fields: strings and
    raw bytes from the front (a string ends at a backslash and another character),
    integers and booleans from the end (`ends`, in the order the target reads them)."""
    def fields(mode, front, ends=(3, 0, 0, 0, 5, 1)):
        return bytes([mode]) + front + bytes(reversed(ends))

    def strs(*strings):
        return b"".join(s + b"\\ " for s in strings)

    def packet(body):  # start-up phase: length, body
        return struct.pack("!i", len(body) + 4) + body

    def msg(t, body):
        return t + struct.pack("!i", len(body) + 4) + body

    startup = packet(struct.pack("!i", 196608) + b"user\0alice\0database\0d\0\0")
    ssl = packet(struct.pack("!i", 80877103))
    first = b"n,,n=,r=fyko+d2lbbFgONRv9qkxdawL"
    initial = msg(b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first)
    final = msg(b"p", b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=")
    verifier = (b"SCRAM-SHA-256$4096:8TcVjjic3EaSmwYQLBvnIw==$7JSntfinnwWPSZ/Myc7EhKMeqfKNeEKWnlc4rdvUOG0=:"
                b"57QLy8Q1u5c+FocqE6no+QnsuACDZiAbf2mP34U7aG4=")
    cert_hash = bytes(range(1, 33))  # a SHA-256 certificate hash
    role = strs(b"pencil", b"salt", b"user")
    plus = b"p=tls-server-end-point,,"

    def auth(code, rest=b""):
        return msg(b"R", struct.pack("!i", code) + rest)
    return [
        # honest: iterations, certificate hash?, gs2 (n, y, p), extension?, proof byte, mask
        fields(0, role + strs(b"alice", b"fyko+d2lbbFgONRv9qkxdawL", b"other", b"seed")),
        fields(0, role + strs(b"alice", b"nonce", b"ext", b"other", b"seed"), (3, 0, 0, 1, 5, 1)),
        fields(0, role + strs(b"alice", b"nonce", b"other", b"seed"), (3, 0, 1, 0, 5, 1)),
        fields(0, role + cert_hash + strs(b"alice", b"nonce", b"other", b"seed"), (3, 1, 32, 2, 0, 5, 1, 0, 7, 9)),
        fields(0, role + cert_hash + strs(b"alice", b"nonce", b"seed"), (3, 1, 32, 1, 0)),
        fields(0, role + cert_hash + strs(b"alice", b"nonce", b"other", b"seed"), (3, 1, 32, 0, 0, 5, 1)),
        # server: iterations, known user?, certificate hash?, mechanism (plain, -PLUS, other)
        fields(1, role + strs(first, b"c=biws,r=@r,p=@p"), (3, 1, 0, 0)),
        fields(1, role + strs(b"y,,n=u,r=abc,x=1", b"c=eSws,r=@r,x=2,p=@p"), (3, 1, 0, 0)),
        fields(1, role + strs(b"n,,n=,r=abc", b"c=biws,r=@r,p=AAAA"), (3, 0, 0, 0)),
        fields(1, role + cert_hash + strs(plus + b"n=,r=abc", b"c=@c,r=@r,p=@p"), (3, 1, 1, 32, 1)),
        fields(1, role + cert_hash + strs(b"y,,n=,r=abc", b"c=@c,r=@r,p=@p"), (3, 1, 1, 32, 0)),
        fields(1, role + strs(b"SCRAM-SHA-1", b"n,,n=,r=abc", b"c=@c,r=@r,p=@p"), (3, 1, 0, 2)),
        # client: server-first ("@r": our nonce), server-final ("@v": the right one)
        fields(2, strs(b"pencil", b"r=@rXYZ,s=c2FsdA==,i=4", b"@v")),
        fields(2, strs(b"pencil", b"r=@rXYZ,s=c2FsdA==,i=4", b"v=AAAA")),
        fields(3, strs(verifier, b"md5user", b"md5pw")),
        fields(3, strs(b"Zm9vYmE=", b"u", b"p")),
        bytes([4]) + ssl + startup + initial + final,
        bytes([5]) + startup + msg(b"p", b"md53175bce1d3201d16594cebf9d7eb3f9d\0"),
        bytes([6]) + auth(10, b"SCRAM-SHA-256\0\0") + auth(11, b"r=XYZ,s=c2FsdA==,i=4") + auth(12, b"v=AAAA"),
        bytes([6]) + auth(5, b"abcd") + auth(3) + auth(0),
    ]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

#!/usr/bin/env python3
"""Seed corpora of the routing fuzz targets (tests/fuzz/run): writes one file per seed
into SEEDS/<target>/ for the targets whose directory exists.

    seeds.py REPO SEEDS

router_fuzz: every SQL string literal of the router's unit tests and the differential
suites (a flag byte first: standard strings, no parameters); config_fuzz: the example
configurations (deploy/, the docs' YAML blocks, the fuzz world); copy_fuzz and
merge_fuzz: a few streams and row sets written here.
"""
import glob
import os
import re
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


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

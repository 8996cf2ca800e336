#!/usr/bin/env python3
"""The shape DESIGN.md asks of the code, checked (issue #12): no function in server/,
routing/, config/ or protocol/ longer than MAX_FUNCTION lines (from its signature to
its closing brace), no class or struct there with more than MAX_MEMBERS data members
(static ones aside), and no class or struct definition there longer than
MAX_CLASS_LINES lines (from its `class X {` to its `};`; issue #46). It reads the code through universal-ctags (Debian's
universal-ctags), which knows where each function ends and which members belong to
which class. And no folder of server/ with more than MAX_FOLDER_FILES .cpp files (issue
#46: a folder is a subsystem a newcomer can name; routing/ and routing/merge/, at 17
and 18, are not held to it yet).

  tests/lint/code_shape.py [ROOT]     prints one line per offender, exit 1 if any
"""
import collections
import json
import os
import subprocess
import sys

MAX_FUNCTION = 100
MAX_MEMBERS = 30
MAX_CLASS_LINES = 400
MAX_FOLDER_FILES = 15
DIRS = ("server", "routing", "config", "protocol")


def tags(root):
    files = []
    for d in DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            files += [os.path.relpath(os.path.join(dirpath, n), root) for n in sorted(names)
                      if n.endswith((".cpp", ".hpp"))]
    out = subprocess.run(["ctags", "--languages=C++", "--langmap=C++:+.hpp", "--kinds-C++=+m-p",
                          "--fields=+neKZ", "--extras=-q", "--output-format=json", "-f", "-"] + files,
                         cwd=root, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        t = json.loads(line)
        if t.get("_type") == "tag":
            yield t


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    bad = []
    members = collections.defaultdict(list)
    for t in tags(root):
        where = f"{t['path']}:{t['line']}"
        if t["kind"] == "function" and "end" in t and t.get("scopeKind") != "function":
            length = t["end"] - t["line"] + 1
            if length > MAX_FUNCTION:
                bad.append(f"{where}: {t.get('scope', '') + '::' if 'scope' in t else ''}{t['name']} has {length} lines"
                           f" (max {MAX_FUNCTION})")
        elif t["kind"] in ("class", "struct") and "end" in t:
            length = t["end"] - t["line"] + 1
            if length > MAX_CLASS_LINES:
                bad.append(f"{where}: {t.get('scope', '') + '::' if 'scope' in t else ''}{t['name']} has {length} lines"
                           f" (max {MAX_CLASS_LINES})")
        elif t["kind"] == "member" and t.get("scopeKind") in ("class", "struct"):
            if " static " not in " " + t.get("pattern", "") + " ":
                members[(t["scope"], t["path"])].append(t["name"])
    for (scope, path), names in sorted(members.items()):
        if len(set(names)) > MAX_MEMBERS:
            bad.append(f"{path}: {scope} has {len(set(names))} data members (max {MAX_MEMBERS})")
    for dirpath, _, names in os.walk(os.path.join(root, "server")):
        n = sum(1 for name in names if name.endswith(".cpp"))
        if n > MAX_FOLDER_FILES:
            bad.append(f"{os.path.relpath(dirpath, root)}: {n} .cpp files (max {MAX_FOLDER_FILES})")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

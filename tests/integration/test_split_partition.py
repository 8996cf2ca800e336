#!/usr/bin/env python3
"""SPLIT PARTITION (SPEC 9): a hash partition with remainder r of modulus m becomes r and
r + m of modulus 2m, metadata only, in the catalog, while writers go on through two
proxies; a key's partition is PostgreSQL's among mixed-modulus hash partitions.

Shards s0 and s1 (databases sp_<random> on the two shared instances), the catalog on s0.
A hash distribution by_user (counters: id bigint), 4 partitions, 0-1 on s0 and 2-3 on
s1, and a range one (by_range: items) for the refusals. Two proxies, A and B, follow the
catalog.

While writers upsert counters (`INSERT ... ON CONFLICT (id) DO UPDATE SET n = n + 1`, a
per-key counter) through A and B:
- SPLIT PARTITION by_user:2 through A: partition 2 becomes (8, 2), the new partition 4
  (8, 6), both on s1; both proxies run the new epoch and show the same modulus and
  remainder per partition; then SPLIT PARTITION by_user:4 through B: 4 = (16, 6), the
  new 5 = (16, 14); B, restarted from a file that still says 4 partitions, takes the
  catalog's six;
- MOVE PARTITION by_user:4 TO s0 moves exactly one half's rows (the mover selects them
  with satisfies_hash_partition and the partition's own modulus and remainder); SPLIT
  PARTITION refused while it runs;
- refusals and their SQLSTATEs (SPA01 for a range distribution, an unknown partition or
  distribution, a modulus above 65536; 42601 for the syntax; SPA01 without catalog:);
- MERGE PARTITION of two halves once one is moved to the other's shard: one partition
  of half the modulus, the numbers above the removed one one lower; its refusals;
- the command-line form; SHOW SPLIT ADVICE names SPLIT PARTITION without "not
  implemented".
After each step every acknowledged increment is there exactly once, and every row is on
the shard the catalog names for its partition, where its partition is PostgreSQL's own:
the rows are copied into a table PARTITIONED BY HASH with one partition per catalog
partition (same moduli and remainders) and each row's partition there must be the one
satisfies_hash_partition names and the one SHOW ROUTE names for its key.
"""
# test-timeout: 300

import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import sptest  # noqa: E402
from split_load import INCREMENTS, SPM01, Load, admin, cli, direct, epochs, refused, wait_move  # noqa: E402
import split_load  # noqa: E402

WORKDIR = sptest.workdir("split-partition")
DB = None
A = B = None
TESTS = []


def config(db, catalog=True):
    return split_load.config_head(db) + f"""
    distributions:
      - name: by_user
        method: hash
        partitions: 4
        placement: {{ s0: 0-1, s1: 2-3 }}
        tables: {{ counters: id }}
      - name: by_range
        method: range
        ranges:
          - {{ upto: 1000, shard: s0 }}
          - {{ shard: s1 }}
        tables: {{ items: id }}
    """ + split_load.config_tail(catalog)


def test(fn):
    TESTS.append(fn)
    return fn


def parts(proxy):
    """by_user's partitions as the proxy shows them: {partition: (modulus, remainder, shard)}."""
    return {int(r[1]): (int(r[7]), int(r[8]), r[2]) for r in admin(proxy, "SHOW PARTITIONS") if r[0] == "by_user"}


def same_parts(want):
    got_a, got_b = parts(A), parts(B)
    assert got_a == want and got_b == want, (got_a, got_b, want)


def check_rows(want, route_sample=150):
    """Every acknowledged upsert exactly once; every row on the shard the catalog names for
    its partition, which is PostgreSQL's own for the catalog's moduli and remainders (and
    the proxy's, by SHOW ROUTE, for a sample of keys)."""
    numbers = sorted(want)
    moduli = [want[p][0] for p in numbers]
    remainders = [want[p][1] for p in numbers]
    rows, pg_partition = {}, {}
    for i, shard in enumerate(("s0", "s1")):
        direct(i, "DROP TABLE IF EXISTS chk_part")
        # (PostgreSQL itself refuses moduli that break its rules for mixed moduli.)
        direct(i, "CREATE TABLE chk_part (id bigint, n bigint) PARTITION BY HASH (id)")
        for p in numbers:
            direct(i, f"CREATE TABLE chk_part_{p} PARTITION OF chk_part FOR VALUES WITH (MODULUS {want[p][0]}, "
                      f"REMAINDER {want[p][1]})")
        direct(i, "INSERT INTO chk_part SELECT id, n FROM counters")
        got = direct(i, "SELECT c.id, c.n, c.tableoid::regclass::text, array(SELECT p FROM unnest(%s::int[], "
                        "%s::int[], %s::int[]) AS t(p, m, r) WHERE satisfies_hash_partition('chk_part'::regclass, "
                        "t.m, t.r, c.id)) FROM chk_part c", (numbers, moduli, remainders))
        direct(i, "DROP TABLE chk_part")
        for key, n, table, satisfied in got:
            p = int(table.rsplit("_", 1)[1])
            assert satisfied == [p], (key, table, satisfied)
            assert want[p][2] == shard, f"counter {key} of partition by_user:{p} is on {shard}, not {want[p][2]}"
            assert key not in rows, f"counter {key} on both shards"
            rows[key] = n
            pg_partition[key] = p
    assert rows == INCREMENTS, "acknowledged upserts differ from the rows"
    print(f"  {sum(INCREMENTS.values())} acknowledged upserts on {len(rows)} rows in {len(want)} partitions, "
          f"{SPM01[0]} SPM01", flush=True)
    for key in random.Random(len(want)).sample(sorted(rows), min(route_sample, len(rows))):
        shown = admin(random.choice([A, B]), f"SHOW ROUTE SELECT n FROM counters WHERE id = {key}")
        assert shown[0][2] == f"by_user:{pg_partition[key]}", (key, shown, pg_partition[key])


def setup():
    global DB, A, B
    DB, A, B = split_load.start("sp", config, ("splitp-a", "splitp-b"), "counters", WORKDIR)


UNIFORM = {0: (4, 0, "s0"), 1: (4, 1, "s0"), 2: (4, 2, "s1"), 3: (4, 3, "s1")}
SIX = {0: (4, 0, "s0"), 1: (4, 1, "s0"), 2: (8, 2, "s1"), 3: (4, 3, "s1"), 4: (16, 6, "s1"), 5: (16, 14, "s1")}


@test
def split_under_load():
    same_parts(UNIFORM)
    with Load():
        before = max(epochs(A).values())
        rows = admin(A, "SPLIT PARTITION by_user:2")
        assert rows == [("by_user", "2", "8", "2", "s1"), ("by_user", "4", "8", "6", "s1")], rows
        # Answered once every live proxy runs the new epoch.
        e = epochs(A)
        assert len(e) == 2 and len(set(e.values())) == 1 and min(e.values()) > before, (before, e)
        same_parts({**UNIFORM, 2: (8, 2, "s1"), 4: (8, 6, "s1")})
        time.sleep(1)
        rows = admin(B, "SPLIT PARTITION by_user:4")
        assert rows == [("by_user", "4", "16", "6", "s1"), ("by_user", "5", "16", "14", "s1")], rows
        time.sleep(1)
    same_parts(SIX)
    check_rows(SIX)
    # B restarted from a file with 4 partitions takes the catalog's six.
    B.stop()
    B.start()
    same_parts(SIX)


@test
def move_half():
    moved = {**SIX, 4: (16, 6, "s0")}
    with Load():
        move = int(admin(A, "MOVE PARTITION by_user:4 TO s0")[0][0])
        refused(B, "SPLIT PARTITION by_user:2", "SPA01", f"move {move} of partition by_user:4 is unfinished")
        row = wait_move(A, move)
        assert int(row[6]) > 0, row  # rows_copied: the half had rows
        time.sleep(0.5)
    same_parts(moved)
    e = epochs(A)
    assert len(set(e.values())) == 1, e
    check_rows(moved)


@test
def refusals():
    refused(A, "SPLIT PARTITION by_range:1", "SPA01", "SPLIT PARTITION needs a hash distribution; \"by_range\" is a "
                                                       "range one")
    refused(A, "SPLIT PARTITION by_user:6", "SPA01", "distribution \"by_user\" has no partition 6 (it has 6)")
    refused(A, "SPLIT PARTITION nowhere:0", "SPA01", "unknown distribution")
    refused(A, "SPLIT RANGE by_user AT 5", "SPA01", "SPLIT RANGE needs a range distribution; \"by_user\" is a hash one")
    refused(A, "SPLIT PARTITION by_user", "42601", "usage: SPLIT PARTITION distribution:partition")
    refused(A, "SPLIT PARTITION by_user:x", "42601", "usage")
    refused(A, "SPLIT PARTITION by_user:1 by_user:2", "42601", "usage")
    with sptest.Proxy("splitp-nocat", config(DB, catalog=False), WORKDIR) as p:
        refused(p, "SPLIT PARTITION by_user:1", "SPA01", "no catalog")
    # Modulus growth is capped at 65536: partition 1 (4, 1) splits 14 times, to 65536.
    want = {**SIX, 4: (16, 6, "s0")}
    for i in range(14):
        m, r, shard = want[1]
        rows = admin(A, "SPLIT PARTITION by_user:1")
        n = len(want)
        assert rows == [("by_user", "1", str(2 * m), str(r), shard), ("by_user", str(n), str(2 * m), str(r + m), shard)]
        want[1], want[n] = (2 * m, r, shard), (2 * m, r + m, shard)
    assert want[1][0] == 65536
    refused(A, "SPLIT PARTITION by_user:1", "SPA01", "has modulus 65536; split, it would have 131072, above the "
                                                     "largest allowed, 65536")
    time.sleep(0.5)
    same_parts(want)
    with Load():
        time.sleep(2)
    check_rows(want)


@test
def merge_under_load():
    """MERGE PARTITION joins a split's two halves (on one shard) into one partition of half
    the modulus, numbered the lower; those above the higher number go down by one."""
    cur = parts(A)
    assert cur[4] == (16, 6, "s0") and cur[5] == (16, 14, "s1") and len(cur) > 6, cur
    refused(A, "MERGE PARTITION by_user:4", "SPA01", "by_user:4 (on shard \"s0\") and by_user:5 (on shard \"s1\") are "
                                                     "on different shards: MOVE PARTITION one of them")
    refused(A, "MERGE PARTITION by_user:0", "SPA01", "has no partition (modulus 4, remainder 2) to merge with")
    refused(A, "MERGE PARTITION by_range:1", "SPA01", "MERGE PARTITION needs a hash distribution")
    refused(A, "MERGE PARTITION by_user", "42601", "usage: MERGE PARTITION distribution:partition")
    with Load():
        wait_move(A, int(admin(A, "MOVE PARTITION by_user:5 TO s0")[0][0]))
        rows = admin(B, "MERGE PARTITION by_user:5")
        assert rows == [("by_user", "4", "8", "6", "s0")], rows
        time.sleep(1)
    want = {p: v for p, v in cur.items() if p < 4}
    want[4] = (8, 6, "s0")
    want.update({p - 1: v for p, v in cur.items() if p > 5})
    same_parts(want)
    e = epochs(A)
    assert len(set(e.values())) == 1, e
    check_rows(want)


@test
def command_line_and_advice():
    n = len(parts(A))
    rc, out, err = cli(A, "--csv", "SPLIT", "PARTITION", "by_user:3")
    assert rc == 0 and out.splitlines() == ["distribution,partition,modulus,remainder,shard", "by_user,3,8,3,s1",
                                            f"by_user,{n},8,7,s1"], (rc, out, err)
    rc, out, err = cli(A, "SPLIT PARTITION by_user:99")
    assert rc == 1 and err.startswith("ERROR: SPA01: SPLIT PARTITION: distribution \"by_user\" has no partition 99"), \
        (rc, err)
    # SHOW SPLIT ADVICE offers SPLIT PARTITION for a hash partition that stands out: on a
    # proxy of its own (its counters start at 0), every write to one key of partition 0.
    hot = next(k for k in range(10**6) if admin(A, f"SHOW ROUTE SELECT n FROM counters WHERE id = {k}")[0][2]
               == "by_user:0")
    with sptest.Proxy("splitp-c", config(DB), WORKDIR) as p:
        c = p.connect(DB)
        for _ in range(120):
            c.cursor().execute("INSERT INTO counters (id, n) VALUES (%s, 1) ON CONFLICT (id) DO UPDATE SET n = "
                               "counters.n + 1", (hot,))
        c.close()
        advice = [r for r in admin(p, "SHOW SPLIT ADVICE") if r[0] == "by_user" and r[1] == "0"]
    assert advice and "SPLIT PARTITION by_user:0" in advice[0][6] and "not implemented" not in advice[0][6], advice


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, split_load.teardown))

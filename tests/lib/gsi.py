"""The setting of the global index tests (test_indexes.py, test_index_conflict.py): three
shards (s0, s1 on the shared instances, s2 a second database on instance 0), a plain
PostgreSQL database (`plain`, on instance 1) for the differential, and `users (id bigint
PRIMARY KEY, email text UNIQUE, city text)` hashed by id with a unique global index on
email and a non-unique one on city, made on both sides."""

import time

import psycopg2

import sptest

DDL = "CREATE TABLE users (id bigint PRIMARY KEY, email text UNIQUE, city text)"


def config(db, extra, more_tables="", more_indexes=""):
    p0, p1 = sptest.PG_PORTS
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
      - {{ name: admin, password: adminpw, admin: true }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p0}, database: {db}, user: app, password: secret, pool_size: 20 }}
      - {{ name: s1, host: 127.0.0.1, port: {p1}, database: {db}, user: app, password: secret, pool_size: 20 }}
      - {{ name: s2, host: 127.0.0.1, port: {p0}, database: {extra}, user: app, password: secret, pool_size: 20 }}
    distributions:
      - name: by_id
        method: hash
        partitions: 12
        tables: {{ users: id{more_tables} }}
    indexes:
      - {{ table: users, columns: [email], unique: true }}
      - {{ table: users, columns: [city] }}{more_indexes}
    """


class Setting:
    """The databases and the proxy; `start` makes them and the table, `stop` drops them."""

    def __init__(self, name, label, work, more_tables="", more_indexes=""):
        self.name, self.label, self.work = name, label, work
        self.more_tables, self.more_indexes = more_tables, more_indexes
        self.dbs = self.extra = self.plain = self.proxy = None

    def start(self):
        self.dbs = sptest.Databases(self.name)
        self.extra = sptest.Databases(self.name + "x")
        self.plain = sptest.Databases(self.name + "p")
        cfg = config(self.dbs.name, self.extra.name, self.more_tables, self.more_indexes)
        self.proxy = sptest.Proxy(self.label, cfg, self.work).start()
        for c in (self.proxy.connect(self.dbs.name), self.plain.shard(1)):
            c.cursor().execute(DDL)
            c.close()
        self.wait_ready(["users_email_key", "users_city_idx"])
        return self

    def stop(self):
        if self.proxy:
            self.proxy.stop()
        for d in (self.dbs, self.extra, self.plain):
            if d:
                d.drop()

    def shard_dbs(self):
        p0, p1 = sptest.PG_PORTS
        return [(p0, self.dbs.name), (p1, self.dbs.name), (p0, self.extra.name)]

    def on_shards(self, sql):
        out = []
        for port, db in self.shard_dbs():
            out += sptest.query(port, db, sql)
        return out

    def wait_ready(self, names, timeout=30):
        """Until SHOW INDEXES says each of `names` is ready (or failed); their rows."""
        deadline = time.monotonic() + timeout
        while True:
            rows = {r[0]: r for r in sptest.admin(self.proxy.port, "SHOW INDEXES")}
            if all(rows.get(n) and rows[n][4] in ("ready", "failed") for n in names):
                return rows
            if time.monotonic() > deadline:
                raise AssertionError(f"indexes not ready after {timeout}s: {rows}")
            time.sleep(0.05)

    def entries_match_rows(self):
        """Every shard's entries of both indexes against the table's rows: none orphaned, none missing."""
        for column, index in (("email", "users_email_key"), ("city", "users_city_idx")):
            rows = self.on_shards(f"SELECT {column}, id FROM users WHERE {column} IS NOT NULL")
            entries = self.on_shards(f"SELECT {column}, id FROM splitpoint.{index}_entries")
            assert sorted(rows) == sorted(entries), \
                f"{index}: missing {sorted(set(rows) - set(entries))[:10]}, orphans {sorted(set(entries) - set(rows))[:10]}"


def outcome(cur, sql, params=None):
    """(tag, rows) or the error's (sqlstate, message, detail, constraint, schema, table)."""
    try:
        cur.execute(sql, params)
        rows = cur.fetchall() if cur.description else None
        return ("ok", cur.statusmessage, rows)
    except psycopg2.Error as e:
        d = e.diag
        return ("error", e.pgcode, d.message_primary, d.message_detail, d.constraint_name, d.schema_name,
                d.table_name)

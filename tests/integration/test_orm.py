#!/usr/bin/env python3
"""Real ORMs through splitpoint (SPEC §3-§5): SQLAlchemy (Debian's python3-sqlalchemy,
1.4, on psycopg2) and Django (Debian's python3-django, 3.2, its postgresql backend on
psycopg2) run the same ORM code against the proxy over three shards and against one
plain PostgreSQL database, and every result, as the Python values the ORM returns, must
be identical (Decimal scale and datetime offsets included: values are compared as their
str()/isoformat()).

Databases (made for this run, dropped at the end): shards orm0 and orm1 on PG0, orm2 on
PG1; the plain database on PG1. Proxy: default transactions (cross_shard_writes:
two_phase), SCRAM auth, tables

  tenants / dj_tenant                      reference tables
  accounts, orders / dj_account, dj_order  hash (12 partitions) on tenant_id: co-located
  events / dj_note                         hash (6 partitions) on id, a distribution of
                                           its own (dj_note.id a bigserial: the proxy
                                           generates the key)

Data: seeded random (12 tenants, 60 accounts, 600 orders, 300 events), explicit primary
keys everywhere so both sides hold the same rows.

SQLAlchemy: metadata.create_all through the proxy (the tables and their FKs on every
shard), session.add_all and bulk_save_objects in one transaction each (multi-shard
writes, two-phase commit counted), then the shards read directly: their rows united equal
the plain tables, reference tables whole on each shard. Reads: get() by key, filters
(IN, BETWEEN, LIKE, IS NULL), query.count() (SELECT count(*) FROM (SELECT ...) anon_1),
exists() (in the select list, by key and by a non-key column), func.sum/count/avg/max/min
with and without group_by, having, order_by + limit/offset pages, a co-located join on the
tenant key (with the key fixed and not), a join on a non-key column (events.order_id),
an outer join, distinct(), count(distinct), subqueries (IN (SELECT), a grouped sub-select
joined, a correlated scalar sub-select), yield_per/stream_results (a server-side cursor).
Writes: attribute change + flush by key, query.update() by key and without key
(synchronize_session evaluate and fetch: UPDATE ... RETURNING), session.delete() by key,
query.delete() without key, each rowcount compared and the tables compared afterwards;
a transaction that adds orders on every shard, reads them back and rolls back leaves
nothing (checked on the shards too).

Django: settings.configure with DATABASES 'plain' and 'proxy' (and an empty 'default'),
models of an app_label defined here, tables made with connection.schema_editor() (one
atomic block of DDL on every shard: two-phase commit), bulk_create, create(), save();
reads: get, filter (lookups across the FK), count() (also of a slice), exists(),
aggregate(Sum, Count, Avg, Max), annotate + values group-by with and without a HAVING
filter, order_by + slicing pages, values_list distinct, select_related on the co-located
FK and the reference table, annotate(Count) over the reverse FK (outer join on a non-key
column), Subquery/OuterRef and Exists, iterator() (a WITH HOLD server-side cursor);
writes: update() with F() by key and without, delete() with a cascade, transaction.atomic
rolled back, a savepoint (nested atomic) rolled back while the outer block commits,
get_or_create; bulk_create without primary keys on dj_note (the proxy generates them and
RETURNING must give them in the objects' order: each object's id must name its own row).

After every write the tables are compared through both ORMs and, at the end of each
write test, read directly from the shards; when a write differed, the proxy's tables are
made the plain database's again (resync) so the checks after it stand on their own.
Last: no prepared transaction and no decision row left on any shard.

A check that fails because of a known proxy bug is listed in KNOWN (printed as
"KNOWN FAILURE: ..." without failing the run); every other mismatch fails the test.

Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 300

import datetime as dt
import os
import random
import sys
import time
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-sqlalchemy", "python3-django", "python3-psycopg2")

import psycopg2  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from sqlalchemy import orm as saorm  # noqa: E402

func = sa.func

HOST = sptest.HOST
PG0, PG1 = sptest.PG_PORTS
WORKDIR = sptest.workdir("orm")
SEED = int(os.environ.get("ORM_SEED", "20240611"))
DBS = sptest.ThreeShards("orm")
SHARDS = DBS.shards
PLAIN = DBS.plain
SIDES = ("plain", "proxy")

# ------------------------------------------------------------------ known proxy bugs
# check id -> one-line diagnosis. A listed check that fails prints "KNOWN FAILURE: ..."
# and does not fail the run; one that passes every time is noted at the end.
KNOWN = {}

CHECKS = sptest.Checks(KNOWN, label="MISMATCH")
PROXY = None

# ------------------------------------------------------------------ helpers


def direct(port, db):
    return sptest.connect(port, db)


def on_db(port, db, sql, params=None):
    c = direct(port, db)
    try:
        cur = c.cursor()
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else None
    finally:
        c.close()


def proxy_config():
    lines = DBS.shards_yaml()
    return f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
{lines}
distributions:
  - name: by_tenant
    method: hash
    partitions: 12
    tables:
      accounts: tenant_id
      orders: tenant_id
      dj_account: tenant_id
      dj_order: tenant_id
  - name: by_id
    method: hash
    partitions: 6
    tables:
      events: id
      dj_note: id
reference_tables: [tenants, dj_tenant]
scatter:
  deadline: 30s
  max_deadline: 60s
"""


def short(v, n=600):
    s = repr(v)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


def norm(v):
    """A comparable form of an ORM result: Decimal and datetime as their text (scale and
    offset count), rows and lists as tuples, ORM objects as their column values."""
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, Decimal):
        return ("D", str(v))
    if isinstance(v, float):
        return ("F", repr(v))
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return ("T", v.isoformat())
    if isinstance(v, dict):
        return tuple(sorted((k, norm(x)) for k, x in v.items()))
    if hasattr(v, "__table__"):  # a SQLAlchemy mapped object
        return (type(v).__name__,) + tuple((a.key, norm(getattr(v, a.key)))
                                           for a in sa.inspect(v).mapper.column_attrs)
    if hasattr(v, "_meta") and hasattr(v, "pk"):  # a Django model instance
        return (type(v).__name__,) + tuple((f.attname, norm(getattr(v, f.attname))) for f in v._meta.concrete_fields)
    if isinstance(v, (list, tuple)) or hasattr(v, "__iter__"):
        return tuple(norm(x) for x in v)
    return ("?", repr(v))


def error_of(e):
    """(SQLSTATE or exception class, message) of an exception from either ORM."""
    inner = e
    for _ in range(4):
        if isinstance(inner, psycopg2.Error):
            break
        nxt = getattr(inner, "orig", None) or inner.__cause__
        if nxt is None:
            break
        inner = nxt
    code = getattr(inner, "pgcode", None) or type(inner).__name__
    return code, str(inner).strip().splitlines()[0] if str(inner).strip() else ""


def sorted_norm(v):
    return tuple(sorted(v, key=repr)) if isinstance(v, tuple) else v


def first_diff(a, b):
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) != len(b):
            return f"{len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"item {i}: expected {short(x, 300)} got {short(y, 300)}"
    return f"expected {short(a)} got {short(b)}"


class Side:
    """One ORM target: plain PostgreSQL or the proxy. `log` collects the SQL sent."""

    def __init__(self, name):
        self.name = name
        self.log = []
        self.engine = None
        self.session = None
        self.alias = name  # Django


PLAIN_S = Side("plain")
PROXY_S = Side("proxy")
BOTH = (PLAIN_S, PROXY_S)


def diff(cid, fn, ordered=True, recover=None):
    """Runs fn(side) on the plain database and on the proxy and compares the results
    (normalised; as multisets when not `ordered`), or the SQLSTATEs when both fail."""
    res = {}
    sql = {}
    for side in BOTH:
        side.log.clear()
        try:
            v = norm(fn(side))
            res[side.name] = ("ok", sorted_norm(v) if not ordered else v)
        except Exception as e:  # noqa: BLE001
            res[side.name] = ("error",) + error_of(e)
            if recover:
                recover(side)
        sql[side.name] = list(side.log)
    exp, got = res["plain"], res["proxy"]
    if exp[0] == "error" and got[0] == "error":
        ok = exp[1] == got[1]
    else:
        ok = exp == got

    def detail():
        if exp[0] == "ok" and got[0] == "ok":
            d = first_diff(exp[1], got[1])
        else:
            d = f"expected {short(exp, 300)} got {short(got, 300)}"
        stmts = "\n      ".join(short(s, 500) for s in sql["proxy"][-4:])
        return f"{d}\n    SQL through the proxy (last {min(4, len(sql['proxy']))}):\n      {stmts}"

    return CHECKS.check(ok, cid, detail)


def check(ok, cid, detail):
    return CHECKS.check(ok, cid, detail)


def resync(tables):
    """Makes the proxy's copy of `tables` (parents first) the plain database's again, after
    a write that differed, so that the checks after it stand on their own."""
    plain = {t: on_db(*PLAIN, f"SELECT * FROM {t}") for t in tables}
    c = PROXY.connect("app", autocommit=False)
    try:
        cur = c.cursor()
        for t in reversed(tables):
            cur.execute(f"DELETE FROM {t}")
        for t in tables:
            if plain[t]:
                args = ",".join(cur.mogrify("(" + ",".join(["%s"] * len(plain[t][0])) + ")", r).decode()
                                for r in plain[t])
                cur.execute(f"INSERT INTO {t} VALUES {args}")
        c.commit()
    finally:
        c.close()
    print(f"     (proxy's {', '.join(tables)} resynced from the plain database)", flush=True)


def shard_table(table, cols, order):
    """Every shard's rows of `table`, read directly."""
    return [on_db(port, db, f"SELECT {cols} FROM {table} ORDER BY {order}") for port, db in SHARDS]


def verify_tables(cid, sharded, reference):
    """The shards' rows united (as a multiset) equal the plain table; every shard holds
    rows of each sharded table; each reference table is whole on every shard."""
    for table, cols, order in sharded:
        per = shard_table(table, cols, order)
        plain = on_db(*PLAIN, f"SELECT {cols} FROM {table} ORDER BY {order}")
        united = sorted(sum(per, []), key=repr)
        check(united == sorted(plain, key=repr), f"{cid} {table} on the shards",
              lambda: f"shards {[len(p) for p in per]} rows, plain {len(plain)}; "
                      f"{first_diff(tuple(united), tuple(sorted(plain, key=repr)))}")
        check(all(per), f"{cid} {table} spread", lambda: f"a shard holds no row: {[len(p) for p in per]}")
    for table, cols, order in reference:
        per = shard_table(table, cols, order)
        plain = on_db(*PLAIN, f"SELECT {cols} FROM {table} ORDER BY {order}")
        for i, rows in enumerate(per):
            check(rows == plain, f"{cid} {table} on s{i}", lambda: f"{len(rows)} rows vs plain {len(plain)}: "
                                                                   f"{first_diff(tuple(plain), tuple(rows))}")


def assert_clean(what):
    for i, (port, db) in enumerate(SHARDS):
        left = on_db(port, db, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
        check(not left, f"{what} prepared s{i}", lambda: f"prepared transactions left on s{i}: {left}")
    left = sptest.decision_rows_left(*SHARDS[0])
    check(not left, f"{what} decisions", lambda: f"decision rows left on the recorder: {left}")


def two_phase_committed():
    return PROXY.metric("splitpoint_two_phase_total", {"outcome": "committed"})


# ------------------------------------------------------------------ data

rng = random.Random(SEED)
STATUSES = ["new", "paid", "shipped", "cancelled", "refunded"]
KINDS = ["view", "click", "buy", "return"]
BASE_TS = dt.datetime(2024, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
TENANTS = [(t, f"tenant-{t:02d}", ["eu", "us", "jp"][t % 3]) for t in range(1, 13)]
ACCOUNTS = []   # (tenant_id, id, name, balance)
for _t, _n, _r in TENANTS:
    for _k in range(5):
        _id = len(ACCOUNTS) + 1
        ACCOUNTS.append((_t, _id, f"acc-{rng.choice('abcdef')}{_id:03d}", Decimal(rng.randint(-5000, 500000)) / 100))
ORDERS = []     # (tenant_id, id, account_id, amount, status, created_at, note)
for _id in range(1, 601):
    _acc = rng.choice(ACCOUNTS)
    ORDERS.append((_acc[0], _id, _acc[1], Decimal(rng.randint(100, 100000)) / 100,
                   rng.choice(STATUSES) if rng.random() > 0.05 else None,
                   BASE_TS + dt.timedelta(minutes=rng.randint(0, 60 * 24 * 30)),  # ties possible
                   rng.choice([None, "gift", "rush", "fragile"])))
EVENTS = []     # (id, tenant_id, order_id, kind, qty)
for _id in range(1, 301):
    _o = rng.choice(ORDERS)
    EVENTS.append((_id * 7 + 3, _o[0], _o[1], rng.choice(KINDS), rng.randint(0, 20)))


# ================================================================== SQLAlchemy

Base = saorm.declarative_base()


class Tenant(Base):
    __tablename__ = "tenants"
    id = sa.Column(sa.Integer, primary_key=True, autoincrement=False)
    name = sa.Column(sa.String(40), nullable=False)
    region = sa.Column(sa.String(8), nullable=False)


class Account(Base):
    __tablename__ = "accounts"
    tenant_id = sa.Column(sa.Integer, sa.ForeignKey("tenants.id"), primary_key=True, autoincrement=False)
    id = sa.Column(sa.BigInteger, primary_key=True, autoincrement=False)
    name = sa.Column(sa.String(40), nullable=False)
    balance = sa.Column(sa.Numeric(12, 2), nullable=False)
    orders = saorm.relationship("Order", back_populates="account", viewonly=True)


class Order(Base):
    __tablename__ = "orders"
    tenant_id = sa.Column(sa.Integer, primary_key=True, autoincrement=False)
    id = sa.Column(sa.BigInteger, primary_key=True, autoincrement=False)
    account_id = sa.Column(sa.BigInteger, nullable=False)
    amount = sa.Column(sa.Numeric(12, 2), nullable=False)
    status = sa.Column(sa.String(20))
    created_at = sa.Column(sa.DateTime(timezone=True), nullable=False)
    note = sa.Column(sa.Text)
    __table_args__ = (sa.ForeignKeyConstraint(["tenant_id", "account_id"], ["accounts.tenant_id", "accounts.id"]),
                      sa.Index("orders_created", "created_at"))
    account = saorm.relationship("Account", back_populates="orders", viewonly=True)


class Event(Base):
    __tablename__ = "events"
    id = sa.Column(sa.BigInteger, primary_key=True, autoincrement=False)
    tenant_id = sa.Column(sa.Integer, nullable=False)
    order_id = sa.Column(sa.BigInteger, nullable=False)
    kind = sa.Column(sa.String(10), nullable=False)
    qty = sa.Column(sa.Integer, nullable=False)


SA_TABLES = [("accounts", "tenant_id, id, name, balance", "tenant_id, id"),
             ("orders", "tenant_id, id, account_id, amount, status, created_at, note", "tenant_id, id"),
             ("events", "id, tenant_id, order_id, kind, qty", "id")]
SA_REF = [("tenants", "id, name, region", "id")]


def sa_url(port, db):
    return f"postgresql+psycopg2://app:secret@{HOST}:{port}/{db}"


def sa_recover(side):
    try:
        side.session.rollback()
    except Exception:  # noqa: BLE001
        side.session.close()


def sa_engine(side, port, db):
    side.engine = sa.create_engine(sa_url(port, db), future=True, pool_size=2, pool_pre_ping=False)

    @sa.event.listens_for(side.engine, "before_cursor_execute")
    def _log(conn, cursor, statement, params, context, executemany):  # noqa: ARG001
        side.log.append(statement if executemany else f"{statement} -- {short(params, 200)}")

    side.session = saorm.Session(side.engine, future=True)


def test_sa_create_all():
    for side in BOTH:
        Base.metadata.create_all(side.engine)
    for i, (port, db) in enumerate(SHARDS):
        got = on_db(port, db, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                              "ORDER BY 1")
        got = [r[0] for r in got if r[0] in ("tenants", "accounts", "orders", "events")]
        check(got == ["accounts", "events", "orders", "tenants"], f"create_all tables s{i}", lambda: got)
        fks = on_db(port, db, "SELECT count(*) FROM information_schema.table_constraints "
                              "WHERE constraint_type = 'FOREIGN KEY' AND table_name IN ('accounts', 'orders')")[0][0]
        check(fks == 2, f"create_all fks s{i}", lambda: f"{fks} foreign keys on s{i}, expected 2")
    # create_all again: every table is found (catalog queries), nothing is created
    for side in BOTH:
        side.log.clear()
        Base.metadata.create_all(side.engine)
        creates = [s for s in side.log if s.lstrip().upper().startswith("CREATE")]
        check(not creates, f"create_all again {side.name}", lambda: f"created again: {creates}")


def test_sa_load():
    before = two_phase_committed()
    steps = [("tenants (add_all)", lambda: [Tenant(id=t, name=n, region=r) for t, n, r in TENANTS], "add_all"),
             ("accounts (add_all)", lambda: [Account(tenant_id=t, id=i, name=n, balance=b)
                                             for t, i, n, b in ACCOUNTS], "add_all"),
             ("orders (bulk_save_objects)",
              lambda: [Order(tenant_id=t, id=i, account_id=a, amount=m, status=st, created_at=c, note=nt)
                       for t, i, a, m, st, c, nt in ORDERS], "bulk"),
             ("events (add_all)", lambda: [Event(id=i, tenant_id=t, order_id=o, kind=k, qty=q)
                                           for i, t, o, k, q in EVENTS], "add_all")]
    for side in BOTH:  # not diff(): each load must happen exactly once per side
        s = side.session
        for what, objs, how in steps:
            side.log.clear()
            try:
                if how == "bulk":
                    s.bulk_save_objects(objs())
                else:
                    s.add_all(objs())
                s.commit()
            except Exception as e:  # noqa: BLE001
                text = f"{error_of(e)}; SQL {[short(q, 300) for q in side.log][-3:]}"
                check(False, f"sa load {what} {side.name}", lambda: text)
                sa_recover(side)
    after = two_phase_committed()
    check(after >= before + 3, "sa load two-phase", lambda: f"two_phase_total committed {before} -> {after}, "
                                                            f"expected 3 more (three multi-shard commits)")
    verify_tables("sa load", SA_TABLES, SA_REF)
    assert_clean("sa load")


def sa_reads():
    """(id, fn(side) -> result, ordered)"""
    Q = []

    def q(cid, ordered=True):
        def deco(fn):
            Q.append((cid, fn, ordered))
            return fn
        return deco

    S = lambda side: side.session  # noqa: E731
    some_orders = [ORDERS[i] for i in (0, 17, 111, 222, 333, 444, 555, 599)]

    @q("sa get by key")
    def _(side):
        return [S(side).get(Order, (o[0], o[1])) for o in some_orders] + [S(side).get(Order, (1, 100000))]

    @q("sa get account relationship")
    def _(side):
        o = S(side).get(Order, (some_orders[2][0], some_orders[2][1]))
        return (o.account.name, sorted(x.id for x in o.account.orders))

    @q("sa filter by tenant", ordered=False)
    def _(side):
        return S(side).query(Order).filter(Order.tenant_id == 5).all()

    @q("sa filter tenant in", ordered=False)
    def _(side):
        return S(side).query(Order.id, Order.amount).filter(Order.tenant_id.in_([1, 4, 9, 12])).all()

    @q("sa filter non-key", ordered=False)
    def _(side):
        return S(side).query(Order).filter(Order.status == "paid", Order.amount > 500).all()

    @q("sa filter between like null")
    def _(side):
        return S(side).query(Order.id).filter(Order.amount.between(100, 200), Order.note.is_(None)).order_by(
            Order.id).all() + S(side).query(Account.id).filter(Account.name.like("acc-a%")).order_by(Account.id).all()

    @q("sa filter status null", ordered=False)
    def _(side):
        return S(side).query(Order.tenant_id, Order.id).filter(Order.status.is_(None)).all()

    @q("sa count")
    def _(side):
        s = S(side)
        return [s.query(Order).count(), s.query(Order).filter(Order.status == "new").count(),
                s.query(Order).filter(Order.tenant_id == 3).count(), s.query(Event).count(),
                s.query(Order).filter(Order.status == "nope").count(), s.query(Tenant).count()]

    @q("sa count distinct column query")
    def _(side):
        return S(side).query(Order.status).distinct().count()

    @q("sa exists non-key")
    def _(side):
        s = S(side)
        return [s.query(sa.exists().where(Order.id == o[1])).scalar() for o in some_orders] + \
               [s.query(sa.exists().where(Order.id == 100000)).scalar()]

    @q("sa exists by key")
    def _(side):
        s = S(side)
        return [s.query(s.query(Order).filter(Order.tenant_id == t, Order.status == "refunded").exists()).scalar()
                for t in range(1, 14)]

    @q("sa exists filter")
    def _(side):
        s = S(side)
        return [s.query(s.query(Order).filter(Order.amount > 999).exists()).scalar(),
                s.query(s.query(Event).filter(Event.qty > 100).exists()).scalar()]

    @q("sa exists in where")
    def _(side):
        s = S(side)
        return s.query(sa.literal(True)).filter(s.query(Order).filter(Order.amount > 900).exists()).all()

    @q("sa aggregates")
    def _(side):
        return S(side).query(func.count(Order.id), func.sum(Order.amount), func.avg(Order.amount),
                             func.max(Order.created_at), func.min(Order.amount)).one()

    @q("sa aggregates by tenant")
    def _(side):
        return S(side).query(func.count(Order.id), func.sum(Order.amount), func.avg(Order.amount)).filter(
            Order.tenant_id == 7).one()

    @q("sa aggregates empty")
    def _(side):
        return S(side).query(func.count(Order.id), func.sum(Order.amount), func.avg(Order.amount),
                             func.max(Order.created_at)).filter(Order.amount < 0).one()

    @q("sa group_by")
    def _(side):
        return S(side).query(Order.status, func.count(Order.id), func.sum(Order.amount), func.avg(Order.amount),
                             func.max(Order.created_at)).group_by(Order.status).order_by(Order.status).all()

    @q("sa group_by unordered", ordered=False)
    def _(side):
        return S(side).query(Order.tenant_id, func.count(), func.sum(Order.amount)).group_by(Order.tenant_id).all()

    @q("sa group_by two keys")
    def _(side):
        return S(side).query(Order.tenant_id, Order.status, func.count(Order.id)).group_by(
            Order.tenant_id, Order.status).order_by(Order.tenant_id, Order.status).all()

    @q("sa having")
    def _(side):
        return S(side).query(Order.account_id, func.count(Order.id), func.sum(Order.amount)).group_by(
            Order.account_id).having(func.count(Order.id) > 11).order_by(Order.account_id).all()

    @q("sa having sum")
    def _(side):
        return S(side).query(Order.status, func.sum(Order.amount)).group_by(Order.status).having(
            func.sum(Order.amount) > Decimal("50000")).order_by(Order.status).all()

    @q("sa order by aggregate")
    def _(side):
        return S(side).query(Order.account_id, func.sum(Order.amount).label("total")).group_by(
            Order.account_id).order_by(sa.desc("total"), Order.account_id).limit(5).all()

    @q("sa pages")
    def _(side):
        s = S(side)
        return [s.query(Order.id, Order.created_at).order_by(Order.created_at.desc(), Order.id).limit(10).offset(o)
                .all() for o in (0, 10, 290, 595)]

    @q("sa pages of objects")
    def _(side):
        return S(side).query(Order).order_by(Order.amount, Order.id).offset(50).limit(7).all()

    @q("sa pages by tenant")
    def _(side):
        return S(side).query(Order).filter(Order.tenant_id == 2).order_by(Order.id).limit(5).offset(3).all()

    @q("sa first")
    def _(side):
        return [S(side).query(Order).order_by(Order.created_at, Order.id).first(),
                S(side).query(Account).order_by(Account.balance.desc(), Account.id).first()]

    @q("sa join co-located by key")
    def _(side):
        return S(side).query(Account.name, func.sum(Order.amount), func.count(Order.id)).join(
            Order, sa.and_(Order.tenant_id == Account.tenant_id, Order.account_id == Account.id)).filter(
            Account.tenant_id == 3).group_by(Account.name).order_by(Account.name).all()

    @q("sa join co-located all tenants", ordered=False)
    def _(side):
        return S(side).query(Account.id, Order.id, Order.amount).join(
            Order, sa.and_(Order.tenant_id == Account.tenant_id, Order.account_id == Account.id)).filter(
            Order.amount > 900).all()

    @q("sa join co-located grouped")
    def _(side):
        return S(side).query(Account.tenant_id, func.count(Order.id), func.sum(Order.amount)).join(
            Order, sa.and_(Order.tenant_id == Account.tenant_id, Order.account_id == Account.id)).group_by(
            Account.tenant_id).order_by(Account.tenant_id).all()

    @q("sa join reference table")
    def _(side):
        return S(side).query(Tenant.region, func.count(Order.id), func.sum(Order.amount)).join(
            Order, Order.tenant_id == Tenant.id).group_by(Tenant.region).order_by(Tenant.region).all()

    @q("sa join non-key", ordered=False)
    def _(side):
        return S(side).query(Order.id, Order.status, Event.kind, Event.qty).join(
            Event, Event.order_id == Order.id).filter(Event.qty > 15).all()

    @q("sa join non-key grouped")
    def _(side):
        return S(side).query(Event.kind, func.count(Event.id), func.sum(Order.amount)).join(
            Order, Order.id == Event.order_id).group_by(Event.kind).order_by(Event.kind).all()

    @q("sa join account only id", ordered=False)
    def _(side):
        return S(side).query(Order.id, Account.name).join(Account, Account.id == Order.account_id).filter(
            Order.status == "refunded").all()

    @q("sa outer join")
    def _(side):
        return S(side).query(Account.id, func.count(Order.id)).outerjoin(
            Order, sa.and_(Order.tenant_id == Account.tenant_id, Order.account_id == Account.id,
                           Order.status == "cancelled")).group_by(Account.id).order_by(Account.id).all()

    @q("sa distinct")
    def _(side):
        s = S(side)
        return [s.query(Order.status).distinct().order_by(Order.status).all(),
                s.query(Order.tenant_id, Order.note).distinct().order_by(Order.tenant_id, Order.note).all()]

    @q("sa distinct unordered", ordered=False)
    def _(side):
        return S(side).query(Order.account_id).distinct().all()

    @q("sa count distinct")
    def _(side):
        return S(side).query(func.count(sa.distinct(Order.account_id)), func.count(sa.distinct(Order.status))).one()

    @q("sa subquery in")
    def _(side):
        sub = sa.select(Account.id).where(Account.name.like("acc-b%"))
        return S(side).query(Order.id).filter(Order.account_id.in_(sub)).order_by(Order.id).all()

    @q("sa subquery grouped joined")
    def _(side):
        sub = S(side).query(Order.account_id.label("aid"), func.sum(Order.amount).label("total")).group_by(
            Order.account_id).subquery()
        return S(side).query(Account.name, sub.c.total).join(sub, sub.c.aid == Account.id).order_by(
            sub.c.total.desc(), Account.name).limit(10).all()

    @q("sa correlated scalar subquery")
    def _(side):
        cnt = sa.select(func.count(Order.id)).where(Order.account_id == Account.id).scalar_subquery()
        return S(side).query(Account.id, cnt).order_by(Account.id).all()

    @q("sa from_self count")
    def _(side):
        return S(side).query(Order.account_id).filter(Order.amount > 700).distinct().count()

    @q("sa 2.0 select")
    def _(side):
        return S(side).execute(sa.select(Order.status, func.count()).where(Order.tenant_id.in_([2, 3]))
                               .group_by(Order.status).order_by(Order.status)).all()

    @q("sa yield_per")
    def _(side):
        s = S(side)
        rows = [(o.id, o.amount) for o in s.query(Order).order_by(Order.id).execution_options(
            stream_results=True).yield_per(50)]
        s.commit()
        return rows

    return Q


def test_sa_reads():
    for cid, fn, ordered in sa_reads():
        diff(cid, fn, ordered, recover=sa_recover)
    for side in BOTH:
        sa_recover(side)


def sa_dump(side):
    s = side.session
    out = (s.query(Tenant).order_by(Tenant.id).all(), s.query(Account).order_by(Account.tenant_id, Account.id).all(),
           s.query(Order).order_by(Order.tenant_id, Order.id).all(), s.query(Event).order_by(Event.id).all())
    out = norm(out)  # before the commit expires the objects (no lazy load per attribute)
    s.commit()
    return out


def test_sa_writes():
    def step(cid, fn):
        def run(side):
            r = fn(side.session)
            side.session.commit()
            return r
        diff(cid, run, recover=sa_recover)
        if not diff(cid + " state", sa_dump, recover=sa_recover):
            resync(["tenants", "accounts", "orders", "events"])

    def attr_update(s):
        o = s.get(Order, (ORDERS[10][0], ORDERS[10][1]))
        o.amount = o.amount + Decimal("1.25")
        o.status = "paid"
        a = s.get(Account, (ACCOUNTS[3][0], ACCOUNTS[3][1]))
        a.balance = Decimal("0.10")
        s.flush()
        return o.amount
    step("sa attribute update", attr_update)

    step("sa update by key", lambda s: s.query(Order).filter(Order.tenant_id == 4, Order.id == ORDERS[50][1]).update(
        {Order.note: "by key"}, synchronize_session="evaluate"))
    step("sa update tenant", lambda s: s.query(Order).filter(Order.tenant_id == 6).update(
        {Order.amount: Order.amount * 2}, synchronize_session=False))
    step("sa update without key", lambda s: s.query(Order).filter(Order.amount > 950).update(
        {Order.status: "big"}, synchronize_session="evaluate"))

    def update_fetch(s):
        n = s.query(Order).filter(Order.note == "rush", Order.amount < 100).update(
            {Order.note: "rushed"}, synchronize_session="fetch")
        return n, sorted((o.tenant_id, o.id) for o in s.query(Order).filter(Order.note == "rushed"))
    step("sa update fetch", update_fetch)

    def delete_obj(s):
        for o in ORDERS[100:104]:
            s.delete(s.get(Order, (o[0], o[1])))
        s.flush()
        return s.query(Order).count()
    step("sa session.delete by key", delete_obj)

    step("sa delete by key", lambda s: s.query(Order).filter(Order.tenant_id == ORDERS[200][0],
                                                             Order.id == ORDERS[200][1]).delete())
    step("sa delete without key", lambda s: s.query(Order).filter(Order.status == "cancelled").delete(
        synchronize_session=False))
    step("sa delete events without key", lambda s: s.query(Event).filter(Event.qty < 2).delete(
        synchronize_session=False))
    step("sa update reference", lambda s: s.query(Tenant).filter(Tenant.id == 2).update({Tenant.region: "au"}))

    def insert_more(s):
        s.add_all([Order(tenant_id=t, id=10000 + t, account_id=next(a[1] for a in ACCOUNTS if a[0] == t),
                         amount=Decimal("12.34"), status="new", created_at=BASE_TS) for t in range(1, 13)])
        s.flush()
        return s.query(Order).filter(Order.id > 9999).count()
    step("sa add_all new orders", insert_more)
    verify_tables("sa writes", SA_TABLES, SA_REF)
    assert_clean("sa writes")


def test_sa_rollback():
    before = {t: on_db(*PLAIN, f"SELECT count(*) FROM {t}")[0][0] for t in ("orders", "events")}

    def txn(side):
        s = side.session
        s.add_all([Order(tenant_id=t, id=20000 + t, account_id=next(a[1] for a in ACCOUNTS if a[0] == t),
                         amount=Decimal("1.00"), status="tmp", created_at=BASE_TS) for t in range(1, 13)])
        s.add_all([Event(id=50000 + k, tenant_id=1, order_id=1, kind="tmp", qty=1) for k in range(12)])
        s.flush()
        s.query(Order).filter(Order.status == "new").update({Order.note: "tmp"}, synchronize_session=False)
        seen = (s.query(Order).filter(Order.status == "tmp").count(),
                s.query(func.count(Event.id)).filter(Event.kind == "tmp").scalar(),
                s.query(Order).filter(Order.note == "tmp").count(),
                s.query(Order.status, func.count()).group_by(Order.status).order_by(Order.status).all())
        s.rollback()
        after = (s.query(Order).filter(Order.status == "tmp").count(),
                 s.query(Event).filter(Event.kind == "tmp").count(),
                 s.query(Order).filter(Order.note == "tmp").count())
        s.commit()
        return seen, after
    diff("sa rollback", txn, recover=sa_recover)
    diff("sa rollback state", sa_dump, recover=sa_recover)
    for t in ("orders", "events"):
        n = sum(on_db(port, db, f"SELECT count(*) FROM {t}")[0][0] for port, db in SHARDS)
        check(n == before[t], f"sa rollback {t} on the shards", lambda: f"{n} rows on the shards, {before[t]} before")
    assert_clean("sa rollback")


def test_sa_savepoint():
    """session.begin_nested(): SAVEPOINT after writes on two shards, writes on every shard,
    ROLLBACK TO SAVEPOINT, more writes, COMMIT: the outer writes stay, the inner ones do not."""
    def nested(side):
        s = side.session

        def orders(base, tenants, status):
            return [Order(tenant_id=t, id=base + t, account_id=next(a[1] for a in ACCOUNTS if a[0] == t),
                          amount=Decimal("6.00"), status=status, created_at=BASE_TS) for t in tenants]
        s.add_all(orders(21000, (1, 2), "outer"))
        s.flush()
        sp = s.begin_nested()
        s.add_all(orders(22000, range(1, 13), "inner"))
        s.flush()
        s.query(Order).filter(Order.status == "outer").update({Order.note: "inner"}, synchronize_session=False)
        sp.rollback()
        s.add_all(orders(21000, range(3, 13), "outer"))
        s.flush()
        s.commit()
        return sorted(s.query(Order.id, Order.status, Order.note).filter(Order.id.between(21000, 22999)).all())
    diff("sa savepoint rollback", nested, recover=sa_recover)
    if not diff("sa savepoint rollback state", sa_dump, recover=sa_recover):
        resync(["tenants", "accounts", "orders", "events"])
    assert_clean("sa savepoint")


# ================================================================== Django

DJ = {}  # name -> model class, filled by test_dj_setup


def dj_configure():
    import django
    from django.conf import settings

    def db(port, name):
        return {"ENGINE": "django.db.backends.postgresql", "NAME": name, "USER": "app", "PASSWORD": "secret",
                "HOST": HOST, "PORT": str(port), "CONN_MAX_AGE": None}
    settings.configure(
        DEBUG=False, USE_TZ=True, TIME_ZONE="UTC", INSTALLED_APPS=[], SECRET_KEY="orm-test",
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        DATABASES={"default": {}, "plain": db(*PLAIN), "proxy": db(PROXY.port, "app")})
    django.setup()
    from django.db import models

    class DTenant(models.Model):
        id = models.IntegerField(primary_key=True)
        name = models.CharField(max_length=40)
        region = models.CharField(max_length=8)

        class Meta:
            app_label = "ormapp"
            db_table = "dj_tenant"

    class DAccount(models.Model):
        id = models.BigIntegerField(primary_key=True)
        tenant = models.ForeignKey(DTenant, on_delete=models.CASCADE)
        name = models.CharField(max_length=40)
        balance = models.DecimalField(max_digits=12, decimal_places=2)

        class Meta:
            app_label = "ormapp"
            db_table = "dj_account"

    class DOrder(models.Model):
        id = models.BigIntegerField(primary_key=True)
        tenant = models.ForeignKey(DTenant, on_delete=models.CASCADE)
        account = models.ForeignKey(DAccount, on_delete=models.CASCADE, related_name="orders")
        amount = models.DecimalField(max_digits=12, decimal_places=2)
        status = models.CharField(max_length=20, null=True)
        created_at = models.DateTimeField()
        note = models.TextField(null=True)

        class Meta:
            app_label = "ormapp"
            db_table = "dj_order"

    class DNote(models.Model):  # id: bigserial, the distribution key (the proxy generates it)
        label = models.CharField(max_length=40)
        tenant_id = models.IntegerField()

        class Meta:
            app_label = "ormapp"
            db_table = "dj_note"

    DJ.update(DTenant=DTenant, DAccount=DAccount, DOrder=DOrder, DNote=DNote)
    from django.db import connections
    for side in BOTH:
        c = connections[side.alias]
        c.force_debug_cursor = True  # every statement in c.queries_log
        side.dj = c


DJ_TABLES = [("dj_account", "tenant_id, id, name, balance", "tenant_id, id"),
             ("dj_order", "tenant_id, id, account_id, amount, status, created_at, note", "tenant_id, id")]
DJ_REF = [("dj_tenant", "id, name, region", "id")]


def dj_diff(cid, fn, ordered=True):
    """diff() for Django: the side's SQL is its connection's queries_log."""
    def run(side):
        side.dj.queries_log.clear()
        try:
            return fn(side.alias)
        finally:
            side.log.extend(q["sql"] for q in side.dj.queries_log)

    def recover(side):
        from django.db import connections
        c = connections[side.alias]
        if not c.get_autocommit() and not c.in_atomic_block:
            c.rollback()
    return diff(cid, run, ordered, recover=recover)


def test_dj_setup():
    dj_configure()
    from django.db import connections
    before = two_phase_committed()
    for side in BOTH:
        with connections[side.alias].schema_editor() as ed:  # atomic: all DDL in one transaction
            for m in ("DTenant", "DAccount", "DOrder", "DNote"):
                ed.create_model(DJ[m])
    after = two_phase_committed()
    check(after > before, "dj schema_editor two-phase",
          lambda: f"two_phase_total committed {before} -> {after}: the DDL block did not commit on several shards")
    for i, (port, db) in enumerate(SHARDS):
        got = [r[0] for r in on_db(port, db, "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                                             "'public' AND table_name LIKE 'dj_%' ORDER BY 1")]
        check(got == ["dj_account", "dj_note", "dj_order", "dj_tenant"], f"dj tables s{i}", lambda: got)
        fks = on_db(port, db, "SELECT count(*) FROM information_schema.table_constraints "
                              "WHERE constraint_type = 'FOREIGN KEY' AND table_name LIKE 'dj_%'")[0][0]
        check(fks == 3, f"dj fks s{i}", lambda: f"{fks} foreign keys on s{i}, expected 3")
    # the shards' tables must be exactly the plain one's (columns, types, defaults)
    cols_sql = ("SELECT table_name, column_name, data_type, is_nullable, column_default FROM "
                "information_schema.columns WHERE table_name LIKE 'dj_%' ORDER BY 1, 2")
    plain = on_db(*PLAIN, cols_sql)
    for i, (port, db) in enumerate(SHARDS):
        got = on_db(port, db, cols_sql)
        check(got == plain, f"dj columns s{i}", lambda: first_diff(tuple(plain), tuple(got)))


def test_dj_load():
    DTenant, DAccount, DOrder = DJ["DTenant"], DJ["DAccount"], DJ["DOrder"]
    from django.db import transaction
    before = two_phase_committed()

    def load(a):
        DTenant.objects.using(a).bulk_create([DTenant(id=t, name=n, region=r) for t, n, r in TENANTS])
        with transaction.atomic(using=a):
            DAccount.objects.using(a).bulk_create([DAccount(tenant_id=t, id=i, name=n, balance=b)
                                                   for t, i, n, b in ACCOUNTS])
        objs = DOrder.objects.using(a).bulk_create(
            [DOrder(tenant_id=t, id=i, account_id=ac, amount=m, status=st, created_at=c, note=nt)
             for t, i, ac, m, st, c, nt in ORDERS[:590]], batch_size=200)
        for t, i, ac, m, st, c, nt in ORDERS[590:]:
            DOrder.objects.using(a).create(tenant_id=t, id=i, account_id=ac, amount=m, status=st, created_at=c,
                                           note=nt)
        return len(objs), DOrder.objects.using(a).count()

    for side in BOTH:  # not dj_diff: the load must happen exactly once per side
        side.dj.queries_log.clear()
        try:
            r = load(side.alias)
            check(r == (590, 600), f"dj load {side.name}", lambda: f"{r}, expected (590, 600)")
        except Exception as e:  # noqa: BLE001
            text = f"{error_of(e)}; SQL {[short(q['sql'], 300) for q in side.dj.queries_log][-3:]}"
            check(False, f"dj load {side.name}", lambda: text)
    after = two_phase_committed()
    check(after > before, "dj load two-phase", lambda: f"two_phase_total committed {before} -> {after}")
    verify_tables("dj load", DJ_TABLES, DJ_REF)
    assert_clean("dj load")


def test_dj_reads():
    from django.db.models import Avg, Count, Exists, F, Max, Min, OuterRef, Q, Subquery, Sum
    DTenant, DAccount, DOrder = DJ["DTenant"], DJ["DAccount"], DJ["DOrder"]
    O = lambda a: DOrder.objects.using(a)  # noqa: E731
    A = lambda a: DAccount.objects.using(a)  # noqa: E731
    some = [ORDERS[i][1] for i in (0, 9, 99, 199, 299, 399, 499, 599)]
    R = []

    def r(cid, ordered=True):
        def deco(fn):
            R.append((cid, fn, ordered))
            return fn
        return deco

    @r("dj get by pk")
    def _(a):
        return [O(a).get(pk=i) for i in some]

    @r("dj get by key and pk")
    def _(a):
        return [O(a).get(tenant_id=ORDERS[i][0], id=ORDERS[i][1]) for i in (5, 55, 505)]

    @r("dj get missing")
    def _(a):
        try:
            O(a).get(pk=100000)
            return "found"
        except DOrder.DoesNotExist:
            return "DoesNotExist"

    @r("dj filter by tenant", ordered=False)
    def _(a):
        return list(O(a).filter(tenant_id=8))

    @r("dj filter lookups", ordered=False)
    def _(a):
        return list(O(a).filter(Q(status="paid") | Q(note__isnull=True), amount__gte=Decimal("800"),
                                created_at__lt=BASE_TS + dt.timedelta(days=20)).values_list("id", "amount"))

    @r("dj filter across fk", ordered=False)
    def _(a):
        return list(O(a).filter(account__name__startswith="acc-c").values_list("id", flat=True))

    @r("dj filter reference fk", ordered=False)
    def _(a):
        return list(O(a).filter(tenant__region="jp", status="new").values_list("id", "tenant_id"))

    @r("dj count")
    def _(a):
        return [O(a).count(), O(a).filter(status="shipped").count(), O(a).filter(tenant_id=11).count(),
                O(a).filter(amount__gt=5000).count(), A(a).count(), DTenant.objects.using(a).count(),
                O(a).order_by("id")[:25].count(), O(a).order_by("id")[590:].count()]

    @r("dj count distinct values")
    def _(a):
        return O(a).values("status").distinct().count()

    @r("dj exists")
    def _(a):
        return [O(a).filter(id=i).exists() for i in some + [100000]] + \
               [O(a).filter(tenant_id=t, status="refunded").exists() for t in range(1, 14)] + \
               [O(a).filter(amount__gt=999).exists(), O(a).filter(amount__lt=0).exists()]

    @r("dj aggregate")
    def _(a):
        return O(a).aggregate(Sum("amount"), Count("id"), Avg("amount"), Max("created_at"), Min("amount"))

    @r("dj aggregate by tenant")
    def _(a):
        return O(a).filter(tenant_id=9).aggregate(total=Sum("amount"), n=Count("id"), mean=Avg("amount"))

    @r("dj aggregate empty")
    def _(a):
        return O(a).filter(amount__lt=0).aggregate(Sum("amount"), Count("id"), Avg("amount"))

    @r("dj aggregate count distinct")
    def _(a):
        return O(a).aggregate(n=Count("account_id", distinct=True), s=Count("status", distinct=True))

    @r("dj aggregate avg integer")
    def _(a):
        return O(a).aggregate(avg_tenant=Avg("tenant_id"), sum_tenant=Sum("tenant_id"))

    @r("dj annotate values group-by")
    def _(a):
        return list(O(a).values("status").annotate(n=Count("id"), total=Sum("amount"), mean=Avg("amount"),
                                                   last=Max("created_at")).order_by("status"))

    @r("dj annotate values unordered", ordered=False)
    def _(a):
        return list(O(a).values("tenant_id").annotate(n=Count("id"), total=Sum("amount")))

    @r("dj annotate having")
    def _(a):
        return list(O(a).values("account_id").annotate(n=Count("id")).filter(n__gt=11).order_by("account_id"))

    @r("dj annotate order by aggregate")
    def _(a):
        return list(O(a).values("account_id").annotate(total=Sum("amount")).order_by("-total", "account_id")[:5])

    @r("dj pages")
    def _(a):
        return [list(O(a).order_by("-created_at", "id").values_list("id", "created_at")[k:k + 10])
                for k in (0, 10, 290, 595)]

    @r("dj pages of objects")
    def _(a):
        return list(O(a).order_by("amount", "id")[50:57])

    @r("dj first last")
    def _(a):
        return [O(a).order_by("created_at", "id").first(), O(a).order_by("created_at", "id").last(),
                O(a).filter(tenant_id=1).earliest("created_at", "id")]

    @r("dj values_list distinct")
    def _(a):
        return [list(O(a).values_list("status", flat=True).distinct().order_by("status")),
                list(O(a).values_list("tenant_id", "note").distinct().order_by("tenant_id", "note"))]

    @r("dj select_related by key")
    def _(a):
        return [(o.id, o.account.name, o.account.balance, o.tenant.name)
                for o in O(a).select_related("account", "tenant").filter(tenant_id=3).order_by("id")]

    @r("dj select_related all", ordered=False)
    def _(a):
        return [(o.id, o.account.name, o.tenant.region)
                for o in O(a).select_related("account", "tenant").filter(amount__gt=Decimal("950"))]

    @r("dj prefetch_related")
    def _(a):
        return [(ac.id, sorted(o.id for o in ac.orders.all()))
                for ac in A(a).filter(tenant_id__in=[2, 5]).prefetch_related("orders").order_by("id")]

    @r("dj annotate reverse fk count")
    def _(a):
        return list(A(a).annotate(n=Count("orders"), total=Sum("orders__amount")).order_by("id").values_list(
            "id", "n", "total"))

    @r("dj subquery in")
    def _(a):
        return list(A(a).filter(id__in=O(a).filter(amount__gt=Decimal("990")).values("account_id")).order_by(
            "id").values_list("id", flat=True))

    @r("dj subquery outerref")
    def _(a):
        last = O(a).filter(account_id=OuterRef("pk")).order_by("-created_at", "-id").values("created_at")[:1]
        return list(A(a).annotate(last=Subquery(last)).order_by("id").values_list("id", "last"))

    @r("dj exists annotation")
    def _(a):
        refunded = O(a).filter(account_id=OuterRef("pk"), status="refunded")
        return list(A(a).annotate(has=Exists(refunded)).order_by("id").values_list("id", "has"))

    @r("dj F filter", ordered=False)
    def _(a):
        return list(O(a).filter(amount__gt=F("account__balance") / 100).values_list("id", flat=True))

    @r("dj in_bulk")
    def _(a):
        return sorted(O(a).in_bulk(some).items())

    @r("dj iterator")
    def _(a):
        return [(o.id, o.amount) for o in O(a).order_by("id").iterator(chunk_size=100)]

    for cid, fn, ordered in R:
        dj_diff(cid, fn, ordered)


def dj_dump(a):
    DTenant, DAccount, DOrder = DJ["DTenant"], DJ["DAccount"], DJ["DOrder"]
    return (list(DTenant.objects.using(a).order_by("id")), list(DAccount.objects.using(a).order_by("id")),
            list(DOrder.objects.using(a).order_by("id")))


def test_dj_writes():
    from django.db import transaction
    from django.db.models import F
    DTenant, DAccount, DOrder = DJ["DTenant"], DJ["DAccount"], DJ["DOrder"]
    O = lambda a: DOrder.objects.using(a)  # noqa: E731

    def step(cid, fn):
        dj_diff(cid, fn)
        if not dj_diff(cid + " state", dj_dump):
            resync(["dj_tenant", "dj_account", "dj_order"])

    def save_existing(a):
        o = O(a).get(pk=ORDERS[20][1])
        o.amount += Decimal("0.55")
        o.note = "saved"
        o.save()
        o2 = O(a).get(tenant_id=ORDERS[21][0], id=ORDERS[21][1])
        o2.status = "paid"
        o2.save(update_fields=["status"])
        return O(a).get(pk=ORDERS[20][1]).amount
    step("dj save", save_existing)

    def save_new_with_pk(a):  # Model.save() of a new object with its pk: UPDATE ... WHERE id = ..., then INSERT
        for k, t in enumerate((1, 5, 9)):
            DOrder(tenant_id=t, id=50000 + k, account_id=next(x[1] for x in ACCOUNTS if x[0] == t),
                   amount=Decimal("7.70"), status="new", created_at=BASE_TS).save(using=a)
        return sorted(O(a).filter(id__gte=50000).values_list("id", "tenant_id"))
    step("dj save new with pk", save_new_with_pk)
    step("dj update by key", lambda a: O(a).filter(tenant_id=ORDERS[30][0], id=ORDERS[30][1]).update(
        note="upd", amount=F("amount") + 1))
    step("dj update by tenant", lambda a: O(a).filter(tenant_id=10).update(amount=F("amount") * 3))
    step("dj update without key", lambda a: O(a).filter(status="new", amount__lt=300).update(status="old"))
    step("dj update via fk filter", lambda a: O(a).filter(account__name__startswith="acc-d").update(note="d"))
    step("dj delete by key", lambda a: O(a).filter(tenant_id=ORDERS[40][0], id=ORDERS[40][1]).delete())
    step("dj delete without key", lambda a: O(a).filter(status="refunded", amount__gt=500).delete())
    step("dj delete cascade", lambda a: DAccount.objects.using(a).filter(id__in=[ACCOUNTS[7][1],
                                                                                 ACCOUNTS[33][1]]).delete())
    step("dj delete instance", lambda a: O(a).get(pk=ORDERS[60][1]).delete())

    def atomic_rollback(a):
        class Rollback(Exception):
            pass
        try:
            with transaction.atomic(using=a):
                DOrder.objects.using(a).bulk_create(
                    [DOrder(tenant_id=t, id=30000 + t, account_id=next(x[1] for x in ACCOUNTS if x[0] == t and
                                                                       x[1] not in (ACCOUNTS[7][1], ACCOUNTS[33][1])),
                            amount=Decimal("2.00"), status="tmp", created_at=BASE_TS) for t in range(1, 13)])
                O(a).filter(status="paid").update(note="tmp")
                seen = (O(a).filter(status="tmp").count(), O(a).filter(note="tmp").count(),
                        list(O(a).filter(status="tmp").order_by("id").values_list("id", "tenant_id")))
                raise Rollback
        except Rollback:
            pass
        return seen, O(a).filter(status="tmp").count(), O(a).filter(note="tmp").count()
    step("dj atomic rollback", atomic_rollback)

    def savepoint(a):
        acc = {t: next(x[1] for x in ACCOUNTS if x[0] == t and x[1] not in (ACCOUNTS[7][1], ACCOUNTS[33][1]))
               for t in range(1, 13)}
        with transaction.atomic(using=a):
            for t in (1, 2):
                O(a).create(tenant_id=t, id=40000 + t, account_id=acc[t], amount=Decimal("3"), status="outer",
                            created_at=BASE_TS)
            try:
                with transaction.atomic(using=a):  # SAVEPOINT ... ROLLBACK TO SAVEPOINT
                    for t in range(1, 13):
                        O(a).create(tenant_id=t, id=41000 + t, account_id=acc[t], amount=Decimal("4"),
                                    status="inner", created_at=BASE_TS)
                    O(a).filter(status="outer").update(note="inner")
                    raise ValueError("roll back the savepoint")
            except ValueError:
                pass
            for t in range(3, 13):
                O(a).create(tenant_id=t, id=40000 + t, account_id=acc[t], amount=Decimal("5"), status="outer",
                            created_at=BASE_TS)
        return (sorted(O(a).filter(status__in=["outer", "inner"]).values_list("id", "status", "note")),)
    step("dj savepoint rollback", savepoint)

    def get_or_create(a):
        t1, c1 = DTenant.objects.using(a).get_or_create(id=3, defaults={"name": "x", "region": "x"})
        t2, c2 = DTenant.objects.using(a).get_or_create(id=13, defaults={"name": "tenant-13", "region": "eu"})
        o, c3 = O(a).get_or_create(id=ORDERS[70][1], defaults={})
        return (t1, c1, t2, c2, o, c3)
    step("dj get_or_create", get_or_create)
    verify_tables("dj writes", DJ_TABLES, DJ_REF)
    assert_clean("dj writes")


def test_dj_bulk_create_generated_keys():
    """dj_note: bulk_create without primary keys; the proxy generates the key (bigserial
    distribution key) and RETURNING "id" must come back in the objects' order."""
    DNote = DJ["DNote"]
    labels = [f"note-{k:03d}-{rng.choice('xyz')}" for k in range(60)]
    results = {}
    for side in BOTH:
        side.dj.queries_log.clear()
        try:
            objs = DNote.objects.using(side.alias).bulk_create([DNote(label=lb, tenant_id=k % 12 + 1)
                                                                for k, lb in enumerate(labels)])
            single = DNote.objects.using(side.alias).create(label="single", tenant_id=1)
            ids = [o.id for o in objs]
            rows = dict(DNote.objects.using(side.alias).values_list("id", "label"))
            wrong = [(o.id, o.label, rows.get(o.id)) for o in objs + [single] if rows.get(o.id) != o.label]
            results[side.name] = (len(set(ids)), None in ids, len(rows), wrong)
        except Exception as e:  # noqa: BLE001
            results[side.name] = ("error", error_of(e), [short(q["sql"], 300) for q in side.dj.queries_log][-2:])
    exp = (60, False, 61, [])
    for name, got in results.items():
        check(got == exp, f"dj bulk_create generated keys {name}",
              lambda: f"(distinct ids, a None id, rows, objects whose id names another row): expected {exp} "
                      f"got {short(got, 900)}")
    per = [on_db(port, db, "SELECT count(*) FROM dj_note")[0][0] for port, db in SHARDS]
    check(sum(per) == 61 and all(per), "dj bulk_create generated keys spread", lambda: f"rows per shard {per}")
    assert_clean("dj bulk_create")


def test_clean():
    assert_clean("end")


TESTS = [test_sa_create_all, test_sa_load, test_sa_reads, test_sa_writes, test_sa_rollback, test_sa_savepoint,
         test_dj_setup, test_dj_load, test_dj_reads, test_dj_writes, test_dj_bulk_create_generated_keys, test_clean]


def setup():
    global PROXY
    DBS.create()
    PROXY = sptest.Proxy("orm", proxy_config(), WORKDIR).start()
    sa_engine(PLAIN_S, *PLAIN)
    sa_engine(PROXY_S, PROXY.port, "app")
    print(f"     SQLAlchemy {sa.__version__}, psycopg2 {psycopg2.__version__.split()[0]}", flush=True)


def teardown():
    for side in BOTH:
        try:
            if side.session is not None:
                side.session.close()
            if side.engine is not None:
                side.engine.dispose()
        except Exception:  # noqa: BLE001
            pass
    try:
        from django.db import connections
        connections.close_all()
    except Exception:  # noqa: BLE001
        pass
    if PROXY is not None:
        PROXY.stop()
    DBS.drop()


if __name__ == "__main__":
    t0 = time.monotonic()
    sys.exit(sptest.run_tests(TESTS, setup, teardown, checks=CHECKS, watch=lambda: [PROXY] if PROXY else []))

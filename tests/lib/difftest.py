"""The comparison machinery of the differential tests (test_scatter_differential.py,
test_combine_differential.py): the same statement run on one plain PostgreSQL and
through splitpoint, in the simple protocol (psycopg2, values as the server's text) and
the extended protocol with text or binary results (pgwire, raw bytes), and the results
compared column by column, tag and rows (in order, as multisets, or in sort-key order
with ties as multisets).

A target is any object with `psy` (a psycopg2 connection, autocommit) and `wire` (a
pgwire connection).
"""

import re

import psycopg2

MODES = ("simple", "text", "binary")


class Res:
    def __init__(self, cols=None, rows=None, tag=None, error=None):
        self.cols = cols or []       # (name, type_oid, size, typmod, format) or (name, oid) for simple
        self.rows = rows or []       # list of tuples (str / bytes / None)
        self.tag = tag
        self.error = error           # (sqlstate, message) or None

    def __repr__(self):
        if self.error:
            return f"ERROR {self.error}"
        return f"cols={self.cols} tag={self.tag} rows({len(self.rows)})={short(self.rows)}"


def short(x, n=400):
    s = repr(x)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


def to_psy(sql, params):
    """$n placeholders -> psycopg2's %(pn)s (literal % doubled)."""
    if not params:
        return sql, None
    s = sql.replace("%", "%%")
    s = re.sub(r"\$(\d+)", lambda m: f"%(p{m.group(1)})s", s)
    return s, {f"p{i + 1}": v for i, v in enumerate(params)}


def wire_param(v):
    """A parameter in PostgreSQL's text form (arrays: integers bare, strings quoted)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "{" + ",".join(str(x) if isinstance(x, int) else
                              '"' + str(x).replace("\\", "\\\\").replace('"', '\\"') + '"' for x in v) + "}"
    return str(v)


def run_simple(t, sql, params=()):
    s, args = to_psy(sql, list(params))
    cur = t.psy.cursor()
    try:
        cur.execute(s, args)
    except psycopg2.Error as e:
        return Res(error=(e.pgcode, (e.pgerror or str(e)).strip()))
    cols = [(d.name, d.type_code) for d in (cur.description or [])]
    rows = [tuple(r) for r in cur.fetchall()] if cur.description else []
    tag = cur.statusmessage
    del t.psy.notices[:]
    cur.close()
    res = Res(cols, rows, tag)
    res.notices = list(t.psy.notices)
    del t.psy.notices[:]
    return res


def col_tuple(c):
    return (c.name, c.type_oid, c.type_size, c.type_modifier, c.format)


def res_of(r):
    """A Res from a pgwire QueryResult (its last statement)."""
    if r.error:
        return Res(error=(r.error.get("C"), r.error.get("M")))
    st = r.results[-1] if r.results else None
    if st is None:
        return Res(error=("??", "no result"))
    res = Res([col_tuple(c) for c in st.columns], [tuple(x) for x in st.rows], st.tag)
    res.notices = r.notices
    return res


def run_ext(t, sql, params=(), binary=False):
    return res_of(t.wire.extended(sql, [wire_param(p) for p in params], result_formats=[1] if binary else []))


def run(t, mode, sql, params=()):
    if mode == "simple":
        return run_simple(t, sql, params)
    return run_ext(t, sql, params, binary=(mode == "binary"))


def multiset(rows):
    return sorted(rows, key=repr)


def groups_by(rows, idx):
    out = []
    for r in rows:
        k = tuple(r[i] for i in idx)
        if out and out[-1][0] == k:
            out[-1][1].append(r)
        else:
            out.append((k, [r]))
    return out


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at row {i}: expected {short(x, 300)}, got {short(y, 300)}"
    if len(a) != len(b):
        return f"row count: expected {len(a)}, got {len(b)}"
    return "no difference"


def compare(check, sid, mode, sql, params, exp, got, order):
    """check(ok, sid, mode, what) records one check. order: 'set' | 'exact' | ('keys', [idx...], partial) | 'count' | 'error' (same SQLSTATE)"""
    head = f"{sql}  params={list(params)}"
    if order == "error":
        check(exp.error is not None, sid, mode, lambda: f"plain PostgreSQL did not fail (test bug): {head}: {exp}")
        return check(exp.error is not None and got.error is not None and got.error[0] == exp.error[0], sid, mode,
                     lambda: f"{head}\n    expected error {exp.error}\n    got {got.error or short(got)}")
    if exp.error:
        return check(False, sid, mode, lambda: f"plain PostgreSQL failed (test bug): {head}: {exp.error}")
    if got.error:
        return check(False, sid, mode, lambda: f"{head}\n    expected {short(exp)}\n    got error {got.error}")
    ok = check(exp.cols == got.cols, sid, mode,
               lambda: f"{head}\n    columns: expected {exp.cols}\n    got      {got.cols}")
    ok &= check(exp.tag == got.tag, sid, mode, lambda: f"{head}\n    tag: expected {exp.tag!r}, got {got.tag!r}")
    if order == "exact":
        ok &= check(exp.rows == got.rows, sid, mode,
                    lambda: f"{head}\n    rows (ordered): {first_diff(exp.rows, got.rows)}")
    elif order == "set":
        a, b = multiset(exp.rows), multiset(got.rows)
        ok &= check(a == b, sid, mode, lambda: f"{head}\n    rows (multiset): {first_diff(a, b)}")
    elif order == "count":
        ok &= check(len(exp.rows) == len(got.rows), sid, mode,
                    lambda: f"{head}\n    row count: expected {len(exp.rows)}, got {len(got.rows)}")
    else:
        _, idx, partial = order
        ka = [tuple(r[i] for i in idx) for r in exp.rows]
        kb = [tuple(r[i] for i in idx) for r in got.rows]
        ok &= check(ka == kb, sid, mode, lambda: f"{head}\n    sort keys in order: {first_diff(ka, kb)}")
        if ka == kb:
            ga, gb = groups_by(exp.rows, idx), groups_by(got.rows, idx)
            bad = []
            for n, ((k, ra), (_, rb)) in enumerate(zip(ga, gb)):
                if partial and (n == 0 or n == len(ga) - 1):
                    continue
                if multiset(ra) != multiset(rb):
                    bad.append((k, multiset(ra), multiset(rb)))
            ok &= check(not bad, sid, mode,
                        lambda: f"{head}\n    tied group {bad[0][0]!r} differs: expected {short(bad[0][1])}, "
                                f"got {short(bad[0][2])}")
    return ok

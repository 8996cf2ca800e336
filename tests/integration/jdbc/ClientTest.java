// Real clients, unmodified: the PostgreSQL JDBC driver (pgjdbc) through splitpoint with
// sharding on. Run by tests/integration/test_client_jdbc.sh, which starts the proxy and
// passes: proxy port, database, shard 0 port (for PostgreSQL's own avg()), and a file of
// "id shard" lines (hash placement of accounts ids computed by PostgreSQL).
//
// Layout (tests/lib/clients.py): accounts(id bigint primary key, owner text, balance
// numeric) hash-sharded, events(id bigint primary key, kind text) range-sharded at 1000,
// currencies(code text primary key, name text) a reference table.
//
// Output: "ok   jdbc: ..." per check; a check that fails because of the proxy and is
// marked known prints "KNOWN FAILURE: ..." and does not fail the run. Exit 1 on any
// other failure.

import java.io.BufferedReader;
import java.io.FileReader;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.sql.Array;
import java.sql.BatchUpdateException;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

public class ClientTest {
    static final String C = "jdbc";
    static int passed = 0;
    static final List<String> knownFailures = new ArrayList<>();

    static final class CheckFailed extends RuntimeException {
        CheckFailed(String m) { super(m); }
    }

    static void ok(String what) {
        passed++;
        System.out.println("ok   " + C + ": " + what);
    }

    static void eq(String what, Object got, Object expected) {
        if (!Objects.equals(got, expected)) {
            throw new CheckFailed(C + ": " + what + ": expected " + expected + ", got " + got);
        }
        ok(what);
    }

    static void check(String what, boolean cond, String detail) {
        if (!cond) throw new CheckFailed(C + ": " + what + (detail.isEmpty() ? "" : ": " + detail));
        ok(what);
    }

    /** A check that currently fails because of the proxy: reported, not fatal. */
    static boolean known(String what, Object got, Object expected, String diagnosis) {
        if (Objects.equals(got, expected)) {
            passed++;
            System.out.println("KNOWN FAILURE NOW PASSES: " + C + ": " + what + " -- make it a hard check again");
            return true;
        }
        String line = "KNOWN FAILURE: " + C + ": " + what + " (expected " + expected + " vs got " + got + ")"
                + (diagnosis.isEmpty() ? "" : " [" + diagnosis + "]");
        System.out.println(line);
        knownFailures.add(line);
        return false;
    }

    // ------------------------------------------------------------------ data model

    static final class Acc {
        final String owner;
        final BigDecimal balance;
        Acc(String owner, BigDecimal balance) { this.owner = owner; this.balance = balance; }
    }

    static final TreeMap<Long, Acc> accounts = new TreeMap<>();
    static final TreeMap<Long, String> events = new TreeMap<>();
    static final TreeMap<String, String> currencies = new TreeMap<>();
    static final Map<Long, Integer> shardOf = new HashMap<>();
    static final long[] EVENT_IDS = {5, 10, 500, 999, 1000, 1001, 1500, 5000};

    static String ownerOf(long i) { return "owner-" + (i % 5); }
    static BigDecimal balanceOf(long i) {
        return BigDecimal.valueOf(i * 37 % 101).add(BigDecimal.valueOf(i).movePointLeft(2));
    }
    static String kindOf(long i) { return i % 2 == 1 ? "open" : "close"; }
    static String num(BigDecimal b) { return b.stripTrailingZeros().toPlainString(); }
    static String row(long id, String owner, BigDecimal b) { return id + "|" + owner + "|" + num(b); }

    static List<String> rows(ResultSet rs) throws SQLException {
        List<String> out = new ArrayList<>();
        int n = rs.getMetaData().getColumnCount();
        while (rs.next()) {
            StringBuilder sb = new StringBuilder();
            for (int c = 1; c <= n; c++) {
                if (c > 1) sb.append('|');
                Object o = rs.getObject(c);
                sb.append(o instanceof BigDecimal ? num((BigDecimal) o) : String.valueOf(o));
            }
            out.add(sb.toString());
        }
        rs.close();
        return out;
    }

    static List<String> query(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) ps.setObject(i + 1, params[i]);
            return rows(ps.executeQuery());
        }
    }

    static List<String> topByBalance(int n, int offset) {
        List<Map.Entry<Long, Acc>> es = new ArrayList<>(accounts.entrySet());
        es.sort((x, y) -> {
            int c = y.getValue().balance.compareTo(x.getValue().balance);
            return c != 0 ? c : Long.compare(x.getKey(), y.getKey());
        });
        List<String> out = new ArrayList<>();
        for (int i = offset; i < Math.min(es.size(), offset + n); i++) {
            Map.Entry<Long, Acc> e = es.get(i);
            out.add(row(e.getKey(), e.getValue().owner, e.getValue().balance));
        }
        return out;
    }

    static List<String> byId(int n, int offset) {
        List<String> out = new ArrayList<>();
        int k = 0;
        for (Map.Entry<Long, Acc> e : accounts.entrySet()) {
            if (k >= offset && k < offset + n) out.add(row(e.getKey(), e.getValue().owner, e.getValue().balance));
            k++;
        }
        return out;
    }

    static List<String> allAccounts() { return byId(Integer.MAX_VALUE, 0); }

    static BigDecimal sum() {
        BigDecimal s = BigDecimal.ZERO;
        for (Acc a : accounts.values()) s = s.add(a.balance);
        return s;
    }

    static List<Long> idsOn(int shard, long from, long to) {
        List<Long> out = new ArrayList<>();
        for (long i = from; i < to; i++) if (shardOf.get(i) == shard) out.add(i);
        return out;
    }

    static String sqlState(SQLException e) { return e.getSQLState(); }

    // ------------------------------------------------------------------ scenario

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String db = args[1];
        int pg0 = Integer.parseInt(args[2]);
        try (BufferedReader r = new BufferedReader(new FileReader(args[3]))) {
            String line;
            while ((line = r.readLine()) != null) {
                String[] p = line.trim().split(" ");
                if (p.length == 2) shardOf.put(Long.parseLong(p[0]), Integer.parseInt(p[1]));
            }
        }
        String url = "jdbc:postgresql://127.0.0.1:" + port + "/" + db + "?user=app&password=secret&connectTimeout=10";
        int rc = 0;
        try {
            run(url, db, pg0);
        } catch (CheckFailed e) {
            System.out.println("FAIL: " + e.getMessage());
            rc = 1;
        } catch (Exception e) {
            System.out.println("FAIL: unexpected exception");
            e.printStackTrace(System.out);
            if (e instanceof SQLException) {
                SQLException n = ((SQLException) e).getNextException();
                if (n != null) {
                    System.out.println("next exception:");
                    n.printStackTrace(System.out);
                }
            }
            rc = 1;
        }
        System.out.println(C + ": " + passed + " checks passed, " + knownFailures.size() + " known failure(s)");
        for (String k : knownFailures) System.out.println("  " + k);
        System.exit(rc);
    }

    static void run(String url, String db, int pg0) throws Exception {
        // -- connect and auth ----------------------------------------------------------
        Connection conn = DriverManager.getConnection(url);
        DatabaseMetaData md = conn.getMetaData();
        System.out.println("driver: " + md.getDriverName() + " " + md.getDriverVersion() + "; server "
                + md.getDatabaseProductVersion() + "; java " + System.getProperty("java.version"));
        eq("connect with scram-sha-256: current_user, current_database",
                query(conn, "SELECT current_user, current_database()"), List.of("app|" + db));
        try {
            DriverManager.getConnection(url.replace("password=secret", "password=wrong")).close();
            check("wrong password is refused", false, "connected");
        } catch (SQLException e) {
            eq("wrong password: SQLSTATE", sqlState(e), "28P01");
        }

        // -- DDL ---------------------------------------------------------------------------
        try (Statement st = conn.createStatement()) {
            st.execute("DROP TABLE IF EXISTS accounts, events, currencies");
            st.execute("CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, balance numeric)");
            st.execute("CREATE TABLE events (id bigint PRIMARY KEY, kind text)");
            st.execute("CREATE TABLE currencies (code text PRIMARY KEY, name text)");
        }
        ok("DROP/CREATE TABLE accounts, events, currencies through the proxy");

        // -- reference table: multi-row insert ------------------------------------------
        try (PreparedStatement ps = conn.prepareStatement(
                "INSERT INTO currencies (code, name) VALUES (?, ?), (?, ?), (?, ?)")) {
            String[][] cs = {{"EUR", "Euro"}, {"USD", "US Dollar"}, {"JPY", "Yen"}};
            for (int i = 0; i < 3; i++) {
                ps.setString(2 * i + 1, cs[i][0]);
                ps.setString(2 * i + 2, cs[i][1]);
                currencies.put(cs[i][0], cs[i][1]);
            }
            eq("multi-row INSERT into reference table: update count", ps.executeUpdate(), 3);
        }

        // -- single-row inserts: one PreparedStatement executed 10 times ------------------
        try (PreparedStatement ps = conn.prepareStatement(
                "INSERT INTO accounts (id, owner, balance) VALUES (?, ?, ?)")) {
            org.postgresql.PGStatement pgs = ps.unwrap(org.postgresql.PGStatement.class);
            eq("prepareThreshold (driver default)", pgs.getPrepareThreshold(), 5);
            for (long i = 1; i <= 10; i++) {
                ps.setLong(1, i);
                ps.setString(2, ownerOf(i));
                ps.setBigDecimal(3, balanceOf(i));
                int n = ps.executeUpdate();
                if (n != 1) eq("INSERT id=" + i + " update count", n, 1);
                accounts.put(i, new Acc(ownerOf(i), balanceOf(i)));
            }
            check("INSERT PreparedStatement switched to a server-side prepared statement after 5 executions",
                    pgs.isUseServerPrepare(), "");
        }
        ok("10 single-row INSERTs (executions 6..10 use the named server-side statement)");

        // -- multi-row insert across shards -------------------------------------------------
        StringBuilder sb = new StringBuilder("INSERT INTO accounts (id, owner, balance) VALUES ");
        for (long i = 11; i <= 40; i++) sb.append(i > 11 ? ", " : "").append("(?, ?, ?)");
        try (PreparedStatement ps = conn.prepareStatement(sb.toString())) {
            int k = 1;
            for (long i = 11; i <= 40; i++) {
                ps.setLong(k++, i);
                ps.setString(k++, ownerOf(i));
                ps.setBigDecimal(k++, balanceOf(i));
                accounts.put(i, new Acc(ownerOf(i), balanceOf(i)));
            }
            eq("multi-row INSERT of 30 accounts on both shards: update count", ps.executeUpdate(), 30);
        }
        sb = new StringBuilder("INSERT INTO events (id, kind) VALUES ");
        for (int i = 0; i < EVENT_IDS.length; i++) sb.append(i > 0 ? ", " : "").append("(?, ?)");
        try (PreparedStatement ps = conn.prepareStatement(sb.toString())) {
            int k = 1;
            for (long i : EVENT_IDS) {
                ps.setLong(k++, i);
                ps.setString(k++, kindOf(i));
                events.put(i, kindOf(i));
            }
            eq("multi-row INSERT into range-sharded events (both ranges): update count", ps.executeUpdate(),
                    EVENT_IDS.length);
        }

        // -- single-shard reads: one PreparedStatement, 40 keys (server-side after 5) --------
        try (PreparedStatement ps = conn.prepareStatement("SELECT owner, balance FROM accounts WHERE id = ?")) {
            for (long i = 1; i <= 40; i++) {
                ps.setLong(1, i);
                List<String> got = rows(ps.executeQuery());
                Acc a = accounts.get(i);
                if (!got.equals(List.of(a.owner + "|" + num(a.balance)))) {
                    eq("server-prepared single-shard SELECT id=" + i, got, List.of(a.owner + "|" + num(a.balance)));
                }
            }
            check("SELECT PreparedStatement is server-side prepared after 5 executions",
                    ps.unwrap(org.postgresql.PGStatement.class).isUseServerPrepare(), "");
        }
        ok("single-shard SELECT executed 40 times with keys on both shards");
        try (PreparedStatement ps = conn.prepareStatement("UPDATE accounts SET balance = balance + ? WHERE id = ?")) {
            ps.setBigDecimal(1, new BigDecimal("0.50"));
            ps.setLong(2, 7);
            eq("single-shard UPDATE update count", ps.executeUpdate(), 1);
            accounts.put(7L, new Acc(accounts.get(7L).owner, accounts.get(7L).balance.add(new BigDecimal("0.50"))));
        }
        eq("UPDATE visible", query(conn, "SELECT balance FROM accounts WHERE id = ?", 7L),
                List.of(num(accounts.get(7L).balance)));
        eq("single-shard join with a reference table",
                query(conn, "SELECT a.id, c.name FROM accounts a JOIN currencies c ON c.code = ? WHERE a.id = ?",
                        "EUR", 3L), List.of("3|Euro"));
        List<String> want = new ArrayList<>();
        for (long i : EVENT_IDS) if (i >= 990 && i <= 1010) want.add(i + "|" + kindOf(i));
        eq("range read across the bound (BETWEEN 990 AND 1010)",
                query(conn, "SELECT id, kind FROM events WHERE id BETWEEN ? AND ? ORDER BY id", 990L, 1010L), want);

        // -- scatter reads ---------------------------------------------------------------------
        try (Statement st = conn.createStatement()) {
            eq("scatter ORDER BY balance DESC, id LIMIT 5 (simple Statement)",
                    rows(st.executeQuery("SELECT id, owner, balance FROM accounts ORDER BY balance DESC, id LIMIT 5")),
                    topByBalance(5, 0));
        }
        try (PreparedStatement ps = conn.prepareStatement(
                "SELECT id, owner, balance FROM accounts ORDER BY id LIMIT ? OFFSET ?")) {
            for (int rep = 0; rep < 7; rep++) { // past prepareThreshold: binary-capable named statement
                ps.setInt(1, 5);
                ps.setInt(2, 10 + rep);
                List<String> got = rows(ps.executeQuery());
                if (!got.equals(byId(5, 10 + rep))) {
                    eq("scatter ORDER BY id LIMIT ? OFFSET " + (10 + rep) + " (execution " + (rep + 1) + ")", got,
                            byId(5, 10 + rep));
                }
            }
        }
        ok("scatter ORDER BY id LIMIT ? OFFSET ? executed 7 times (server-side prepared from the 6th)");
        BigDecimal lo = null, hi = null;
        for (Acc a : accounts.values()) {
            lo = lo == null || a.balance.compareTo(lo) < 0 ? a.balance : lo;
            hi = hi == null || a.balance.compareTo(hi) > 0 ? a.balance : hi;
        }
        eq("scatter count/sum/min/max",
                query(conn, "SELECT count(*), sum(balance), min(balance), max(balance) FROM accounts"),
                List.of(accounts.size() + "|" + num(sum()) + "|" + num(lo) + "|" + num(hi)));
        String wantAvg;
        try (Connection direct = DriverManager.getConnection(
                "jdbc:postgresql://127.0.0.1:" + pg0 + "/" + db + "?user=app&password=secret");
             PreparedStatement ps = direct.prepareStatement("SELECT avg(x)::text FROM unnest(?::numeric[]) x")) {
            List<String> vals = new ArrayList<>();
            for (Acc a : accounts.values()) vals.add(a.balance.toPlainString());
            ps.setArray(1, direct.createArrayOf("numeric", vals.toArray()));
            ResultSet rs = ps.executeQuery();
            rs.next();
            wantAvg = rs.getString(1);
        }
        eq("scatter avg(balance) equals PostgreSQL's avg over all rows (as text)",
                query(conn, "SELECT avg(balance)::text FROM accounts"), List.of(wantAvg));
        TreeMap<String, Object[]> groups = new TreeMap<>();
        for (Acc a : accounts.values()) {
            Object[] g = groups.computeIfAbsent(a.owner, k -> new Object[]{0L, BigDecimal.ZERO});
            g[0] = (Long) g[0] + 1;
            g[1] = ((BigDecimal) g[1]).add(a.balance);
        }
        want = new ArrayList<>();
        for (Map.Entry<String, Object[]> e : groups.entrySet())
            want.add(e.getKey() + "|" + e.getValue()[0] + "|" + num((BigDecimal) e.getValue()[1]));
        eq("scatter GROUP BY owner ORDER BY owner",
                query(conn, "SELECT owner, count(*), sum(balance) FROM accounts GROUP BY owner ORDER BY owner"), want);

        // -- setFetchSize on a scatter read (portal fetched in chunks) ----------------------
        conn.setAutoCommit(false);
        try (PreparedStatement ps = conn.prepareStatement("SELECT id, owner, balance FROM accounts ORDER BY id")) {
            ps.setFetchSize(7);
            eq("setFetchSize(7) scatter ORDER BY id: all rows in order", rows(ps.executeQuery()), allAccounts());
        }
        conn.commit();
        conn.setAutoCommit(true);

        // -- transactions --------------------------------------------------------------------
        List<Long> s0 = new ArrayList<>(), s1 = new ArrayList<>();
        for (long i : accounts.keySet()) (shardOf.get(i) == 0 ? s0 : s1).add(i);
        List<Long> new0 = idsOn(0, 41, 80), new1 = idsOn(1, 41, 80);
        long a = s0.get(0), b = s0.get(1), d = s1.get(0);
        conn.setAutoCommit(false);
        exec(conn, "UPDATE accounts SET balance = balance - 5 WHERE id = ?", a);
        exec(conn, "UPDATE accounts SET balance = balance + 5 WHERE id = ?", b);
        exec(conn, "INSERT INTO accounts (id, owner, balance) VALUES (?, ?, ?)", new0.get(0), "txn", BigDecimal.ONE);
        eq("scatter read inside a transaction sees its own insert", query(conn, "SELECT count(*) FROM accounts"),
                List.of(String.valueOf(accounts.size() + 1)));
        eq("read of the other shard inside the write transaction",
                query(conn, "SELECT balance FROM accounts WHERE id = ?", d), List.of(num(accounts.get(d).balance)));
        conn.commit();
        conn.setAutoCommit(true);
        accounts.put(a, new Acc(accounts.get(a).owner, accounts.get(a).balance.subtract(BigDecimal.valueOf(5))));
        accounts.put(b, new Acc(accounts.get(b).owner, accounts.get(b).balance.add(BigDecimal.valueOf(5))));
        accounts.put(new0.get(0), new Acc("txn", BigDecimal.ONE));
        List<Long> ids = new ArrayList<>(List.of(a, b, new0.get(0)));
        ids.sort(null);
        want = new ArrayList<>();
        for (long i : ids) want.add(i + "|" + num(accounts.get(i).balance));
        eq("committed transaction is visible",
                query(conn, "SELECT id, balance FROM accounts WHERE id IN (?, ?, ?) ORDER BY id", a, b, new0.get(0)),
                want);

        conn.setAutoCommit(false);
        exec(conn, "UPDATE accounts SET balance = 0 WHERE id = ?", d);
        exec(conn, "INSERT INTO accounts (id, owner, balance) VALUES (?, ?, ?)", new1.get(0), "gone", BigDecimal.TEN);
        eq("transaction reads its own uncommitted update",
                query(conn, "SELECT balance FROM accounts WHERE id = ?", d), List.of("0"));
        conn.rollback();
        conn.setAutoCommit(true);
        eq("rolled-back transaction left nothing",
                query(conn, "SELECT id, balance FROM accounts WHERE id IN (?, ?) ORDER BY id", d, new1.get(0)),
                List.of(d + "|" + num(accounts.get(d).balance)));

        conn.setAutoCommit(false);
        exec(conn, "UPDATE accounts SET balance = balance + 1 WHERE id = ?", a);
        try {
            exec(conn, "UPDATE accounts SET balance = balance + 1 WHERE id = ?", d);
            check("a write to a second shard in one transaction is refused", false, "accepted");
        } catch (SQLException e) {
            eq("a write to a second shard in one transaction: SQLSTATE", sqlState(e), "SPT01");
        }
        conn.rollback();
        conn.setAutoCommit(true);
        want = new ArrayList<>();
        for (long i : new long[]{Math.min(a, d), Math.max(a, d)}) want.add(i + "|" + num(accounts.get(i).balance));
        eq("after SPT01 and rollback() neither write is there",
                query(conn, "SELECT id, balance FROM accounts WHERE id IN (?, ?) ORDER BY id", a, d), want);

        // -- errors followed by good statements ------------------------------------------
        try {
            exec(conn, "INSERT INTO accounts (id, owner, balance) VALUES (?, ?, ?)", 1L, "dup", BigDecimal.ZERO);
            check("duplicate key is an error", false, "");
        } catch (SQLException e) {
            eq("duplicate key: SQLSTATE", sqlState(e), "23505");
        }
        eq("good statement after the error", query(conn, "SELECT owner FROM accounts WHERE id = ?", 1L),
                List.of(accounts.get(1L).owner));
        try (Statement st = conn.createStatement()) {
            st.executeQuery("SELEC 1");
            check("syntax error is an error", false, "");
        } catch (SQLException e) {
            eq("syntax error: SQLSTATE", sqlState(e), "42601");
        }
        eq("good scatter statement after the syntax error", query(conn, "SELECT count(*) FROM accounts"),
                List.of(String.valueOf(accounts.size())));
        conn.setAutoCommit(false);
        try {
            query(conn, "SELECT 1 / (balance - balance) FROM accounts WHERE id = ?", 2L);
            check("division by zero is an error", false, "");
        } catch (SQLException e) {
            eq("error inside a transaction: SQLSTATE", sqlState(e), "22012");
        }
        try {
            query(conn, "SELECT 1");
            check("statement in an aborted transaction is refused", false, "");
        } catch (SQLException e) {
            eq("statement in the aborted transaction: SQLSTATE", sqlState(e), "25P02");
        }
        conn.rollback();
        conn.setAutoCommit(true);
        eq("good statement after rollback() of the failed transaction",
                query(conn, "SELECT balance FROM accounts WHERE id = ?", 2L), List.of(num(accounts.get(2L).balance)));

        // -- batches: addBatch/executeBatch -----------------------------------------------
        List<Long> batch0 = idsOn(0, 80, 200).subList(0, 6);
        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO accounts (id, owner, balance) VALUES (?, ?, ?)")) {
            for (long i : batch0) {
                ps.setLong(1, i);
                ps.setString(2, "batch0");
                ps.setBigDecimal(3, BigDecimal.valueOf(i));
                ps.addBatch();
            }
            int[] counts = ps.executeBatch();
            int total = 0;
            for (int c : counts) total += c == Statement.SUCCESS_NO_INFO ? 1 : c;
            eq("executeBatch of 6 INSERTs on one shard: update counts", total, batch0.size());
            for (long i : batch0) accounts.put(i, new Acc("batch0", BigDecimal.valueOf(i)));
        }
        List<Long> both = new ArrayList<>();
        for (long i = 200; i < 216; i++) both.add(i);
        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO accounts (id, owner, balance) VALUES (?, ?, ?)")) {
            for (long i : both) {
                ps.setLong(1, i);
                ps.setString(2, "batch");
                ps.setBigDecimal(3, BigDecimal.valueOf(i).movePointLeft(1));
                ps.addBatch();
            }
            try {
                int[] counts = ps.executeBatch();
                int total = 0;
                for (int c : counts) total += c == Statement.SUCCESS_NO_INFO ? 1 : c;
                eq("executeBatch of 16 INSERTs with keys on both shards (autocommit): update counts", total,
                        both.size());
                for (long i : both) accounts.put(i, new Acc("batch", BigDecimal.valueOf(i).movePointLeft(1)));
            } catch (BatchUpdateException e) {
                SQLException n = e.getNextException();
                String st = n != null ? n.getSQLState() : e.getSQLState();
                eq("executeBatch with keys on both shards before one Sync: SQLSTATE (one implicit transaction)", st,
                        "SPT01");
            }
        }
        List<String> cnt = query(conn, "SELECT count(*) FROM accounts WHERE owner = 'batch'");
        check("executeBatch with keys on both shards: all rows or none",
                cnt.equals(List.of("0")) || cnt.equals(List.of(String.valueOf(both.size()))), cnt.toString());
        conn.setAutoCommit(false);
        List<Long> batchTx = idsOn(1, 300, 400).subList(0, 5);
        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO accounts (id, owner, balance) VALUES (?, ?, ?)")) {
            for (long i : batchTx) {
                ps.setLong(1, i);
                ps.setString(2, "batchtx");
                ps.setBigDecimal(3, BigDecimal.ONE);
                ps.addBatch();
            }
            ps.executeBatch();
        }
        conn.commit();
        conn.setAutoCommit(true);
        for (long i : batchTx) accounts.put(i, new Acc("batchtx", BigDecimal.ONE));
        eq("executeBatch of 5 INSERTs on one shard inside a transaction, committed",
                query(conn, "SELECT count(*) FROM accounts WHERE owner = 'batchtx'"), List.of("5"));

        // -- cancel through Statement.cancel() ----------------------------------------------
        ScheduledExecutorService ex = Executors.newSingleThreadScheduledExecutor();
        try (PreparedStatement ps = conn.prepareStatement("SELECT pg_sleep(30) FROM accounts WHERE id = ?")) {
            ps.setLong(1, 1);
            ex.schedule(() -> {
                try {
                    ps.cancel();
                } catch (SQLException e) {
                    System.out.println("cancel() threw: " + e);
                }
            }, 1, TimeUnit.SECONDS);
            long t0 = System.nanoTime();
            try {
                ps.executeQuery();
                check("Statement.cancel() cancels SELECT pg_sleep(30)", false, "query finished");
            } catch (SQLException e) {
                double secs = (System.nanoTime() - t0) / 1e9;
                eq("Statement.cancel(): SQLSTATE", sqlState(e), "57014");
                check(String.format("Statement.cancel(): cancelled after %.1fs (< 10s)", secs), secs < 10, "");
            }
        } finally {
            ex.shutdownNow();
        }
        eq("connection usable after the cancel (SELECT 1)", query(conn, "SELECT 1"), List.of("1"));
        eq("single-shard read after the cancel", query(conn, "SELECT owner FROM accounts WHERE id = ?", 1L),
                List.of(accounts.get(1L).owner));

        // -- final state --------------------------------------------------------------------
        eq("final accounts through the proxy (" + accounts.size() + " rows)",
                query(conn, "SELECT id, owner, balance FROM accounts ORDER BY id"), allAccounts());
        want = new ArrayList<>();
        for (Map.Entry<Long, String> e : events.entrySet()) want.add(e.getKey() + "|" + e.getValue());
        eq("final events through the proxy", query(conn, "SELECT id, kind FROM events ORDER BY id"), want);
        want = new ArrayList<>();
        for (Map.Entry<String, String> e : currencies.entrySet()) want.add(e.getKey() + "|" + e.getValue());
        eq("final currencies through the proxy", query(conn, "SELECT code, name FROM currencies ORDER BY code"), want);
        conn.close();
    }

    static int exec(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) ps.setObject(i + 1, params[i]);
            return ps.executeUpdate();
        }
    }
}

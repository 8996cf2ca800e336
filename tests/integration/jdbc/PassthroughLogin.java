// Logins through a proxy with `auth: passthrough`, with the PostgreSQL JDBC driver (pgjdbc):
// run by tests/integration/test_auth_passthrough.py, one JVM for every case.
//
//   java -cp classes:postgresql.jar PassthroughLogin PORT DB USER:PASSWORD ...
//
// Per USER:PASSWORD one line: "USER ok CURRENT_USER" when the login works and
// `SELECT current_user` answers, else "USER error SQLSTATE MESSAGE". Exit 0 unless the
// arguments are wrong; the test compares the lines with what it expects.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

public class PassthroughLogin {
    public static void main(String[] args) {
        if (args.length < 3) {
            System.err.println("usage: PassthroughLogin PORT DB USER:PASSWORD ...");
            System.exit(2);
        }
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/" + args[1];
        for (int i = 2; i < args.length; i++) {
            int colon = args[i].indexOf(':');
            String user = args[i].substring(0, colon);
            Properties props = new Properties();
            props.setProperty("user", user);
            props.setProperty("password", args[i].substring(colon + 1));
            props.setProperty("sslmode", "disable");
            props.setProperty("connectTimeout", "10");
            try (Connection c = DriverManager.getConnection(url, props);
                 Statement s = c.createStatement();
                 ResultSet r = s.executeQuery("SELECT current_user")) {
                r.next();
                System.out.println(user + " ok " + r.getString(1));
            } catch (SQLException e) {
                System.out.println(user + " error " + e.getSQLState() + " " + e.getMessage().replace('\n', ' '));
            }
        }
    }
}

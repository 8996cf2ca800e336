// Checks routing/hash.cpp against a real PostgreSQL: for each key type and modulus,
// rows are inserted into a temp table PARTITION BY HASH (k) with every remainder, and
// the partition PostgreSQL chose must equal ours for the inserted literal, for the
// stored value's text form and for its binary form (the type's send function).
// It also checks that we reject exactly the literals PostgreSQL's input rejects.
// Usage: hash_equivalence "<libpq connection string>"; exit status 1 on any mismatch.
#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "routing/hash.hpp"

namespace {

using splitpoint::routing::KeyType;
using Key = std::optional<std::string>;  // nullopt is NULL

struct Column {
  std::string label;
  KeyType type;
  std::string sql_type;    // the column's declared type
  std::string cast_type;   // literals are cast to this, then assigned to the column
  std::string send_fn;
  std::int32_t max_chars;  // varchar(n)
  std::vector<std::uint32_t> moduli;
};

// Creating a thousand partitions takes about a second, so the types that hash exactly
// like one already checked at 1000 (int2 as int4, varchar as text: the same function on
// the same value) and the collation variants stop short of it.
const std::vector<std::uint32_t> kModuli{1, 2, 7, 64, 1000};
const std::vector<std::uint32_t> kSmallModuli{1, 2, 7, 64};
const std::vector<std::uint32_t> kFewModuli{7, 64};
constexpr int kConnections = 3;
std::mt19937_64 rng(20240615);
bool utf8_server = true;
std::atomic<int> failures{0};
std::mutex report_mutex;

void fail(const std::string& what) {
  std::lock_guard lock(report_mutex);
  if (++failures <= 20) std::cerr << "FAILED: " << what << "\n";
}

std::string hex_decode(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::vector<Key> integer_keys(int bits) {
  std::vector<Key> keys{std::nullopt, "0", "1", "-1", " 42", "+7 ", "\t-3\n", "007",
                        "-0", "+0", "  -000123  "};
  for (int b = 1; b < bits - 1; ++b) {  // around every power of two, both signs
    std::int64_t p = std::int64_t{1} << b;
    for (std::int64_t v : {p - 1, p, p + 1, -p - 1, -p, -p + 1}) keys.push_back(std::to_string(v));
  }
  std::int64_t max = bits == 64 ? INT64_MAX : (std::int64_t{1} << (bits - 1)) - 1;
  for (std::int64_t v : {max, max - 1, -max - 1, -max}) keys.push_back(std::to_string(v));
  std::uniform_int_distribution<std::int64_t> any(-max - 1, max), small(-5000, 5000);
  for (int i = 0; i < 1500; ++i) keys.push_back(std::to_string(any(rng)));
  for (int i = 0; i < 500; ++i) keys.push_back(std::to_string(small(rng)));
  return keys;
}

std::string random_ascii(std::size_t len) {
  std::uniform_int_distribution<int> ch(32, 126);
  std::string s;
  for (std::size_t i = 0; i < len; ++i) s.push_back(static_cast<char>(ch(rng)));
  return s;
}

std::string random_utf8(std::size_t chars) {
  static const std::vector<std::string> pieces{"a", "é", "ß", "Ж", "日", "本", "語", "€",
                                               "😀", "𝄞", " ", "\\", "'", "\""};
  std::uniform_int_distribution<std::size_t> pick(0, pieces.size() - 1);
  std::string s;
  for (std::size_t i = 0; i < chars; ++i) s += pieces[pick(rng)];
  return s;
}

std::vector<Key> text_keys(std::int32_t max_chars) {
  std::vector<Key> keys{std::nullopt, "", " ", "a", "A", "abc", "abc ", " abc", "NULL"};
  if (max_chars > 0) {  // varchar(n): values up to n characters, or longer by spaces only
    for (std::string s : {"abcde", "abcde   ", "ab   ", "     ", "       ", "t\t'\\\n"})
      keys.push_back(s);
    if (utf8_server) keys.insert(keys.end(), {"éé日本😀", "éé日本😀  "});
    for (int i = 0; i < 1500; ++i) keys.push_back(random_ascii(i % (max_chars + 1)) +
                                                  std::string(i % 3, ' '));
    if (utf8_server)
      for (int i = 0; i < 500; ++i) keys.push_back(random_utf8(i % (max_chars + 1)));
    return keys;
  }
  for (std::string s : {"tab\there", "new\nline", "quote'd", "back\\slash", "{\"json\": 1}"})
    keys.push_back(s);
  for (std::size_t len = 0; len <= 40; ++len) keys.push_back(random_ascii(len));
  for (int i = 0; i < 1500; ++i) keys.push_back(random_ascii(i % 97));
  keys.push_back(std::string(3000, 'x'));  // long keys, within a page (plain storage)
  keys.push_back(random_ascii(5000));
  if (utf8_server) {
    for (std::string s : {"é", "日本語", "😀", "Ærøskøbing", "naïve café"}) keys.push_back(s);
    for (int i = 0; i < 500; ++i) keys.push_back(random_utf8(i % 50));
    keys.push_back(random_utf8(1500));
  }
  return keys;
}

std::string uuid_text(std::uint64_t hi, std::uint64_t lo) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; ++i) {
    std::uint64_t half = i < 16 ? hi : lo;
    s.push_back(digits[(half >> (4 * (15 - i % 16))) & 0xF]);
    if (i == 7 || i == 11 || i == 15 || i == 19) s.push_back('-');
  }
  return s;
}

std::vector<Key> uuid_keys() {
  std::vector<Key> keys{std::nullopt, uuid_text(0, 0), uuid_text(~0ULL, ~0ULL),
                        "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
                        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12}",
                        "a0eebc999c0b4ef8bb6d6bb9bd380a13",
                        "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a14",
                        "{a0eebc999c0b4ef8bb6d6bb9bd380a15}"};
  for (int i = 0; i < 2000; ++i) keys.push_back(uuid_text(rng(), rng()));
  return keys;
}

std::string array_literal(pqxx::connection_base& c, const std::vector<Key>& keys) {
  std::string sql = "ARRAY[";
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i) sql += ',';
    sql += keys[i] ? c.quote(*keys[i]) : "NULL";
  }
  return sql + "]::text[]";
}

// Partitions are created and dropped in batches of 100 per transaction: a transaction
// holds a lock per partition (three per dropped one) until it ends, and the shared lock
// table has room for about max_locks_per_transaction x max_connections in all.
void create_table(pqxx::nontransaction& tx, const Column& col, std::uint32_t modulus) {
  // Creating partitions is what takes the time here, and a TOAST table for each
  // doubles it: no other text column, and plain storage for the key (routing hashes the
  // value before it is stored, so storage cannot change the partition).
  tx.exec0("CREATE TEMP TABLE hq (id int, k " + col.sql_type + ") PARTITION BY HASH (k)");
  tx.exec0("ALTER TABLE hq ALTER COLUMN k SET STORAGE PLAIN");
  tx.exec0("DO $$ BEGIN FOR r IN 0.." + std::to_string(modulus - 1) +
           " LOOP EXECUTE format('CREATE TEMP TABLE %I PARTITION OF hq FOR VALUES WITH "
           "(MODULUS " + std::to_string(modulus) + ", REMAINDER %s)', 'hq_p' || r, r);"
           " IF r % 100 = 99 THEN COMMIT; END IF; END LOOP; END $$");
}

void drop_table(pqxx::nontransaction& tx, std::uint32_t modulus) {
  tx.exec0("DO $$ BEGIN FOR r IN 0.." + std::to_string(modulus - 1) +
           " LOOP EXECUTE format('DROP TABLE %I', 'hq_p' || r);"
           " IF r % 100 = 99 THEN COMMIT; END IF; END LOOP; END $$");
  tx.exec0("DROP TABLE hq");
}

// One table: insert, read back, and compare every row's partition with ours computed
// from the literal we sent, from the stored value's text form and from its binary form.
std::string check_table(pqxx::connection& c, const Column& col, std::uint32_t modulus,
                        const std::vector<Key>& keys) {
  using namespace splitpoint::routing;
  pqxx::nontransaction tx(c);
  create_table(tx, col, modulus);
  tx.exec0("INSERT INTO hq (id, k) SELECT n - 1, s::" + col.cast_type + " FROM unnest(" +
           array_literal(c, keys) + ") WITH ORDINALITY AS u(s, n)");
  auto rows = tx.exec("SELECT id, k::text, tableoid::regclass::text, encode(" + col.send_fn +
                      "(k), 'hex') FROM hq");
  drop_table(tx, modulus);
  const std::string where = col.label + " modulus " + std::to_string(modulus) + ": ";
  std::size_t nulls = 0;
  for (const auto& row : rows) {
    const std::string part = row[2].as<std::string>();
    const auto expected = static_cast<std::uint32_t>(std::stoul(part.substr(part.rfind("_p") + 2)));
    const auto& key = keys.at(row[0].as<std::size_t>());
    if (!key || row[1].is_null()) {
      ++nulls;
      if (key || !row[1].is_null() || partition_for_null(modulus) != expected)
        fail(where + "NULL in partition " + std::to_string(expected));
      continue;
    }
    const auto h_src = hash_key_text(col.type, *key, col.max_chars);
    const auto h_out = hash_key_text(col.type, row[1].as<std::string>(), col.max_chars);
    const auto h_bin = hash_key_binary(col.type, hex_decode(row[3].as<std::string>()), col.max_chars);
    for (const auto& [how, h] : {std::pair{"literal", h_src}, {"output", h_out}, {"binary", h_bin}}) {
      if (h && partition_for_hash(*h, modulus) == expected) continue;
      fail(where + "'" + *key + "' (" + how + "): server " + std::to_string(expected) + ", ours " +
           (h ? std::to_string(partition_for_hash(*h, modulus)) : "invalid"));
    }
  }
  if (rows.size() != keys.size()) fail(where + "row count");
  return where + std::to_string(rows.size()) + " rows (" + std::to_string(nulls) +
         " NULL) checked";
}

// Literals PostgreSQL's input function may reject: we must agree on each one.
std::string check_validity(pqxx::connection& c, const Column& col,
                           const std::vector<std::string>& inputs) {
  pqxx::nontransaction tx(c);
  tx.exec0("CREATE TEMP TABLE probe (k " + col.sql_type + ")");
  std::size_t accepted = 0;
  for (const auto& s : inputs) {
    // Sent as bytea and decoded by the server, so that invalid UTF-8 reaches the check.
    const bool server_ok = tx.exec1("SELECT pg_temp.accepts(" + tx.quote_raw(s) + ")")[0].as<bool>();
    const bool ours_ok = splitpoint::routing::hash_key_text(col.type, s, col.max_chars).has_value();
    accepted += server_ok;
    if (server_ok != ours_ok)
      fail(col.label + " input '" + s + "': server " + (server_ok ? "accepts" : "rejects"));
  }
  tx.exec0("DROP TABLE probe");
  return col.label + " input rules: " + std::to_string(inputs.size()) + " literals (" +
         std::to_string(accepted) + " accepted) checked";
}

std::vector<std::string> validity_inputs(KeyType t) {
  switch (t) {
    case KeyType::int2: case KeyType::int4: case KeyType::int8:
      return {"", " ", "+", "-", "- 1", "1 2", "1.0", "1e3", "0x10", "1_000", "abc", "12a",
              " \t\n\r\v\f12\f\v\r\n\t ", "++1", "-+1", "32767", "32768", "-32768", "-32769",
              "2147483647", "2147483648", "-2147483648", "-2147483649",
              "9223372036854775807", "9223372036854775808", "-9223372036854775808",
              "-9223372036854775809", "99999999999999999999", "000000000000000000000000001",
              std::string("1\xc2\xa0"), "\xef\xbc\x91"};
    case KeyType::uuid:
      return {"", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc999c0b4ef8bb6d6bb9bd380a11",
              "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
              "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
              "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
              "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111", "a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11",
              "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11", "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
              "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g",
              "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
              "{}", "{a0eebc999c0b4ef8bb6d6bb9bd380a11}}", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd38-0a11"};
    case KeyType::text: case KeyType::varchar:
      return {"", "plain", "abcde", "abcdef", "abcde ", "abcde  \t", "ab   ", "éé日本😀",
              "éé日本😀 ", "éé日本😀x", "a\xc3", "\xc3\x28", "\xc0\xaf", "\xe0\x80\xaf",
              "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\x80",
              "ok\xef\xbf\xbf", std::string("nul\0byte", 8), "\xf0\x9f\x98"};
  }
  return {};
}

// Each worker has its own connection and takes (column, modulus) tasks, biggest
// modulus first; creating a thousand partitions is the slow part.
struct Task {
  const Column* col;
  const std::vector<Key>* keys;
  std::uint32_t modulus;  // 0: the input-rule check
  std::string summary;
};

void prepare_session(pqxx::connection& c) {
  c.set_client_encoding("UTF8");
  pqxx::nontransaction tx(c);
  tx.exec0("SET client_min_messages = warning");
  tx.exec0("CREATE FUNCTION pg_temp.accepts(b bytea) RETURNS bool LANGUAGE plpgsql AS $$ "
           "BEGIN EXECUTE format('INSERT INTO pg_temp.probe VALUES (%L)', convert_from(b, 'UTF8'));"
           " RETURN true; EXCEPTION WHEN others THEN RETURN false; END $$");
}

void run_worker(const std::string& conninfo, std::vector<Task>& tasks,
                const std::vector<std::size_t>& order, std::atomic<std::size_t>& next) {
  try {
    pqxx::connection c(conninfo);
    prepare_session(c);
    for (std::size_t i; (i = next++) < order.size();) {
      Task& t = tasks[order[i]];
      const auto start = std::chrono::steady_clock::now();
      t.summary = t.modulus ? check_table(c, *t.col, t.modulus, *t.keys)
                            : check_validity(c, *t.col, validity_inputs(t.col->type));
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      t.summary += " in " + std::to_string(ms.count()) + " ms";
    }
  } catch (const std::exception& e) {
    fail(std::string("error: ") + e.what());
  }
}

std::vector<Column> columns_to_check(pqxx::connection& c) {
  std::vector<Column> columns{
      {"int2", KeyType::int2, "smallint", "int2", "int2send", 0, kSmallModuli},
      {"int4", KeyType::int4, "integer", "int4", "int4send", 0, kModuli},
      {"int8", KeyType::int8, "bigint", "int8", "int8send", 0, kModuli},
      {"text", KeyType::text, "text", "text", "textsend", 0, kModuli},
      {"varchar", KeyType::varchar, "varchar", "varchar", "varcharsend", 0, kSmallModuli},
      {"uuid", KeyType::uuid, "uuid", "uuid", "uuid_send", 0, kModuli},
      {"varchar(5)", KeyType::varchar, "varchar(5)", "varchar", "varcharsend", 5, kFewModuli}};
  // Deterministic collations all hash the bytes; try the ones this server has.
  pqxx::nontransaction tx(c);
  for (const auto& row : tx.exec("SELECT collname FROM pg_collation WHERE collname IN "
                                 "('C', 'und-x-icu', 'en_US.utf8') ORDER BY 1")) {
    const auto name = row[0].as<std::string>();
    columns.push_back({"text COLLATE \"" + name + "\"", KeyType::text,
                       "text COLLATE \"" + name + "\"", "text", "textsend", 0, kFewModuli});
  }
  utf8_server = tx.exec1("SHOW server_encoding")[0].as<std::string>() == "UTF8";
  return columns;
}

std::vector<Key> keys_for(const Column& col) {
  switch (col.type) {
    case KeyType::int2: return integer_keys(16);
    case KeyType::int4: return integer_keys(32);
    case KeyType::int8: return integer_keys(64);
    case KeyType::text: case KeyType::varchar: return text_keys(col.max_chars);
    case KeyType::uuid: return uuid_keys();
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " <connection string>\n";
    return 2;
  }
  std::vector<Column> columns;
  try {
    pqxx::connection c(argv[1]);
    columns = columns_to_check(c);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  if (!utf8_server) std::cout << "note: server encoding is not UTF8: ASCII text only, no input rules\n";
  std::vector<std::vector<Key>> keys;
  for (const auto& col : columns) keys.push_back(keys_for(col));
  std::vector<Task> tasks;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    for (auto m : columns[i].moduli) tasks.push_back({&columns[i], &keys[i], m, {}});
    if (utf8_server) tasks.push_back({&columns[i], &keys[i], 0, {}});
  }
  std::vector<std::size_t> order(tasks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](auto a, auto b) { return tasks[a].modulus > tasks[b].modulus; });
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < kConnections; ++i)
    workers.emplace_back(run_worker, std::string(argv[1]), std::ref(tasks), std::cref(order),
                         std::ref(next));
  for (auto& w : workers) w.join();
  for (const auto& t : tasks)
    if (!t.summary.empty()) std::cout << t.summary << "\n";
  if (failures) {
    std::cerr << failures << " failures\n";
    return 1;
  }
  std::cout << "all partitions match PostgreSQL\n";
  return 0;
}

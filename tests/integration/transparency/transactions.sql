-- Transaction blocks: BEGIN/COMMIT/ROLLBACK, a failed block (ROLLBACK, and COMMIT that
-- reports ROLLBACK), a row inserted then rolled back is gone, now() and txid_current()
-- equal within a block and different between autocommit statements, nested BEGIN,
-- COMMIT/ROLLBACK/ABORT/END with no transaction in progress (PostgreSQL's WARNING).
CREATE TABLE t (id int PRIMARY KEY, v text);
BEGIN;
INSERT INTO t VALUES (1, 'one');
COMMIT;
BEGIN;
INSERT INTO t VALUES (2, 'two');
SELECT count(*) FROM t;
ROLLBACK;
SELECT * FROM t ORDER BY id;
START TRANSACTION;
INSERT INTO t VALUES (3, 'three');
END;
BEGIN WORK;
SELECT 1/0;
SELECT 1;
ROLLBACK WORK;
SELECT 'after rollback of a failed block' AS ok;
BEGIN;
INSERT INTO t VALUES (4, 'four');
INSERT INTO t VALUES (1, 'dup');
INSERT INTO t VALUES (5, 'five');
COMMIT;
SELECT * FROM t ORDER BY id;
BEGIN;
BEGIN;
SELECT now() AS first_now, txid_current() AS first_xid \gset
SELECT pg_sleep(0.02);
SELECT now() = :'first_now'::timestamptz AS same_now, txid_current() = :first_xid AS same_xid;
SELECT statement_timestamp() > now() AS statement_later;
COMMIT;
SELECT now() AS a_now \gset
SELECT pg_sleep(0.02);
SELECT now() > :'a_now'::timestamptz AS later_now;
COMMIT;
ROLLBACK;
ABORT;
END;
COMMIT WORK;
BEGIN;
SELECT 1 AS in_block;
ABORT;
BEGIN READ ONLY;
INSERT INTO t VALUES (6, 'six');
ROLLBACK;
BEGIN;
DELETE FROM t;
ROLLBACK;
SELECT count(*) AS still_there FROM t;
BEGIN;
UPDATE t SET v = upper(v);
COMMIT;
SELECT * FROM t ORDER BY id;

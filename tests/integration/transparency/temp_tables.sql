-- Temporary tables: created inside a transaction with ON COMMIT DROP / DELETE ROWS
-- (gone or empty after COMMIT), rolled back with the block, and one created outside a
-- transaction and used in later transactions. The later use runs between $TR_HOLD
-- and $TR_RELEASE: in transaction pooling mode another client holds psql's backend
-- there, so unless the proxy pins a session that created a temp table that outlives
-- its transaction (it does), the statements run on a backend without the table.
BEGIN;
CREATE TEMP TABLE tmp_drop (id int) ON COMMIT DROP;
INSERT INTO tmp_drop VALUES (1), (2);
SELECT count(*) FROM tmp_drop;
COMMIT;
SELECT count(*) FROM tmp_drop;
BEGIN;
CREATE TEMP TABLE tmp_rows (id int) ON COMMIT DELETE ROWS;
INSERT INTO tmp_rows VALUES (1);
SELECT count(*) FROM tmp_rows;
COMMIT;
BEGIN;
SELECT count(*) FROM tmp_rows;
CREATE TEMP TABLE tmp_rolled (id int);
ROLLBACK;
SELECT count(*) FROM tmp_rolled;
BEGIN;
INSERT INTO tmp_rows VALUES (2), (3);
SELECT count(*) FROM tmp_rows;
COMMIT;
SELECT count(*) FROM tmp_rows;
CREATE TEMP TABLE tmp_session (id int PRIMARY KEY, v text);
INSERT INTO tmp_session VALUES (1, 'a');
SELECT * FROM tmp_session;
\! $TR_HOLD
INSERT INTO tmp_session VALUES (2, 'b');
SELECT * FROM tmp_session ORDER BY id;
SELECT relname FROM pg_class WHERE relnamespace = pg_my_temp_schema() AND relkind = 'r' ORDER BY relname;
\! $TR_RELEASE
SELECT * FROM tmp_session ORDER BY id;
CREATE TEMP TABLE tmp_session (id int);
DROP TABLE tmp_session;
DROP TABLE tmp_session;
CREATE TABLE perm (id int);
CREATE TEMP TABLE perm (id int);
INSERT INTO perm VALUES (42);
SELECT * FROM perm;
SELECT * FROM public.perm;
DROP TABLE perm;
SELECT * FROM perm;
DISCARD TEMP;
SELECT count(*) FROM tmp_rows;

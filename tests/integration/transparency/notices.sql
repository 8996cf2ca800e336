-- NOTICE / WARNING / INFO ordering relative to results and errors: RAISE in DO blocks
-- and functions, client_min_messages, notices then an error from the same statement,
-- notices from several statements of one Query, and a deferred constraint trigger
-- that raises NOTICEs (and, once, an error) at COMMIT.
DO $$ BEGIN RAISE NOTICE 'notice from DO'; RAISE WARNING 'warning from DO'; RAISE INFO 'info from DO'; END $$;
CREATE FUNCTION chatty(n int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    RAISE NOTICE 'chatty % of %', i, n;
  END LOOP;
  RETURN n * 10;
END $$;
SELECT chatty(3);
SELECT chatty(g) FROM generate_series(1, 2) g;
DO $$ BEGIN RAISE NOTICE 'before the error'; RAISE EXCEPTION 'custom failure' USING DETAIL = 'some detail', HINT = 'some hint', ERRCODE = '22023'; END $$;
DO $$ BEGIN RAISE NOTICE 'with fields' USING DETAIL = 'notice detail', HINT = 'notice hint'; END $$;
SELECT chatty(1) \; SELECT chatty(2) \; SELECT 'last' AS l;
SET client_min_messages = warning;
SELECT chatty(1);
DO $$ BEGIN RAISE WARNING 'still shown'; END $$;
RESET client_min_messages;
DROP TABLE IF EXISTS nosuch_table;
CREATE TABLE IF NOT EXISTS dn (id int PRIMARY KEY);
CREATE TABLE IF NOT EXISTS dn (id int PRIMARY KEY);
CREATE FUNCTION dn_notice() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'deferred trigger for id %', NEW.id;
  IF NEW.id < 0 THEN
    RAISE EXCEPTION 'negative id % refused at commit', NEW.id;
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER dn_check AFTER INSERT ON dn DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION dn_notice();
BEGIN;
INSERT INTO dn VALUES (1);
INSERT INTO dn VALUES (2);
SELECT 'before commit' AS step;
COMMIT;
BEGIN;
INSERT INTO dn VALUES (-1);
COMMIT;
SELECT id FROM dn ORDER BY id;
BEGIN;
INSERT INTO dn VALUES (3);
SET CONSTRAINTS dn_check IMMEDIATE;
INSERT INTO dn VALUES (4);
COMMIT;
INSERT INTO dn VALUES (5);
BEGIN;
INSERT INTO dn VALUES (6);
COMMIT AND CHAIN;
INSERT INTO dn VALUES (7);
COMMIT;
SELECT id FROM dn ORDER BY id;

-- PREPARE TRANSACTION attempted by the client: inside a block (the transaction is
-- prepared and the session is no longer in a transaction: SELECT 1 after it), COMMIT
-- PREPARED / ROLLBACK PREPARED of it, PREPARE TRANSACTION of a failed block (rolls
-- back), outside a block, and with a gid that is already in use.
CREATE TABLE pt (id int);
BEGIN;
INSERT INTO pt VALUES (1);
PREPARE TRANSACTION 'tr_transparency_1';
SELECT 1;
SELECT count(*) FROM pt;
SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'tr\_transparency%';
COMMIT PREPARED 'tr_transparency_1';
SELECT count(*) FROM pt;
BEGIN;
INSERT INTO pt VALUES (2);
PREPARE TRANSACTION 'tr_transparency_2';
BEGIN;
INSERT INTO pt VALUES (3);
PREPARE TRANSACTION 'tr_transparency_2';
SELECT 1;
ROLLBACK PREPARED 'tr_transparency_2';
ROLLBACK PREPARED 'tr_transparency_2';
SELECT count(*) FROM pt;
BEGIN;
SELECT 1/0;
PREPARE TRANSACTION 'tr_transparency_3';
SELECT 1;
SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'tr\_transparency%';
PREPARE TRANSACTION 'tr_transparency_4';
SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'tr\_transparency%';
COMMIT PREPARED 'nosuch';
BEGIN;
COMMIT PREPARED 'nosuch';
ROLLBACK;

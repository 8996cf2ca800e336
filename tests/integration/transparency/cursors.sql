-- SQL cursors: DECLARE/FETCH/MOVE/CLOSE inside a transaction (plain, SCROLL, BINARY
-- not used: psql prints text), errors (cursor outside a block, unknown cursor, FETCH
-- after CLOSE), a WITH HOLD cursor used after its transaction committed. The WITH HOLD
-- part runs between $TR_HOLD and $TR_RELEASE: through the proxy in transaction mode
-- another client holds the backend psql used, so the statements there run on another
-- backend (expected difference: transparency/cursors.txn.diff).
CREATE TABLE c AS SELECT g AS id, 'row ' || g AS label FROM generate_series(1, 10) g;
BEGIN;
DECLARE cur CURSOR FOR SELECT id, label FROM c ORDER BY id;
FETCH 2 FROM cur;
FETCH NEXT FROM cur;
MOVE FORWARD 3 IN cur;
FETCH cur;
MOVE ALL IN cur;
FETCH cur;
FETCH BACKWARD 1 FROM cur;
CLOSE cur;
FETCH cur;
ROLLBACK;
BEGIN;
DECLARE s SCROLL CURSOR FOR SELECT id FROM c ORDER BY id;
FETCH LAST FROM s;
FETCH PRIOR FROM s;
FETCH ABSOLUTE 2 FROM s;
FETCH RELATIVE 3 FROM s;
FETCH FIRST FROM s;
MOVE ABSOLUTE 0 IN s;
FETCH FORWARD ALL FROM s;
SELECT name, is_holdable, is_scrollable FROM pg_cursors ORDER BY name;
DECLARE s CURSOR FOR SELECT 1;
COMMIT;
DECLARE outside CURSOR FOR SELECT 1;
FETCH nosuch;
CLOSE nosuch;
BEGIN;
DECLARE a CURSOR FOR SELECT 1 AS one;
DECLARE b CURSOR FOR SELECT 2 AS two;
CLOSE ALL;
SELECT count(*) FROM pg_cursors;
COMMIT;
BEGIN;
DECLARE h CURSOR WITH HOLD FOR SELECT id FROM c ORDER BY id;
FETCH 2 FROM h;
COMMIT;
FETCH 2 FROM h;
\! $TR_HOLD
FETCH 2 FROM h;
SELECT name, is_holdable FROM pg_cursors;
CLOSE h;
\! $TR_RELEASE
SELECT name, is_holdable FROM pg_cursors;
CLOSE ALL;
SELECT count(*) FROM pg_cursors;

-- Several statements in one simple Query (psql sends `a \; b;` as one Query message):
-- results of each, an error in the middle (the rest of the Query is skipped, the
-- statements before it are committed: implicit transaction semantics), BEGIN/COMMIT
-- inside one Query, a Query that leaves a block open, SET inside a multi-statement
-- Query that later fails, and empty statements.
CREATE TABLE m (id int PRIMARY KEY);
select 1 AS one \; select 2 AS two;
select 1 AS one \; select 1/0 \; select 3 AS three;
INSERT INTO m VALUES (1) \; INSERT INTO m VALUES (1) \; INSERT INTO m VALUES (2);
SELECT * FROM m ORDER BY id;
INSERT INTO m VALUES (10) \; SELECT 1/0;
SELECT * FROM m ORDER BY id;
BEGIN \; INSERT INTO m VALUES (3) \; COMMIT \; INSERT INTO m VALUES (4) \; SELECT 1/0;
SELECT * FROM m ORDER BY id;
INSERT INTO m VALUES (5) \; COMMIT \; INSERT INTO m VALUES (6) \; SELECT 1/0;
SELECT * FROM m ORDER BY id;
BEGIN \; INSERT INTO m VALUES (7) \; SELECT count(*) FROM m;
SELECT 'still in the block' AS s;
ROLLBACK \; SELECT count(*) FROM m;
SET work_mem = '9MB' \; SELECT 1/0;
SHOW work_mem;
SET work_mem = '10MB' \; SELECT 'set and select' AS s;
SHOW work_mem;
BEGIN \; SET LOCAL work_mem = '11MB' \; SHOW work_mem \; COMMIT;
SHOW work_mem;
SELECT 1 \; ;
; SELECT 'leading empty' AS s;
SAVEPOINT sp \; SELECT 1;
BEGIN \; SAVEPOINT sp \; SELECT 1/0 \; ROLLBACK TO sp;
ROLLBACK TO sp \; SELECT 'recovered' AS s \; COMMIT;
VACUUM m \; SELECT 1;
CREATE INDEX CONCURRENTLY m_idx ON m (id) \; SELECT 1;
SELECT count(*) FROM m;

-- SQL-level PREPARE / EXECUTE / DEALLOCATE: with and without parameter types, EXECUTE
-- with the wrong number of parameters, EXECUTE and DEALLOCATE of an unknown name,
-- duplicate PREPARE, DEALLOCATE ALL, pg_prepared_statements, PREPARE inside a rolled
-- back block (prepared statements are not transactional). The last part runs between
-- $TR_HOLD and $TR_RELEASE (another backend in transaction pooling mode, where SQL
-- prepared statements do not follow the client: docs/running.md).
CREATE TABLE p (id int PRIMARY KEY, v text);
INSERT INTO p VALUES (1, 'one'), (2, 'two'), (3, 'three');
PREPARE q1 (int) AS SELECT v FROM p WHERE id = $1;
EXECUTE q1(2);
EXECUTE q1(3);
EXECUTE q1('1');
EXECUTE q1(1, 2);
EXECUTE q1('x');
PREPARE q2 AS SELECT $1::int + $2::int AS sum;
EXECUTE q2(40, 2);
PREPARE ins (int, text) AS INSERT INTO p VALUES ($1, $2) RETURNING *;
EXECUTE ins(4, 'four');
EXECUTE ins(4, 'again');
PREPARE q1 AS SELECT 1;
SELECT name, statement, parameter_types FROM pg_prepared_statements ORDER BY name;
DEALLOCATE q2;
DEALLOCATE PREPARE ins;
DEALLOCATE nosuch;
EXECUTE nosuch;
EXECUTE q2(1, 1);
BEGIN;
PREPARE in_block AS SELECT 'kept' AS v;
ROLLBACK;
EXECUTE in_block;
BEGIN;
EXECUTE q1(1);
SELECT 1/0;
EXECUTE q1(1);
ROLLBACK;
EXECUTE q1(1);
PREPARE bad AS SELECT nosuch FROM p;
EXECUTE bad;
DEALLOCATE ALL;
SELECT count(*) FROM pg_prepared_statements;
EXECUTE q1(1);
PREPARE later (int) AS SELECT v FROM p WHERE id = $1;
\! $TR_HOLD
EXECUTE later(1);
SELECT name FROM pg_prepared_statements;
\! $TR_RELEASE
EXECUTE later(2);
DEALLOCATE later;

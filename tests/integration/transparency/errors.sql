-- Errors with every field (\set VERBOSITY verbose: SQLSTATE, DETAIL, HINT, position,
-- CONTEXT, LOCATION): syntax errors (in the middle, at end of input, an unterminated
-- literal: the last statement, without `;`, psql sends it at end of file), a misspelled column (HINT "Perhaps you meant ..."), unknown table and
-- function (HINT), division by zero, unique / foreign key / check / not-null
-- violations (DETAIL, schema/table/constraint fields), errors inside a function
-- (CONTEXT), and the same with the default and terse verbosity.
\set VERBOSITY verbose
CREATE TABLE e (id int PRIMARY KEY, name text NOT NULL, qty int CHECK (qty >= 0));
CREATE TABLE ec (e_id int REFERENCES e (id));
INSERT INTO e VALUES (1, 'one', 1);
SELEC 1;
SELECT 1 +;
SELECT 1 + \g
SELECT 1 \; SELECT 2 + \g
SELECT nmae FROM e;
SELECT e.nmae FROM e;
SELECT * FROM nosuch;
SELECT nosuch_function(1, 'a');
SELECT abs('x'::text);
SELECT 1/0;
SELECT 1 / (SELECT count(*) FROM e WHERE false)::int;
INSERT INTO e VALUES (1, 'again', 2);
INSERT INTO e VALUES (2, NULL, 2);
INSERT INTO e VALUES (3, 'three', -1);
INSERT INTO ec VALUES (99);
DELETE FROM e WHERE id = 1 AND EXISTS (SELECT 1 FROM ec);
INSERT INTO ec VALUES (1);
DELETE FROM e WHERE id = 1;
SELECT 'abc'::int;
SELECT '2024-13-45'::date;
SELECT repeat('x', -1)::varchar(2)::int;
CREATE FUNCTION fails(i int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  RETURN 10 / i;
END $$;
SELECT fails(0);
SELECT fails(2);
DO $$ BEGIN PERFORM fails(0); END $$;
CREATE TABLE e (id int);
DROP TABLE nosuch;
SELECT * FROM e WHERE id = 'x';
SELECT ARRAY[1,2][3];
SELECT (ARRAY[1,2])[1:];
SELECT 1 FROM e GROUP BY name HAVING qty > 0;
\set VERBOSITY default
SELECT nmae FROM e;
INSERT INTO e VALUES (1, 'again', 2);
SELEC 1;
\set VERBOSITY terse
SELECT nmae FROM e;
SELECT 1/0;
\set VERBOSITY verbose
\set SHOW_CONTEXT always
DO $$ BEGIN RAISE NOTICE 'notice with context'; END $$;
SELECT fails(0);
SELECT 'unterminated literal
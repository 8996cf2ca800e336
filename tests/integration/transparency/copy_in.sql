-- COPY ... FROM STDIN with inline data (psql reads the data lines from this script up
-- to \.): text (default), text with DELIMITER/NULL, csv with HEADER, QUOTE, ESCAPE,
-- FORCE_NOT_NULL, FORCE_NULL, old-style option syntax, a column list, bad data (error
-- with CONTEXT naming the line), ENCODING 'LATIN1' (a raw
-- latin1 byte in this file), COPY inside a transaction then ROLLBACK, COPY in an
-- aborted block (refused before any data is asked for, so it has no data lines here).
CREATE TABLE ci (id int, a text, b text);
COPY ci FROM STDIN;
1	alpha	beta
2	\N	with\ttab
3	back\\slash	
\.
COPY ci FROM STDIN WITH (FORMAT text, DELIMITER '|', NULL 'NULL');
4|NULL|pipe
5||empty
\.
COPY ci (id, b) FROM STDIN (FORMAT csv, HEADER true);
id,b
6,"quoted, comma"
7,"embedded ""quote"""
\.
COPY ci FROM STDIN (FORMAT csv, QUOTE '''', ESCAPE '\', DELIMITER ';');
8;'it\'s';'x;y'
\.
COPY ci FROM STDIN (FORMAT csv, FORCE_NOT_NULL (a), NULL 'NIL');
9,NIL,NIL
\.
COPY ci FROM STDIN (FORMAT csv, FORCE_NULL (b));
10,"",""
\.
COPY ci FROM STDIN WITH CSV HEADER DELIMITER ',' NULL '';
id,a,b
11,,old syntax
\.
COPY ci FROM STDIN WITH DELIMITER ',';
12,old,text
\.
SELECT id, a, b, a IS NULL AS a_null, b IS NULL AS b_null FROM ci ORDER BY id;
COPY ci FROM STDIN;
13	ok	ok
fourteen	bad	bad
\.
COPY ci FROM STDIN (FORMAT csv);
15,too,many,columns
\.
BEGIN;
COPY ci FROM STDIN (FORMAT csv);
100,in,transaction
\.
SELECT count(*) FROM ci WHERE id = 100;
ROLLBACK;
SELECT count(*) FROM ci WHERE id = 100;
BEGIN;
SELECT 1/0;
COPY ci FROM STDIN;
ROLLBACK;
COPY ci FROM STDIN (FORMAT csv, HEADER match);
id,a,b
16,match,ok
\.
COPY ci FROM STDIN (FORMAT csv, HEADER match);
id,b,a
17,mismatch,header
\.
COPY ci (id, a) FROM STDIN (FORMAT csv, ENCODING 'LATIN1');
18,plain ascii
19,café in latin1
\.
SELECT id, a, length(a) FROM ci WHERE id >= 18 ORDER BY id;
COPY nosuch FROM STDIN;
COPY ci (nosuch) FROM STDIN;
SELECT count(*) FROM ci;

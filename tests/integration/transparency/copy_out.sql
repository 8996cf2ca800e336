-- COPY ... TO STDOUT with options (text, csv, HEADER, DELIMITER, NULL, QUOTE, ESCAPE,
-- FORCE_QUOTE, ENCODING 'LATIN1'), COPY (query) TO STDOUT, a COPY and an error in one
-- Query (COPY (select 1) TO STDOUT \; select 1/0;), COPY options that are wrong (the
-- error with its position), COPY TO a server file refused to a non-superuser.
CREATE TABLE co (id int, a text, b numeric);
INSERT INTO co VALUES (1, 'plain', 1.5), (2, NULL, NULL), (3, 'tab	and "quote"', -2), (4, 'caf' || chr(233), 0);
COPY co TO STDOUT;
COPY co TO STDOUT WITH (FORMAT csv);
COPY co TO STDOUT WITH (FORMAT csv, HEADER);
COPY co TO STDOUT (FORMAT text, DELIMITER '|', NULL '<null>');
COPY co TO STDOUT (FORMAT csv, QUOTE '''', ESCAPE '\', FORCE_QUOTE (a));
COPY co TO STDOUT (FORMAT csv, FORCE_QUOTE *, NULL 'NULL');
COPY co (id, a) TO STDOUT (FORMAT csv, DELIMITER ';', HEADER true);
COPY co TO STDOUT WITH CSV HEADER FORCE QUOTE a;
COPY (SELECT id, a FROM co WHERE id > 2 ORDER BY id DESC) TO STDOUT (FORMAT csv);
COPY (SELECT 1) TO STDOUT;
COPY (select 1) TO STDOUT \; select 1/0;
COPY (select 2) TO STDOUT \; select 3 AS three;
select 4 AS four \; COPY (select 5) TO STDOUT;
COPY (SELECT a FROM co WHERE id = 4) TO STDOUT (ENCODING 'LATIN1');
COPY (SELECT a FROM co WHERE id = 4) TO STDOUT (FORMAT csv, ENCODING 'UTF8');
COPY (SELECT a FROM co WHERE id = 4) TO STDOUT (ENCODING 'nosuch');
COPY co TO STDOUT (FORMAT nosuch);
COPY co TO STDOUT (nosuch_option true);
COPY co TO STDOUT (FORMAT csv, FORMAT text);
COPY co TO STDOUT (FORMAT text, HEADER match);
COPY co TO STDOUT (FORMAT csv, DELIMITER ',,');
COPY co TO STDOUT (FORMAT csv, QUOTE ',');
COPY co TO STDOUT (FORMAT text, QUOTE '"');
COPY co TO STDOUT (FORCE_QUOTE (a));
COPY co TO STDOUT (FORMAT csv, FORCE_QUOTE (nosuch));
COPY co TO STDOUT (FORMAT csv, FORCE_NOT_NULL (a));
COPY co TO STDOUT (FORMAT binary, NULL 'x');
COPY co TO STDOUT WITH (FORMAT csv) WHERE id = 1;
COPY co TO STDOUT FORMAT csv;
COPY co (nosuch) TO STDOUT;
COPY (SELECT 1/0) TO STDOUT;
COPY (INSERT INTO co VALUES (9)) TO STDOUT;
COPY (INSERT INTO co VALUES (9) RETURNING id) TO STDOUT;
COPY co TO '/tmp/tr_transparency_copy_out';
COPY co FROM PROGRAM 'true';
BEGIN;
COPY co TO STDOUT (FORMAT csv);
SELECT 1/0;
COPY co TO STDOUT;
ROLLBACK;
COPY (SELECT id FROM co ORDER BY id) TO STDOUT (FORMAT csv, HEADER);

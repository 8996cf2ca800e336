-- String literal scanning: standard_conforming_strings off (backslash escapes in plain
-- literals, escape_string_warning WARNINGs) and on, E'' strings, dollar quoting,
-- U&'' literals, quoted identifiers, and literals that contain semicolons and quote
-- characters (statement boundaries must be found the way PostgreSQL finds them).
SHOW standard_conforming_strings;
SELECT 'a\'b' AS off_needed;
';
SELECT 'c\\d' AS on_literal, E'e\\f' AS e_string, E'g\'h' AS e_quote;
SET standard_conforming_strings = off;
SELECT 'a\'b', 'c\\d';
SELECT 'semi\';colon' AS s, 'tab\there' AS t;
SET escape_string_warning = off;
SELECT 'x\\y' AS quiet;
RESET escape_string_warning;
SELECT 'a''b' AS doubled, E'\x41\102' AS octal_hex;
SELECT U&'d\0061t\+000061' AS uescape;
SET standard_conforming_strings = on;
SELECT 'a\'b';
';
SELECT 'c\\d' AS back_on;
SELECT $$dollar ; 'quoted' \ $$ AS d, $tag$ nested $$ inside $tag$ AS t;
SELECT 'semi;colon' AS s \; SELECT '\' AS backslash;
SELECT "weird;ident" FROM (SELECT 1 AS "weird;ident") q;
SELECT U&'d\0061t\+000061' AS uescape;
SELECT 'multi
line ; literal' AS m;
/* a comment ; with semicolon */ SELECT 1 AS after_comment;
SELECT 2 AS x -- trailing comment ; with semicolon
;
SET standard_conforming_strings = off;
SELECT 'off again \' ; still literal' AS s \; SELECT 'second' AS t;
BEGIN;
SET LOCAL standard_conforming_strings = on;
SELECT 'local \';
ROLLBACK;
SELECT 'after rollback \'' AS s;
RESET standard_conforming_strings;
SHOW standard_conforming_strings;

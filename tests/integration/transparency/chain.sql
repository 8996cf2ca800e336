-- Isolation levels and transaction chaining: BEGIN ISOLATION LEVEL, SET TRANSACTION,
-- COMMIT AND CHAIN / ROLLBACK AND CHAIN inside a block (the chained transaction keeps
-- the characteristics: SHOW transaction_isolation) and outside one (an error),
-- chaining out of a failed block, SET SESSION CHARACTERISTICS.
SHOW transaction_isolation;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SHOW transaction_isolation;
COMMIT AND CHAIN;
SHOW transaction_isolation;
ROLLBACK AND CHAIN;
SHOW transaction_isolation;
COMMIT;
SHOW transaction_isolation;
BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;
SHOW transaction_read_only;
COMMIT AND CHAIN;
SHOW transaction_isolation;
SHOW transaction_read_only;
COMMIT AND NO CHAIN;
SHOW transaction_read_only;
START TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;
SHOW transaction_isolation;
ROLLBACK;
BEGIN;
SELECT 1;
SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT 1/0;
COMMIT AND CHAIN;
SHOW transaction_isolation;
SELECT 'chained after a failed block' AS ok;
ROLLBACK AND NO CHAIN;
COMMIT AND CHAIN;
ROLLBACK AND CHAIN;
SHOW transaction_isolation;
SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;
SHOW transaction_isolation;
SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ;
SHOW transaction_isolation;
BEGIN;
SHOW transaction_isolation;
COMMIT AND CHAIN;
SHOW transaction_isolation;
COMMIT;
SHOW default_transaction_isolation;
RESET default_transaction_isolation;
SHOW transaction_isolation;

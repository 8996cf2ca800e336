-- Run once by the postgres:15 image on an empty data directory
-- (/docker-entrypoint-initdb.d): the role and database splitpoint connects with.
SET password_encryption = 'scram-sha-256';
CREATE ROLE app LOGIN PASSWORD 'secret';
CREATE DATABASE app OWNER app;
\connect app
GRANT CREATE ON SCHEMA public TO app;

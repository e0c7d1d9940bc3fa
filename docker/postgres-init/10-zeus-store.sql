-- The zeus store's own database, beside Airflow's metadata database on the same server.
-- The postgres image runs this once, when it initialises an empty data volume; on a server
-- that already has data, run it by hand (psql -U airflow -f 10-zeus-store.sql).
-- `zeus-airflow db upgrade` (the airflow-init service) creates the tables in it.
CREATE DATABASE zeus;

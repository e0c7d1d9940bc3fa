"""Alembic environment: migrate on the connection ``schema.upgrade`` passes in."""

from alembic import context

from zeus_airflow.core.store.schema import VERSION_TABLE
from zeus_airflow.core.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the zeus-airflow migrations with `zeus-airflow db upgrade`")
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()

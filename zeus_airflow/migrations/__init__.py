"""Alembic migrations of the store's schema, shipped with the package.

Run them with ``zeus-airflow db upgrade`` (see ``zeus_airflow.core.store.schema``); there is
no ``alembic.ini``: the migrations always run on a connection the store hands over.
"""

"""Store fixtures (SQLite and PostgreSQL)."""

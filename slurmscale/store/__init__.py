"""State in SQLAlchemy 2: SQLite by default (WAL), PostgreSQL by URL."""

"""Alembic environment: the URL comes from slurmscale's config via `config.attributes`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from slurmscale.store.tables import metadata

cfg = context.config
url = cfg.attributes.get("url") or cfg.get_main_option("sqlalchemy.url")
connection = cfg.attributes.get("connection")


def _run(conn: Connection) -> None:
    context.configure(connection=conn, target_metadata=metadata,
                      render_as_batch=conn.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=url, target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif connection is not None:
    _run(connection)
elif url is None:
    raise RuntimeError("alembic: no database url and no connection given")
else:
    engine = create_engine(url)
    with engine.connect() as c:
        _run(c)
    engine.dispose()

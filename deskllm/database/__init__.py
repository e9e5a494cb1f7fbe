"""The SQLite file every part shares: opening it (WAL, private, refusing a newer schema) and
its numbered migrations. Below every package that keeps tables in it (store, catalog,
planner, downloads), so none of them needs another to reach the database."""

from deskllm.database.connection import DatabaseTooNew, migrate, open_database

__all__ = ["DatabaseTooNew", "migrate", "open_database"]

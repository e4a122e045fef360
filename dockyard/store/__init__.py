"""Persistence: SQLAlchemy tables, queries and Alembic migrations (SQLite or PostgreSQL)."""

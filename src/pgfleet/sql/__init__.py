"""Everything that speaks SQL: connections, the named queries and their row types, the
schema and its migrations."""

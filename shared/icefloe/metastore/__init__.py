"""The meta store: tables, snapshots, files, claims and job records in Postgres.

This package is the only part of icefloe that talks to Postgres: no module outside it imports
psycopg. :class:`~icefloe.metastore.store.MetaStore` (``store.py``) owns the connection pool and
the transactions, and is composed of one class per concern: ``catalog.py`` (tables),
``snapshots.py`` and ``pinned.py`` (snapshot and file reads, pinning), ``claims.py`` (claims and
leases) and ``commits.py`` (the commit protocol, its statements in ``commit_sql.py``);
``access.py`` declares what those parts need of the store, ``rows.py`` how rows become models.
The companion stores (``jobs.py``, ``deletes.py``, ``maintenance.py``, ``publications.py``)
send their statements through ``MetaStore.transaction`` and ``MetaStore.read_transaction``.
"""

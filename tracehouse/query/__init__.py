"""SQL over a warehouse: lake views and marts on a read-only connection.

:mod:`.sql` opens the connection (``tracehouse sql``, reports, the notebook)
and prints results as a table, CSV or JSON; :mod:`.compare_runs` is the
``tracehouse compare`` query on top of it.
"""

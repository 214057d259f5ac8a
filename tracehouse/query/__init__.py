"""SQL over a warehouse: lake views and marts on a read-only connection.

:mod:`.lake_connection` opens the connection (``tracehouse sql``, reports,
the notebook, the viewer), its raw lake tables as views; :mod:`.catalog`
finds a table by the name a person typed; :mod:`.read_only` refuses the
statements that would change the warehouse or write files;
:mod:`.result_formats` writes results as a table, CSV or JSON; :mod:`.sql`
is ``tracehouse sql`` over them and :mod:`.compare_runs` the ``tracehouse
compare`` query.
"""

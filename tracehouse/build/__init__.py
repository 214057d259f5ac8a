"""``tracehouse build``: the dbt project run on a warehouse.

:mod:`.dbt` runs dbt in-process under the build lock and publishes the
database, after :mod:`.preconditions` (resource settings, a loaded lake of
today's format) and with the options :mod:`.dbt_arguments` reads and adds;
:mod:`.state` decides when a plain build may skip or narrow;
:mod:`.stale` which per-trace tables a changed project makes stale;
:mod:`.parse_cache` keeps dbt's parse between warehouses; :mod:`.freshness`
tells which loaded traces no build has seen yet; :mod:`.dbt_import` imports
dbt without its slow optional grammars.
"""

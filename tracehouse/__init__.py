"""tracehouse: trace files → Parquet lake → dbt marts → reports.

The distribution's namespace. Every layer is a subpackage here and this
module imports none of them, so importing ``tracehouse.core`` pulls in
nothing above it. The layers, lowest first (``tests/test_dependencies.py``
fails on an import that points up, and on any cycle between packages):

1. :mod:`tracehouse.core`: what every other package needs (warehouse
   location, build lock and publishing, the topology and PP-timer formats,
   Megatron's rank groups).
2. The libraries, each importing only the core: :mod:`tracehouse.ingest`
   (files → lake), :mod:`tracehouse.build` (the dbt project → database),
   :mod:`tracehouse.simulate`, :mod:`tracehouse.commtrace` and
   :mod:`tracehouse.megatron_patch` (runs inside a Megatron job).
3. :mod:`tracehouse.query` (ad-hoc SQL over lake and marts; it names the lake
   tables from ``ingest``'s schema).
4. :mod:`tracehouse.reports` (charts, HTML, exports; reads marts through
   ``query``).
5. The entry points: :mod:`tracehouse.cli` (the ``tracehouse`` command) and
   :mod:`tracehouse.notebook` (the marts and charts in a notebook).
"""

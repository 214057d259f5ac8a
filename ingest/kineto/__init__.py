"""The Kineto (PyTorch profiler) engines: a trace file's bytes into per-trace lake tables.

One job per module:

* :mod:`~ingest.kineto.engine`: :class:`~ingest.kineto.engine.KinetoEngine`,
  the one choice of engine (CLI ``--engine``, ``$TRACEHOUSE_DECODER``, tests);
* :mod:`~ingest.kineto.read`: a file's bytes and JSON text (gzip, the
  compiled gunzip, the errors of damaged files);
* :mod:`~ingest.kineto.decode`: msgspec's typed reading and the wording of
  every decoding error;
* :mod:`~ingest.kineto.scan`: the compiled scanner's columns;
* :mod:`~ingest.kineto.columns`: the columns both native decoders fill, and
  the typed-args and category rules;
* :mod:`~ingest.kineto.arrow_tables`: Arrow columns and lake tables from values;
* :mod:`~ingest.kineto.trace_rows`: the rows every engine builds alike
  (``traces``, process groups, the rank);
* :mod:`~ingest.kineto.native`: the native engine (:func:`parse_kineto`);
* :mod:`~ingest.kineto.perfetto`: the Perfetto trace processor engine.

Nesting, flow binding and slice context are not Kineto's alone (the Nsight
reader uses them) and stay in :mod:`ingest.nesting` and
:mod:`ingest.slice_context`. This file imports nothing, so that naming the
package (the CLI's choices) costs no decoder import.
"""

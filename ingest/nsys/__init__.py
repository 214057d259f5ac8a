"""Nsight Systems exports into the lake: :mod:`.read` opens the SQLite export as Arrow
tables, :mod:`.parse` turns one GPU's activity into lake rows, :mod:`.write` (with
:mod:`.args` and :mod:`.ranges`) writes them in bounded groups, and :mod:`.load` hashes,
exports (``.nsys-rep``) and loads one file for the ingest runner, each GPU in a child
process of its own (:mod:`.child`)."""

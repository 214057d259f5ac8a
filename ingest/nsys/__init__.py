"""Nsight Systems exports into the lake: :mod:`.read` opens the SQLite export as Arrow
tables, :mod:`.parse` turns one GPU's activity into lake rows, :mod:`.load` hashes,
exports (``.nsys-rep``) and parses one file for the ingest runner."""

"""Nsight Systems exports into the lake: :mod:`.read` opens the SQLite export, :mod:`.parse`
plans it (shared tables, the GPUs, the GPU each process belongs to), :mod:`.ordered` defines
a GPU's two sides, :mod:`.slice_order` sorts a side's keys and :mod:`.fetch` reads its rows
in that order by row id ranges, and :mod:`.write` streams them into the lake a
batch at a time (:mod:`.carry`, :mod:`.launches`, :mod:`.names`, :mod:`.args`,
:mod:`.groups`, :mod:`.spill`); :mod:`.load` hashes, exports (``.nsys-rep``) and loads one
file for the ingest runner, each GPU in a child process of its own (:mod:`.child`)."""

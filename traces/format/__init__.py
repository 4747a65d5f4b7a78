"""The trace format and its I/O: schemas and versions (:mod:`.schema`), Arrow IPC, the writer and
reader of operator traces, address traces (:mod:`.addresses`), and their summaries."""

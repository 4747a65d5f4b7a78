"""A trace replayed on a chip or a system: the PIM plan (which ops run in memory), the pipeline that
streams a trace through the engine, and a system's per-device slices. Cost sits above this room."""

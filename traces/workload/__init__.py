"""What is run on the model: the run's shape (:mod:`.run`), its segments (prefill, decode, KV copy),
MoE routing, and the sharding over tensor, pipeline, expert and data parallel devices."""

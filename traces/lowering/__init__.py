"""Lowering: a model spec and a workload become ordered operators written as a trace. The one-device
lowering (:mod:`.device`) is given its parts (recurrent mixers, sparse indexer, Gemma 4's layer, the
KV copies between turns, a serving step) by composition; :mod:`.sharded` runs one per device; :mod:`.serving_step` lowers a continuous-batching step."""

"""The shipped presets (data only): chips/, systems/, collectives/ and models/, found with
``importlib.resources`` on this package (:func:`tierlab.common.paths.configs_dir`)."""

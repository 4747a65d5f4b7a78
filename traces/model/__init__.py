"""What a model is: its spec read from a Hugging Face ``config.json`` (families, layer patterns,
Gemma 4's text model), tensor shapes, dtypes and weight formats."""

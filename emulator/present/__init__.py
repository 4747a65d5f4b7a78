"""Presentation: JSON, text tables and their formatters, Parquet and plots. Nothing here counts or costs.
"""

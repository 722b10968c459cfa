"""Views: the reports the commands print and the report file embeds, built from the analyses' DataFrames.

A view lays out what the analyses decided (sections, columns, notes); it decides nothing. The CLI
(forensics.cli) parses options, calls a view and renders it (forensics.render); plots and exports sit
beside the views. Views never import the CLI (an import-linter contract in pyproject.toml).
"""

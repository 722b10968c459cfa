"""Views: report models built from the analyses' DataFrames, for the CLI to render (DESIGN.md layers)."""

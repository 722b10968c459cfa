"""Shared fixtures. Tests that need root or an apt package run in CI (root); they skip only where the
facility cannot exist, and say why."""

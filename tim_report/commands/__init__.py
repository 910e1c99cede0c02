"""CLI commands that live in their own modules (registered in tim_report.cli)."""

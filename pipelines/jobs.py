"""django-q2 jobs of the pipelines (the functions their schedules name): parse nothing, call services (STYLE rule 1)."""

from __future__ import annotations

from pipelines.renewal import renewal_project


def renew_scheduled() -> dict[str, int]:
    report = renewal_project()
    # Counts only: this runs every minute and django-q2 keeps each result.
    return {"created": len(report.created), "skipped": len(report.skipped)}

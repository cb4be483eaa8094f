"""The first run: no one can log in to the admin yet, so say how to make the first user."""

from __future__ import annotations

from django.contrib.auth import get_user_model


def has_staff_user() -> bool:
    return get_user_model().objects.filter(is_staff=True, is_active=True).exists()


def first_run_hint(*, admin_url: str) -> str:
    """One line for the terminal when no staff user exists yet; "" once one does."""
    if has_staff_user():
        return ""
    return (
        f"First run: no admin user yet. Create one with `make user` (in another terminal), "
        f"then log in at {admin_url} and pair a browser (Plugin clients > Pair a browser)."
    )

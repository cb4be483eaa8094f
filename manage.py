#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conductor_site.settings")
    from django.core.management import execute_from_command_line
    from django.db import DatabaseError

    try:
        execute_from_command_line(sys.argv)
    except DatabaseError as exc:
        from conductor_site.unmigrated import unmigrated_hint

        hint = unmigrated_hint(exc, command=sys.argv[1] if len(sys.argv) > 1 else "")
        if hint is None:
            raise
        sys.stderr.write(hint + "\n")
        sys.exit(1)


if __name__ == "__main__":
    main()

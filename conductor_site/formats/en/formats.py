"""One time format in the console: ISO-like with the zone, whatever page shows it.

Django's English formats ("Dec. 3, 2026, 6:48 a.m.") would otherwise stand
beside the console's own on the next page. ``FORMAT_MODULE_PATH`` in the
settings points here; the admin's lists, read-only fields and the ``date``
filter's named formats all read these.
"""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"

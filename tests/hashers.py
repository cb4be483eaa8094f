"""A password hasher for the test process only.

Django's PBKDF2 hasher spends about a second of CPU per password on these
machines, and the suite creates and checks a password in hundreds of tests.
This one writes the same ``pbkdf2_sha256`` hashes with far fewer iterations;
the iteration count is stored in each hash, so a server started by a test
(with the production hashers) still verifies a password the test set.
"""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000

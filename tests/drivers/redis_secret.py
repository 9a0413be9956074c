"""The password of the suite's password-protected Redis: one place, read by the fixtures and the tests that
grep lease files for it (importing it from `conftest` breaks when pytest loads another folder's conftest)."""

REDIS_PASSWORD = "Zq9s3cr3tPW77x"

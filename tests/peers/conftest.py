"""The peers' own test suites (suites/) and the import shim (shim/) are run by
``.ci/peer-suites``, in a directory of their own with the peers' sdists: never collected here."""

collect_ignore = ["suites", "shim"]

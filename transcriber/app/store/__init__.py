"""The job store: what a job is (domain.py, spec.py), the store's protocol and ``connect``
(jobstore.py), its rules (policy.py), leases (lease.py), and the SQLite implementation
(sqlite_store.py, sqlite_db.py, migrations.py)."""

"""Speaker labels: who speaks when (placeholder; the speakers room is assembled at merge)."""

"""Reads of files with a deadline: every read the tool makes of a user's file (a stat, a
listing, a read) is made by a reader process (readerproc.py) and bounded (bounded.py), so a hung
network mount fails one file with a clear error instead of hanging the command."""

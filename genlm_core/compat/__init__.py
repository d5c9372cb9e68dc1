"""genlm-backend's and genlm-bytes' old import paths, kept so that migrating is a rename."""

"""Plugins that ship inside genlm-core, registered through the same hooks as any other."""

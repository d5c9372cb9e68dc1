"""genlm-dummy: the worked example of docs/plugins.md, a complete backend plugin."""

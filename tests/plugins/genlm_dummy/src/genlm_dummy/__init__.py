"""genlm-dummy: the worked example of docs/plugin-quickstart.md, a complete backend plugin."""

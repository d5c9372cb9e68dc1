pytest_plugins = ["genlm_core.testing.pytest_plugin"]  # markers and fixtures of genlm-core

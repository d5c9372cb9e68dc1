"""The exact byte state, ``ExactByteState`` (:mod:`.state`), and its canonical filters."""

"""The exact byte state, ``ExactByteState`` ([`.state`][]), and its canonical filters."""

"""Running the load: the run, its load processes and Ray actors, the event loop and its health, the drain."""

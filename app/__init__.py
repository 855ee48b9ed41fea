"""The composition root: the `rampwatch` command line, and the wiring of a run (scenario →
runner → recorder → UI bridge), including the run process the live UI forks."""

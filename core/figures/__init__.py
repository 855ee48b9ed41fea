"""What a run's records, samples and ticks add up to: the one-second series, the summary,
the knee and its explanation, the step, turn, configuration and class tables, the sweep's
table. Below both the sender (`loadgen`) and the recording (`record`), so that reading a
recording never reaches into the code that sends."""

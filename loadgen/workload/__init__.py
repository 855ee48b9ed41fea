"""Building the requests: scenarios, arrival schedules, prompts, datasets, sessions, traces, mixtures."""

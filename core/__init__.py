"""What every other package shares: errors, the run's timeline and snapshot types, the
secret redaction, the simulator's tokenizer, the version. Imports no other rampwatch package."""

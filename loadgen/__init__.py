"""Everything that talks to the server: schedules, client, scraper, runs, statistics."""

"""`rampwatch ps`: this user's runs on this host (``app.runs``)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from rampwatch.app import runs
from rampwatch.core import strict_json


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object a run, with the state file's fields")


def main(args: argparse.Namespace) -> int:
    directory = runs.checked_dir(create=False)
    listed = runs.list_runs(directory)
    if args.json:
        for state in listed:
            print(strict_json.dumps({**asdict(state), "shown_state": runs.shown_state(state, directory)}))
        return 0
    if not listed:
        print("no runs (rampwatch run … --detach starts one in the background)")
        return 0
    print(runs.format_table(listed, directory=directory))
    return 0

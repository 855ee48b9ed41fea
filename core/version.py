from importlib.metadata import PackageNotFoundError, version


def rampwatch_version() -> str:
    try:
        return version("rampwatch")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"

"""A run's wiring, whichever way it is shown, by phase:

- ``plan``: the inputs checked and the outputs claimed before anything starts;
- ``server``: the server the run starts (``--serve``, or the embedded simulator) and its start;
- ``build``: the run and its recording writer over a plan whose server is ready;
- ``finish``: the final figures (read back from the recording), summary, result JSON, exit code;
- ``headless``: the headless loop and its progress lines;
- ``prometheus_port``: ``--prometheus-port``'s address checked in the plan, before anything starts;
- ``prometheus_linger``: ``--prometheus-port`` served on after the run until scraped.

The live screen (``app.live``) and the sweep (``app.sweep``) use the same phases.
"""

from rampwatch.app.session.build import (
    PreparedRun,
    attach_hello,
    build_run,
    discover_model,
    load_senders,
    note_failed_start,
    prepare_run,
    prometheus_targets,
    record_failed_start,
    run_progress,
)
from rampwatch.app.session.finish import (
    INTERRUPTED_EXIT,
    SERVER_EXITED_EXIT,
    FinalFigures,
    final_figures,
    finish_run,
    write_result_json,
)
from rampwatch.app.session.headless import (
    PROGRESS_SPARE_BINS,
    SERVER_WATCH_INTERVAL_S,
    ProgressPrinter,
    progress_line,
    run_headless,
    watch_server,
)
from rampwatch.app.session.plan import (
    GpuTelemetryPlan,
    RunPlan,
    check_outputs,
    drain_policy,
    gpu_telemetry,
    is_local_host,
    nvml_missing,
    plan_run,
    recorded_options,
    recording_file,
    result_json_path,
    unused_default_path,
)
from rampwatch.app.session.server import (
    SERVER_TAIL_SHOWN,
    free_port,
    print_server_tail,
    serve_command,
    serving_sim,
    sim_serve_text,
    start_server,
)

__all__ = [
    "INTERRUPTED_EXIT",
    "PROGRESS_SPARE_BINS",
    "SERVER_EXITED_EXIT",
    "SERVER_TAIL_SHOWN",
    "SERVER_WATCH_INTERVAL_S",
    "FinalFigures",
    "GpuTelemetryPlan",
    "PreparedRun",
    "ProgressPrinter",
    "RunPlan",
    "attach_hello",
    "build_run",
    "check_outputs",
    "discover_model",
    "drain_policy",
    "final_figures",
    "finish_run",
    "free_port",
    "gpu_telemetry",
    "is_local_host",
    "load_senders",
    "note_failed_start",
    "nvml_missing",
    "plan_run",
    "prepare_run",
    "prometheus_targets",
    "progress_line",
    "print_server_tail",
    "record_failed_start",
    "recorded_options",
    "recording_file",
    "result_json_path",
    "run_headless",
    "run_progress",
    "serve_command",
    "serving_sim",
    "sim_serve_text",
    "start_server",
    "unused_default_path",
    "watch_server",
    "write_result_json",
]

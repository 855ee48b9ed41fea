"""The server's side: /metrics and DCGM scrapes, backends' metric names, NVML, a server the run starts."""

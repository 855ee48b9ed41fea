"""Everything that sends the load and talks to the server, in four subpackages: the
workload (`workload`), HTTP and SSE (`transport`), the server's side (`server`) and the
run (`run`). Its surface is theirs; the figures are `core.figures`."""

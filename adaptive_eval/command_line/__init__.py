"""The command line: the parser (:mod:`.cli`), what each command does (:mod:`.commands`), the
watcher process a command runs under (:mod:`.supervise`) and the Ray job entry (:mod:`.ray_job`)."""

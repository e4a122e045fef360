"""What the control plane and the agents hand each other, both ends of each: the job
spec, the instance's layout and state, the log format, exec and shell frames, the fork
server's lines, wake-ups. Nothing here runs a job or a backend."""

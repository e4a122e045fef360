"""The instance agent: root on the host, one per instance. It lays out the job's tree,
stages its data, runs it in the sandbox, follows it and uploads what it leaves. It never
talks to the server: everything it is told and reports is in `wire`."""

"""The job sandbox: bubblewrap, user and network namespaces, cgroups, seccomp, host-wide
uids. Used by the agent (to confine a job) and by the local backend (to clean up)."""
